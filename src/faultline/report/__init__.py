"""Fault campaigns and their robustness report: MAS-FIRE's RS, O, L and S from the journals.

`campaign_report(folder)` reads a campaign folder (a manifest and one journal per cell);
the behaviour detectors (`DETECTORS`) find fault-tolerant behaviours in an episode's
messages, each in one of the four tiers. Nothing here talks to NATS: a campaign folder
copied to another machine gives the same report there.
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

__all__ = [
    "BASELINE",
    "Behaviour",
    "BehaviourRow",
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
    "ReportSummary",
    "RsVariant",
    "DEFINITIONS",
    "RS_VARIANTS",
    "SIM_NOTE",
    "TIERS",
    "Tier",
    "TierRow",
    "campaign_report",
    "detect",
    "plan_cells",
    "read_cell",
    "read_manifest",
    "write_manifest",
]
