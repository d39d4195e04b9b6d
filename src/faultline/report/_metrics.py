"""MAS-FIRE's robustness metrics over a campaign's journals.

A unit is one (task, trial) of the campaign: every cell runs the same units with the
same seeds. Per fault type f and defense set d (the baseline is that defense set's
fault-free cell):

- RS_f = N_f,success / |T_base| (equation 1): the units f's cell solved over the units the
  baseline solved. As the paper defines it, N_f,success counts every unit solved under f,
  so RS_f exceeds 1 when f's cell solved units the baseline failed. The variant
  `baseline-solved` counts only the units of T_base solved under f: the share of the
  baseline's successes that survived the fault, at most 1.
- O_f = N_trigger / N_total, L_f = N_fixed / N_trigger, S_f = N_final_success / N_trigger
  (equation 2): N_total counts the units where a fault was applied, N_trigger those of
  them where a fault-tolerant behaviour fired, N_fixed those where one repaired the
  fault locally, N_final_success those that were solved.

Each tier has its own (O, L, S), counting only that tier's behaviours (Figure 4's shape).
Every ratio carries its counts; a ratio over nothing is None.

A faulted unit whose agents sent and asked their models exactly what they did in the
baseline's run of the same unit had a fault with no effect: it applied to a message no
agent acted on (a duplicate a defense dropped, a message its recipient ignores). Such a
unit is counted apart (`no_effect`): solving it says nothing of tolerating the fault.
The comparison is exact on a deterministic model (`sim`, `scripted`); with a sampling
model two runs differ anyway, so few units ever count.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import msgspec

from faultline._errors import ConfigError
from faultline.core import RUNNER, Envelope, FaultApplied, Recording, body_digest
from faultline.faults import OPERATOR
from faultline.journal import JournalReader, JournalRow
from faultline.report._behaviours import DETECTORS, TIERS, Behaviour, Tier, detect
from faultline.report._campaign import BASELINE, NO_DEFENSE, CampaignCell, CampaignManifest, read_manifest

Unit = tuple[str, int]
"""(task, trial)."""

RsVariant = Literal["paper", "baseline-solved"]
"""How RS_f counts N_f,success: every unit solved under the fault, or only those the baseline solved too."""

RS_VARIANTS: dict[RsVariant, str] = {
    "paper": "units the faulted run solved over units the fault-free baseline solved (equation 1); above 1 when"
    " the faulted run solved units the baseline failed",
    "baseline-solved": "of the units the fault-free baseline solved, the share the faulted run solved too (at most 1)",
}
"""Each way of counting RS_f, with its definition."""

DEFINITIONS = {
    "RS_f": RS_VARIANTS["paper"],
    "O_f": "of the faulted units, the share where a fault-tolerant behaviour fired (equation 2)",
    "L_f": "of those, the share where a behaviour repaired the fault locally",
    "S_f": "of those, the share that were solved in the end",
    "no effect": "faulted units whose agents did exactly what they did without the fault: it touched nothing they"
    " acted on, so the unit says nothing of tolerance",
}
"""What each column of the robustness table means, for the terminal and the HTML report."""

EVIDENCE_KINDS = (
    "fault_applied", "defense_fired", "tool_call", "tool_result", "assistant_turn", "user_turn", "context_request",
    "context_reply",
)  # fmt: skip
"""The body kinds a detector reads (calls and requests for the causal chains through them); the report decodes
no other row."""

SIM_NOTE = "sim follows each task's ground truth: its numbers measure the runtime's mechanisms, not a model"


def ratio(num: int, den: int) -> float | None:
    return num / den if den else None


class _Tolerance(msgspec.Struct, frozen=True, kw_only=True):
    """Equation 2's counts and ratios of one fault type under one defense set."""

    fault: str
    defense: str
    injected: int
    """N_total: units where a fault was applied."""
    triggered: int
    fixed: int
    final_success: int
    o: float | None
    l: float | None  # noqa: E741 - the paper's name
    s: float | None


class FaultRow(_Tolerance, frozen=True, kw_only=True, tag="fault", tag_field="type"):
    """RS, O, L and S of one fault type under one defense set, with the counts behind each ratio."""

    units: int
    base_solved: int
    """|T_base|: units the same defense set's baseline solved."""
    solved: int
    """N_f,success: units solved under the fault (with `baseline-solved`, only those of T_base)."""
    rs: float | None
    no_effect: int = 0
    """Faulted units whose agents did exactly what they did in the baseline (see the module docstring)."""


class TierRow(_Tolerance, frozen=True, kw_only=True, tag="tier", tag_field="type"):
    """(O, L, S) of one fault type under one defense set, counting one tier's behaviours only."""

    tier: Tier


class BehaviourRow(msgspec.Struct, frozen=True, kw_only=True, tag="behaviour", tag_field="type"):
    """How often one behaviour fired under one fault type (Table 2's shape): units, repaired, solved."""

    fault: str
    defense: str
    behaviour: str
    tier: Tier
    units: int
    repaired: int
    solved: int


class DefenseEffect(msgspec.Struct, frozen=True, kw_only=True, tag="defense_effect", tag_field="type"):
    """What one defense changes in RS_f: without it, with it, and the difference."""

    fault: str
    defense: str
    rs_off: float | None
    rs_on: float | None
    delta: float | None


class ReportSummary(msgspec.Struct, frozen=True, kw_only=True, tag="summary", tag_field="type"):
    domain: str
    """The domain the campaign ran on, or the system of one's own (`package.module:Class`)."""
    model: str
    tasks: int
    trials: int
    cells: int
    cells_done: int
    episodes: int
    behaviours: int
    note: str = ""
    rs: RsVariant = "paper"
    """How RS_f counted N_f,success (`RS_VARIANTS`)."""


class CampaignReport(msgspec.Struct, frozen=True, kw_only=True):
    faults: list[FaultRow]
    tiers: list[TierRow]
    behaviours: list[BehaviourRow]
    effects: list[DefenseEffect]
    summary: ReportSummary

    def lines(self) -> Iterator[FaultRow | TierRow | BehaviourRow | DefenseEffect | ReportSummary]:
        """Every row, then the summary: what `report --json` prints, one per line."""
        yield from self.faults
        yield from self.tiers
        yield from self.behaviours
        yield from self.effects
        yield self.summary

    def definitions(self) -> dict[str, str]:
        """What each column of the robustness table means, RS_f as this report counted it."""
        return {**DEFINITIONS, "RS_f": RS_VARIANTS[self.summary.rs]}


class CellResult(msgspec.Struct, frozen=True, kw_only=True):
    """What one cell's journal says per unit: solved, faulted, and the behaviours seen."""

    solved: set[Unit]
    injected: set[Unit]
    behaviours: dict[Unit, list[Behaviour]]
    traces: dict[Unit, str] = {}
    """Per unit, a digest of what its agents sent and asked their models (`trace_digest`)."""

    @property
    def units(self) -> int:
        return len(self.solved | self.injected | set(self.behaviours))


def read_cell(journal: Path, run_id: str = "") -> tuple[CellResult, int]:
    """One cell's units from the journal's episodes of run `run_id` (all: ""), and how many completed."""
    solved: set[Unit] = set()
    injected: set[Unit] = set()
    behaviours: dict[Unit, list[Behaviour]] = {}
    traces: dict[Unit, str] = {}
    with JournalReader(journal, expand_requests=False) as reader:
        prefix = f"{run_id}-" if run_id else ""
        episodes = {e.episode: e for e in reader.episodes() if e.outcome is not None and e.episode.startswith(prefix)}
        for episode, rows in reader.by_episode(list(episodes) if prefix else None):
            summary = episodes.get(episode)
            if summary is None:
                continue
            unit = (summary.task, summary.trial)
            traces[unit] = trace_digest(rows)
            if summary.outcome == "success":
                solved.add(unit)
            if summary.faults:
                injected.add(unit)
                steps: list[tuple[int, Envelope]] = [(r.pos, r.envelope()) for r in rows if r.kind in EVIDENCE_KINDS]
                behaviours[unit] = detect(steps)
    return CellResult(solved=solved, injected=injected, behaviours=behaviours, traces=traces), len(episodes)


def trace_digest(rows: list[JournalRow]) -> str:
    """What an episode's agents did, comparable across runs: each message an agent sent (who, what kind, its body;
    for a faulted one, what the agent sent, not what the fault delivered) and each model request it made (its
    digest), in journal order. Ids, times and the runtime's own rows (starts, completions) are left out."""
    parts = hashlib.sha256()
    faults = {  # on messages; a fault on a model request changed no message
        row.pos: body
        for row in rows
        if row.kind == "fault_applied" and isinstance(body := row.envelope().body, FaultApplied) and body.model_call < 0
    }
    made_by_faults = {str(result.get("id", "")) for f in faults.values() for result in f.results}
    for row in rows:
        if row.kind == "fault_applied":
            if row.pos in faults:  # what the agent sent, not what the fault delivered
                parts.update(_sent(faults[row.pos].original).encode())
            continue
        if row.sender in (RUNNER, OPERATOR) or row.kind in _NOT_ACTS or row.id in made_by_faults:
            continue
        if row.kind == "recording":
            recording = row.envelope().body
            if not (isinstance(recording, Recording) and recording.call == "llm"):
                continue
            parts.update(f"{row.sender}|llm|{recording.request_digest}\n".encode())
        else:
            parts.update(f"{row.sender}|{row.kind}|{row.recipient}|{row.topic}|{row.body_digest}\n".encode())
    return parts.hexdigest()


def _sent(original: dict[str, Any]) -> str:
    """A faulted message as its sender sent it, in a trace's terms (the whole record when it is not an envelope)."""
    try:
        sent = msgspec.convert(original, Envelope)
    except msgspec.ValidationError:
        return json.dumps(original, sort_keys=True, default=str) + "\n"
    return f"{sent.sender}|{sent.kind}|{sent.recipient}|{sent.topic}|{body_digest(sent.body)}\n"


_NOT_ACTS = frozenset({"fault_skipped", "defense_fired", "episode_completed", "no_output"})
"""Rows that record the runtime's doing, not an agent's."""


def _tolerance(cell: CellResult, tier: Tier | None) -> dict[str, Any]:
    """N_total, N_trigger, N_fixed, N_final_success and O, L, S over the behaviours of `tier` (every tier: None)."""
    triggered = fixed = success = 0
    for unit in cell.injected:
        seen = [b for b in cell.behaviours.get(unit, []) if tier is None or b.tier == tier]
        if seen:
            triggered += 1
            fixed += any(b.repaired for b in seen)
            success += unit in cell.solved
    injected = len(cell.injected)
    return {
        "injected": injected,
        "triggered": triggered,
        "fixed": fixed,
        "final_success": success,
        "o": ratio(triggered, injected),
        "l": ratio(fixed, triggered),
        "s": ratio(success, triggered),
    }


def fault_row(cell: CampaignCell, result: CellResult, base: CellResult, rs: RsVariant = "paper") -> FaultRow:
    solved = len(result.solved & base.solved if rs == "baseline-solved" else result.solved)
    unchanged = {u for u in result.injected if u in base.traces and result.traces.get(u) == base.traces[u]}
    return FaultRow(
        fault=cell.fault,
        defense=cell.defense,
        units=result.units,
        base_solved=len(base.solved),
        solved=solved,
        rs=ratio(solved, len(base.solved)),
        no_effect=len(unchanged),
        **_tolerance(result, None),
    )


def tier_rows(cell: CampaignCell, result: CellResult) -> list[TierRow]:
    return [TierRow(fault=cell.fault, defense=cell.defense, tier=tier, **_tolerance(result, tier)) for tier in TIERS]


def behaviour_rows(cell: CampaignCell, result: CellResult) -> list[BehaviourRow]:
    units: dict[str, set[Unit]] = defaultdict(set)
    repaired: dict[str, set[Unit]] = defaultdict(set)
    for unit, seen in result.behaviours.items():
        for b in seen:
            units[b.name].add(unit)
            if b.repaired:
                repaired[b.name].add(unit)
    return [
        BehaviourRow(
            fault=cell.fault,
            defense=cell.defense,
            behaviour=name,
            tier=DETECTORS[name].tier,
            units=len(units[name]),
            repaired=len(repaired[name]),
            solved=len(units[name] & result.solved),
        )  # fmt: skip
        for name in DETECTORS
        if units[name]
    ]


def _difference(on: float | None, off: float | None) -> float | None:
    return None if on is None or off is None else on - off


def defense_effects(rows: list[FaultRow]) -> list[DefenseEffect]:
    """Each defense's RS_f beside RS_f without defenses, for every fault both were run with."""
    off = {r.fault: r.rs for r in rows if r.defense == NO_DEFENSE}
    return [
        DefenseEffect(
            fault=r.fault,
            defense=r.defense,
            rs_off=off[r.fault],
            rs_on=r.rs,
            delta=_difference(r.rs, off[r.fault]),
        )
        for r in rows
        if r.defense != NO_DEFENSE and r.fault in off
    ]


def campaign_report(folder: Path, *, rs: RsVariant = "paper") -> CampaignReport:
    """The report of a campaign folder, over its finished cells (an unfinished cell is left out); `rs` says how
    RS_f counts the units solved under a fault (`RS_VARIANTS`)."""
    if rs not in RS_VARIANTS:
        raise ConfigError(f"rs={rs!r}: RS_f is counted one of these ways: {', '.join(RS_VARIANTS)}")
    manifest: CampaignManifest = read_manifest(folder)
    results: dict[str, CellResult] = {}
    episodes = 0
    for cell in manifest.cells:
        if cell.done:
            results[cell.name], count = read_cell(manifest.journal_of(folder, cell), cell.run_id)
            episodes += count
    faults: list[FaultRow] = []
    tiers: list[TierRow] = []
    behaviours: list[BehaviourRow] = []
    for cell in manifest.cells:
        base = results.get(CampaignCell(fault=BASELINE, defense=cell.defense).name)
        result = results.get(cell.name)
        if cell.fault == BASELINE or result is None or base is None:
            continue
        faults.append(fault_row(cell, result, base, rs))
        tiers.extend(tier_rows(cell, result))
        behaviours.extend(behaviour_rows(cell, result))
    settings = manifest.settings
    summary = ReportSummary(
        domain=settings.system or settings.domain,
        model=settings.model,
        tasks=len(settings.tasks),
        trials=settings.trials,
        cells=len(manifest.cells),
        cells_done=len(results),
        episodes=episodes,
        behaviours=sum(len(seen) for r in results.values() for seen in r.behaviours.values()),
        note=SIM_NOTE if settings.model == "sim" else "",
        rs=rs,
    )
    return CampaignReport(
        faults=faults, tiers=tiers, behaviours=behaviours, effects=defense_effects(faults), summary=summary
    )
