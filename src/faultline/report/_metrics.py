"""MAS-FIRE's robustness metrics over a campaign's journals.

A unit is one (task, trial) of the campaign: every cell runs the same units with the
same seeds. Per fault type f and defense set d (the baseline is that defense set's
fault-free cell):

- RS_f = N_f,success / |T_base| (equation 1): of the units the baseline solved, how many
  f's cell solved too.
- O_f = N_trigger / N_total, L_f = N_fixed / N_trigger, S_f = N_final_success / N_trigger
  (equation 2): N_total counts the units where a fault was applied, N_trigger those of
  them where a fault-tolerant behaviour fired, N_fixed those where one repaired the
  fault locally, N_final_success those that were solved.

Each tier has its own (O, L, S), counting only that tier's behaviours (Figure 4's shape).
Every ratio carries its counts; a ratio over nothing is None.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from faultline.core import Envelope
from faultline.journal import JournalReader
from faultline.report._behaviours import DETECTORS, TIERS, Behaviour, Tier, detect
from faultline.report._campaign import BASELINE, NO_DEFENSE, CampaignCell, CampaignManifest, read_manifest

Unit = tuple[str, int]
"""(task, trial)."""

EVIDENCE_KINDS = ("fault_applied", "defense_fired", "tool_result", "assistant_turn", "user_turn", "context_reply")
"""The body kinds a detector reads; the report decodes no other row."""

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
    """N_f,success: units of T_base solved under the fault."""
    rs: float | None


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


class CellResult(msgspec.Struct, frozen=True, kw_only=True):
    """What one cell's journal says per unit: solved, faulted, and the behaviours seen."""

    solved: set[Unit]
    injected: set[Unit]
    behaviours: dict[Unit, list[Behaviour]]

    @property
    def units(self) -> int:
        return len(self.solved | self.injected | set(self.behaviours))


def read_cell(journal: Path, run_id: str = "") -> tuple[CellResult, int]:
    """One cell's units from the journal's episodes of run `run_id` (all: ""), and how many completed."""
    solved: set[Unit] = set()
    injected: set[Unit] = set()
    behaviours: dict[Unit, list[Behaviour]] = {}
    with JournalReader(journal, expand_requests=False) as reader:
        prefix = f"{run_id}-" if run_id else ""
        episodes = {e.episode: e for e in reader.episodes() if e.outcome is not None and e.episode.startswith(prefix)}
        for episode, rows in reader.by_episode(list(episodes) if prefix else None):
            summary = episodes.get(episode)
            if summary is None:
                continue
            unit = (summary.task, summary.trial)
            if summary.outcome == "success":
                solved.add(unit)
            if summary.faults:
                injected.add(unit)
                steps: list[tuple[int, Envelope]] = [(r.pos, r.envelope()) for r in rows if r.kind in EVIDENCE_KINDS]
                behaviours[unit] = detect(steps)
    return CellResult(solved=solved, injected=injected, behaviours=behaviours), len(episodes)


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


def fault_row(cell: CampaignCell, result: CellResult, base: CellResult) -> FaultRow:
    solved = len(result.solved & base.solved)
    return FaultRow(
        fault=cell.fault,
        defense=cell.defense,
        units=result.units,
        base_solved=len(base.solved),
        solved=solved,
        rs=ratio(solved, len(base.solved)),
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


def campaign_report(folder: Path) -> CampaignReport:
    """The report of a campaign folder, over its finished cells (an unfinished cell is left out)."""
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
        faults.append(fault_row(cell, result, base))
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
    )
    return CampaignReport(
        faults=faults, tiers=tiers, behaviours=behaviours, effects=defense_effects(faults), summary=summary
    )
