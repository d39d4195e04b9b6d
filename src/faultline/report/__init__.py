"""Fault campaigns and their robustness report: MAS-FIRE's RS, O, L and S from the journals;
the structured-reflection reward of a turn in the reflect/call/final form.

`campaign_report(folder)` reads a campaign folder (a manifest and one journal per cell);
the behaviour detectors (`DETECTORS`) find fault-tolerant behaviours in an episode's
messages, each in one or more of the four tiers. Nothing here talks to NATS: a campaign folder
copied to another machine gives the same report there. `turn_reward` scores one turn
against a reference with Tool-Reflection-Bench's decomposition, `reward_stats` sums many up.
With judged behaviours a `BehaviourAnnotator` asks a model judge to label each faulted
episode's behaviours instead (`annotate_episodes`), several tiers each, the detectors'
sightings its evidence. `memory_ablation(journals)` measures runs by the memory settings
their episodes recorded (MemToolAgent's ablation).
"""

from faultline.core import SIM_NOTE, SIM_SYSTEM_NOTE
from faultline.report._annotator import (
    ANNOTATIONS,
    ANSWER_FORMAT,
    Annotation,
    BehaviourAnnotator,
    EpisodeCase,
    JudgedBehaviour,
    annotate_episodes,
    annotation_request,
    episode_case,
    parse_annotation,
)
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
from faultline.report._memory_ablation import MemoryAblation, MemorySetting, SettingRow, memory_ablation
from faultline.report._metrics import (
    BEHAVIOUR_SOURCES,
    DEFINITIONS,
    RS_VARIANTS,
    SIM_JUDGE_NOTE,
    BehaviourRow,
    BehaviourSource,
    CampaignReport,
    CellResult,
    DefenseEffect,
    FaultRow,
    NotAnnotated,
    ReportSummary,
    RsVariant,
    SkipReason,
    TierMarks,
    TierRow,
    campaign_report,
    episode_cases,
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
    "ANNOTATIONS",
    "ANSWER_FORMAT",
    "Annotation",
    "BehaviourAnnotator",
    "EpisodeCase",
    "JudgedBehaviour",
    "annotate_episodes",
    "annotation_request",
    "episode_case",
    "parse_annotation",
    "BEHAVIOUR_SOURCES",
    "SIM_JUDGE_NOTE",
    "BehaviourSource",
    "NotAnnotated",
    "episode_cases",
    "MemoryAblation",
    "MemorySetting",
    "SettingRow",
    "memory_ablation",
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
    "SkipReason",
    "DEFINITIONS",
    "RS_VARIANTS",
    "SIM_NOTE",
    "SIM_SYSTEM_NOTE",
    "Similarity",
    "TIERS",
    "Tier",
    "TierMarks",
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
