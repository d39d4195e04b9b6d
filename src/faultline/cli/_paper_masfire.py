"""MAS-FIRE's Table 2 and Figure 4, laid out from a campaign's report (`faultline.report.campaign_report`).

Table 2: a row per fault category and fault-tolerant behaviour, a column per tier (Mechanism, Rule,
Prompt, Reasoning), ✓ where the behaviour mitigated the fault in that tier, ✗ where it was activated
there and did not resolve it, empty where it was not activated; the paper's three action faults share
one category. Figure 4: per fault, (O, L, S) of each tier. Nothing is computed here that the report
has not: the rows are the report's behaviour and tier rows, grouped and ordered as the paper does.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from faultline.cli._paper import PaperReport, PaperTable, share
from faultline.report import TIERS, BehaviourRow, CampaignReport, Tier, TierMarks, TierRow

CATEGORIES: dict[str, str] = {
    "inexecutable_plan": "Inexecutable Plan",
    "critical_information_loss": "Critical Info Loss",
    "memory_loss": "Memory Loss",
    "context_length_violation": "Context Length Violation",
    "hallucination": "Hallucination",
    "parameter_filling_error": "Action Fault",
    "parameter_format_error": "Action Fault",
    "tool_selection_error": "Action Fault",
    "role_ambiguity": "Role Ambiguity",
    "blind_trust": "Blind Trust",
    "instruction_logic_conflict": "Instruction Logic Conflict",
    "instruction_ambiguity": "Instruction Ambiguity",
    "storm": "Message Storm",
    "cycle": "Message Cycle",
    "broadcast": "Broadcast Amplification",
}
"""Each MAS-FIRE fault type's row group in Table 2, in the paper's order (other fault types follow, by name)."""
TIER_NAMES: dict[Tier, str] = {"mechanism": "Mechanism", "rule": "Rule", "prompt": "Prompt", "reasoning": "Reasoning"}


class Table2Row(msgspec.Struct, frozen=True, kw_only=True):
    """One behaviour under one fault category: its marks per tier it was activated in, over the category's units."""

    category: str
    faults: list[str]
    """The fault types of the category the behaviour was seen under."""
    defense: str
    behaviour: str
    by_tier: dict[Tier, TierMarks]
    """Units where it mitigated the fault in that tier (✓, `repaired`) and where it failed there (✗, `failed`)."""
    units: int
    solved: int


def _category(fault: str, defense: str) -> str:
    name = CATEGORIES.get(fault, fault)
    return f"{name} (+{defense})" if defense else name


def _order(fault: str) -> tuple[int, str]:
    """The paper's order of fault types, the others after them by name."""
    return (list(CATEGORIES).index(fault), "") if fault in CATEGORIES else (len(CATEGORIES), fault)


def table2_rows(behaviours: Iterable[BehaviourRow]) -> list[Table2Row]:
    """The report's behaviour rows by category: one row per (category, defense, behaviour), the three action
    faults' rows of one behaviour added up."""
    grouped: dict[tuple[str, str, str], list[BehaviourRow]] = {}
    for b in sorted(behaviours, key=lambda b: (b.defense, _order(b.fault))):
        grouped.setdefault((_category(b.fault, b.defense), b.defense, b.behaviour), []).append(b)
    return [
        Table2Row(
            category=category,
            faults=list(dict.fromkeys(b.fault for b in rows)),
            defense=defense,
            behaviour=behaviour,
            by_tier={
                tier: TierMarks(
                    repaired=sum(b.by_tier[tier].repaired for b in rows if tier in b.by_tier),
                    failed=sum(b.by_tier[tier].failed for b in rows if tier in b.by_tier),
                )
                for tier in TIERS
                if any(tier in b.by_tier for b in rows)
            },
            units=sum(b.units for b in rows),
            solved=sum(b.solved for b in rows),
        )
        for (category, defense, behaviour), rows in grouped.items()
    ]


def tier_marks(marks: TierMarks | None) -> str:
    """A behaviour's marks in one tier with their counts (✓ n, ✗ n); empty where it was not activated there."""
    if marks is None:
        return ""
    shown = (f"✓ {marks.repaired}" if marks.repaired else "", f"✗ {marks.failed}" if marks.failed else "")
    return " ".join(mark for mark in shown if mark)


def _table2(report: CampaignReport, source: str) -> PaperTable:
    rows = table2_rows(report.behaviours)
    grid = [
        [
            r.category if i == 0 or rows[i - 1].category != r.category else "",
            r.behaviour,
            *(tier_marks(r.by_tier.get(tier)) for tier in TIERS),
            f"{r.solved}/{r.units}",
        ]
        for i, r in enumerate(rows)
    ]
    ends = frozenset(i for i in range(len(rows) - 1) if rows[i + 1].category != rows[i].category)
    return PaperTable(
        kind="table2",
        title="MAS-FIRE Table 2: fault-tolerant behaviours and their tiers",
        head=["Fault Category", "Agent Behaviour", *TIER_NAMES.values(), "solved"],
        rows=grid,
        records=rows,
        caption="✓ n: units where it mitigated the fault in that tier; ✗ n: units where it was activated there and"
        f" did not resolve it; empty: not activated; solved: units solved of those it was seen in. {source}",
        sections=ends,
        right=6,
    )


def _figure4(report: CampaignReport) -> PaperTable:
    cells: dict[tuple[str, Tier], TierRow] = {}
    for t in sorted(report.tiers, key=lambda t: (t.defense, _order(t.fault))):
        cells[_column(t), t.tier] = t
    columns = list(dict.fromkeys(label for label, _ in cells))
    grid = [
        [TIER_NAMES[tier], metric, *(share(getattr(cells[c, tier], metric.lower())) for c in columns)]
        for tier in TIERS
        for metric in ("O", "L", "S")
    ]
    missing = not_run(report)
    gray = f". Not run here (the paper's gray columns): {len(missing)} MAS-FIRE fault types" if missing else ""
    return PaperTable(
        kind="figure4",
        title="MAS-FIRE Figure 4: (O, L, S) of each fault-tolerance tier, per fault",
        head=["tier", "", *columns],
        rows=grid,
        records=[{k: v for k, v in msgspec.to_builtins(t).items() if k != "type"} for t in cells.values()],
        caption="O: of the faulted units, the share where a behaviour of the tier fired; L: of those, the share it"
        " repaired locally; S: of those, the share solved in the end (equation 2, that tier's behaviours only);"
        f" -: a ratio over nothing{gray}",
        sections=frozenset({2, 5, 8}),
        right=2,
    )


def not_run(report: CampaignReport) -> list[str]:
    """The MAS-FIRE fault types the campaign did not run."""
    ran = {t.fault for t in report.tiers}
    return [f for f in CATEGORIES if f not in ran]


def _column(t: TierRow) -> str:
    return f"{t.fault}+{t.defense}" if t.defense else t.fault


def masfire_report(report: CampaignReport, campaign: str, source: str) -> PaperReport:
    """Table 2 and Figure 4 of the campaign folder `campaign`'s report; `source` says where its behaviours came
    from (the rule detectors or the judge)."""
    summary = {k: v for k, v in msgspec.to_builtins(report.summary).items() if k not in ("type", "note")}
    return PaperReport(
        tables=[_table2(report, source), _figure4(report)],
        summary={"paper": "masfire", "inputs": [campaign], **summary, "not_run": not_run(report)},
        note=report.summary.note,
    )
