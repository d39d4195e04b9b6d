"""Fault campaigns and their robustness report: MAS-FIRE's RS, O, L and S from the journals;
the structured-reflection reward of a turn in the reflect/call/final form.

`campaign_report(folder)` reads a campaign folder (a manifest and one journal per cell);
the behaviour detectors (`DETECTORS`) find fault-tolerant behaviours in an episode's
messages, each in one of the four tiers. Nothing here talks to NATS: a campaign folder
copied to another machine gives the same report there. `turn_reward` scores one turn
against a reference with Tool-Reflection-Bench's decomposition, `reward_stats` sums many up.
"""

from faultline.report._behaviours import DETECTORS, TIERS, Behaviour, Detector, EpisodeTrace, Tier, detect
from faultline.report._campaign import (
    BASELINE,
    MANIFEST,
    NO_DEFENSE,
    CampaignCell,
    CampaignManifest,
    CampaignSettings,
    plan_cells,
    read_manifest,
    write_manifest,
)
from faultline.report._metrics import (
    DEFINITIONS,
    RS_VARIANTS,
    SIM_NOTE,
    BehaviourRow,
    CampaignReport,
    CellResult,
    DefenseEffect,
    FaultRow,
    ReportSummary,
    RsVariant,
    TierRow,
    campaign_report,
    read_cell,
)
from faultline.report._reward import (
    COMPONENTS,
    ComponentStats,
    PartWeights,
    RewardSettings,
    Similarity,
    TurnReward,
    reward_stats,
    text_similarity,
    turn_reward,
)

__all__ = [
    "BASELINE",
    "Behaviour",
    "BehaviourRow",
    "COMPONENTS",
    "ComponentStats",
    "CampaignCell",
    "CampaignManifest",
    "CampaignReport",
    "CampaignSettings",
    "CellResult",
    "DETECTORS",
    "DefenseEffect",
    "Detector",
    "EpisodeTrace",
    "FaultRow",
    "MANIFEST",
    "NO_DEFENSE",
    "PartWeights",
    "ReportSummary",
    "RewardSettings",
    "RsVariant",
    "DEFINITIONS",
    "RS_VARIANTS",
    "SIM_NOTE",
    "Similarity",
    "TIERS",
    "Tier",
    "TierRow",
    "TurnReward",
    "campaign_report",
    "detect",
    "plan_cells",
    "read_cell",
    "read_manifest",
    "reward_stats",
    "text_similarity",
    "turn_reward",
    "write_manifest",
]
