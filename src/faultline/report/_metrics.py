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
Of those, the units where a defense dropped a message the fault sent are counted too
(`cancelled`): there the fault was met, and the defense is what tolerated it. The
baseline's run of a unit also tells the ordinary course from a response: a behaviour
whose evidence that run holds too is not counted (`detect`). The comparisons are exact
on a deterministic model (`sim`, `scripted`); with a sampling model two runs differ
anyway, so few units or behaviours ever count as the baseline's.

An injection the fault could not be made on (`FaultSkipped`: the injector model refused, answered
malformed or failed) left its message unchanged, so a unit with skips alone is not a faulted unit.
Each fault row counts the skips, the units never faulted, and the commonest reasons: a fault skipped
on every unit reads as such, not as ratios over nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec

from faultline._errors import ConfigError
from faultline.core import OPERATOR, RUNNER, SIM_NOTE, SIM_SYSTEM_NOTE, Envelope, FaultApplied, FaultSkipped, Recording
from faultline.journal import EpisodeFilter, EpisodeSummary, JournalReader, JournalRow
from faultline.report._annotator import SHOWN_KINDS, Annotation, EpisodeCase, episode_case, judged_behaviours
from faultline.report._behaviours import (
    DETECTORS,
    TIERS,
    Behaviour,
    EpisodeTrace,
    Tier,
    cancelled_by_defense,
    detect,
    message_act,
)
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
    "no effect": "faulted units whose agents did exactly what they did without the fault: a defense dropped what it"
    " sent (cancelled by a defense, which tolerated it), or it touched nothing they acted on (nothing to tolerate)",
    "skipped": "injections whose fault could not be made (a fault_skipped event: the injector model refused,"
    " answered malformed or failed), the message going out unchanged, and the commonest reasons; a unit with skips alone is"
    " not faulted, and a cell where every injection was skipped measured nothing of the fault",
}
"""What each column of the robustness table means, for the terminal and the HTML report."""

EVIDENCE_KINDS = (
    "fault_applied", "defense_fired", "tool_call", "tool_result", "assistant_turn", "user_turn", "context_request",
    "context_reply",
)  # fmt: skip
"""The body kinds a detector reads (calls and requests for the causal chains through them); the report decodes
no other row."""

SIM_JUDGE_NOTE = (
    "the sim judge is a stand-in: it maps the rule detectors' evidence and visible trajectory patterns to"
    " behaviours, so its labels measure the annotator's mechanism, not a model's judgement"
)

BehaviourSource = Literal["rules", "judged"]
BEHAVIOUR_SOURCES: dict[BehaviourSource, str] = {
    "rules": "Faultline's rule detectors: each behaviour named and tested, in fixed tiers with one outcome in all,"
    " from journal evidence",
    "judged": "a model judge (role judge) labels each faulted episode's behaviours, several tiers each, as"
    " MAS-FIRE's annotator does; the rule detectors' sightings are its evidence",
}
"""Where the behaviours behind O, L and S come from, with what each means."""


SKIP_REASONS = 3
"""How many reasons for a cell's skipped injections the report names, the commonest first."""
NO_REASON = "no reason journaled"
"""The reason of a skipped injection whose event gives none."""


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


class SkipReason(msgspec.Struct, frozen=True, kw_only=True):
    """Why injections of a cell were skipped, and how many."""

    reason: str
    count: int


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
    cancelled: int = 0
    """Of the `no_effect` units, those where a defense dropped a message the fault sent: a defense cancelled the
    fault, where the others had nothing to tolerate."""
    not_annotated: int = 0
    """Faulted units the judge gave no readable annotation for, left out of O, L and S (judged behaviours only)."""
    skipped: int = 0
    """Injections skipped: messages the fault could not be made on (`FaultSkipped`), which went out unchanged."""
    skipped_units: int = 0
    """Units where the fault was skipped and never applied: not faulted units, so counted in none of O, L and S."""
    skip_reasons: list[SkipReason] = []
    """The commonest reasons injections were skipped, most frequent first (`SKIP_REASONS` at most)."""
    all_skipped: bool = False
    """Every injection was skipped: no unit had the fault, so the cell measured nothing of it."""


class TierRow(_Tolerance, frozen=True, kw_only=True, tag="tier", tag_field="type"):
    """(O, L, S) of one fault type under one defense set, counting one tier's behaviours only."""

    tier: Tier


class TierMarks(msgspec.Struct, frozen=True, kw_only=True):
    """One behaviour's marks in one tier: units where it repaired the fault there (✓), units where it failed (✗)."""

    repaired: int
    failed: int


class BehaviourRow(msgspec.Struct, frozen=True, kw_only=True, tag="behaviour", tag_field="type"):
    """How often one behaviour fired under one fault type (Table 2's shape): units, repaired (succeeded: ✓),
    failed (activated, did not resolve the fault: ✗), solved."""

    fault: str
    defense: str
    behaviour: str
    tier: Tier
    units: int
    repaired: int
    solved: int
    tiers: list[Tier] = []
    """Every tier it counts in (a judged behaviour may name several); empty: `tier` alone."""
    failed: int = 0
    """Units where it was seen and did not repair the fault."""
    by_tier: dict[Tier, TierMarks] = {}
    """Per tier it counts in, its own marks: a judged behaviour may succeed in one tier and fail in another."""


class NotAnnotated(msgspec.Struct, frozen=True, kw_only=True, tag="not_annotated", tag_field="type"):
    """A faulted episode the judge gave no readable annotation for, and why."""

    fault: str
    defense: str
    episode: str
    task: str
    trial: int
    reason: str


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
    behaviour_source: BehaviourSource = "rules"
    judge: str = ""
    """With judged behaviours: the judge's backend and model."""
    annotated: int = 0
    not_annotated: int = 0
    recorded: int = 0
    """Of the annotations, those served from the campaign folder's recorded answers."""


class CampaignReport(msgspec.Struct, frozen=True, kw_only=True):
    faults: list[FaultRow]
    tiers: list[TierRow]
    behaviours: list[BehaviourRow]
    effects: list[DefenseEffect]
    summary: ReportSummary
    not_annotated: list[NotAnnotated] = []

    def lines(self) -> Iterator[FaultRow | TierRow | BehaviourRow | DefenseEffect | NotAnnotated | ReportSummary]:
        """Every row, then the summary: what `report --json` prints, one per line."""
        yield from self.faults
        yield from self.tiers
        yield from self.behaviours
        yield from self.effects
        yield from self.not_annotated
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
    acts: dict[Unit, list[str]] = {}
    """Per unit without an applied fault, what its run did (`EpisodeTrace.acts`): the baseline a faulted run of
    the same unit's behaviours are read against."""
    cancelled: set[Unit] = set()
    """Faulted units where a defense dropped a message the fault sent."""
    unannotated: dict[Unit, tuple[str, str]] = {}
    """Judged behaviours only: the faulted units without an annotation, each with (episode, why)."""
    skipped: dict[Unit, list[str]] = {}
    """Per unit with skipped injections, the reason of each (`FaultSkipped`)."""

    @property
    def units(self) -> int:
        return len(self.solved | self.injected | set(self.behaviours))


def read_cell(
    journal: Path,
    run_id: str = "",
    judged: Mapping[str, Annotation | str] | None = None,
    baseline: Mapping[Unit, list[str]] | None = None,
) -> tuple[CellResult, int]:
    """One cell's units from the journal's episodes of run `run_id` (all: ""), and how many completed; with
    `judged` (per episode, an annotation or why there is none), a faulted unit's behaviours are the judge's. With
    `baseline` (the fault-free cell's `acts`), a behaviour the baseline's run of the unit shows too is left out."""
    solved: set[Unit] = set()
    injected: set[Unit] = set()
    behaviours: dict[Unit, list[Behaviour]] = {}
    traces: dict[Unit, str] = {}
    acts: dict[Unit, list[str]] = {}
    cancelled: set[Unit] = set()
    unannotated: dict[Unit, tuple[str, str]] = {}
    skipped: dict[Unit, list[str]] = {}
    base = baseline or {}
    with JournalReader(journal, expand_requests=False) as reader:
        episodes = _completed(reader, run_id)
        for episode, rows in reader.by_episode(list(episodes) if run_id else None):
            summary = episodes.get(episode)
            if summary is None:
                continue
            unit = (summary.task, summary.trial)
            traces[unit] = trace_digest(rows)
            if summary.outcome == "success":
                solved.add(unit)
            if reasons := [_skip_reason(row) for row in rows if row.kind == "fault_skipped"]:
                skipped[unit] = reasons
            evidence = _steps(rows, EVIDENCE_KINDS)
            if not summary.faults:
                acts[unit] = EpisodeTrace.of(evidence).acts()
                continue
            injected.add(unit)
            if cancelled_by_defense(evidence):
                cancelled.add(unit)
            if judged is None:
                behaviours[unit] = detect(evidence, baseline=base.get(unit, ()))
                continue
            answer = judged.get(episode, "not asked: the judge was given no case for this episode")
            if isinstance(answer, str):
                unannotated[unit] = (episode, answer)
                continue
            steps = _steps(rows, SHOWN_KINDS)
            fault_pos = next((pos for pos, env in steps if isinstance(env.body, FaultApplied)), 0)
            case = episode_case(episode, summary.task, summary.trial, steps, base.get(unit, ()))
            behaviours[unit] = sorted(judged_behaviours(case, answer, fault_pos), key=lambda b: (b.pos, b.name))
    cell = CellResult(
        solved=solved,
        injected=injected,
        behaviours=behaviours,
        traces=traces,
        acts=acts,
        cancelled=cancelled,
        unannotated=unannotated,
        skipped=skipped,
    )
    return cell, len(episodes)


def _completed(reader: JournalReader, run_id: str) -> dict[str, EpisodeSummary]:
    """The completed episodes of run `run_id` (of every run: ""), by id."""
    return {e.episode: e for e in reader.select(EpisodeFilter(run=run_id or None)) if e.outcome is not None}


def _skip_reason(row: JournalRow) -> str:
    body = row.envelope().body
    return (body.reason if isinstance(body, FaultSkipped) else "") or NO_REASON


def _steps(rows: list[JournalRow], kinds: tuple[str, ...]) -> list[tuple[int, Envelope]]:
    return [(r.pos, r.envelope()) for r in rows if r.kind in kinds]


def episode_cases(folder: Path) -> list[EpisodeCase]:
    """What the behaviour annotator is shown of every faulted episode of the campaign's finished fault cells, the
    detectors' sightings read against the fault-free run of the same unit."""
    manifest = read_manifest(folder)
    baselines = {
        cell.defense: read_cell(manifest.journal_of(folder, cell), cell.run_id)[0].acts
        for cell in manifest.cells
        if cell.done and cell.fault == BASELINE
    }
    cases: list[EpisodeCase] = []
    for cell in manifest.cells:
        if not cell.done or cell.fault == BASELINE:
            continue
        with JournalReader(manifest.journal_of(folder, cell), expand_requests=False) as reader:
            episodes = _completed(reader, cell.run_id)
            for episode, rows in reader.by_episode(list(episodes) if cell.run_id else None):
                summary = episodes.get(episode)
                if summary is not None and summary.faults:
                    steps = _steps(rows, SHOWN_KINDS)
                    base = baselines.get(cell.defense, {}).get((summary.task, summary.trial), [])
                    cases.append(episode_case(episode, summary.task, summary.trial, steps, base))
    return cases


def trace_digest(rows: list[JournalRow]) -> str:
    """What an episode's agents did, comparable across runs: each message an agent sent (who, what kind, its body;
    for a faulted one, what the agent sent, not what the fault delivered) and each model request it made (its
    digest), in journal order. Ids, times, the runtime's own rows (starts, completions) and tallies (bookkeeping
    for the scorer, where a simulator also keeps its own labels of its mistakes) are left out."""
    parts = hashlib.sha256()
    faults = {  # on messages; a fault on a model request changed no message
        row.pos: body
        for row in rows
        if row.kind == "fault_applied" and isinstance(body := row.envelope().body, FaultApplied) and body.model_call < 0
    }
    made_by_faults = {str(result.get("id", "")) for f in faults.values() for result in f.results}
    for row in rows:
        if row.kind == "fault_applied":
            if row.pos in faults and (sent := _sent(faults[row.pos].original)):  # what the agent sent, not what
                parts.update(sent.encode())  # the fault delivered
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
    """A faulted message as its sender sent it, in a trace's terms (the whole record when it is not an envelope;
    nothing for a message that is no act)."""
    try:
        sent = msgspec.convert(original, Envelope)
    except msgspec.ValidationError:
        return json.dumps(original, sort_keys=True, default=str) + "\n"
    return "" if sent.kind in _NOT_ACTS else message_act(sent) + "\n"


_NOT_ACTS = frozenset({"fault_skipped", "defense_fired", "episode_completed", "no_output", "tally"})
"""Rows that record the runtime's doing, not an agent's, and tallies (bookkeeping, not acts)."""


def _tolerance(cell: CellResult, tier: Tier | None) -> dict[str, Any]:
    """N_total, N_trigger, N_fixed, N_final_success and O, L, S over the behaviours of `tier` (every tier: None)."""
    triggered = fixed = success = 0
    judged = cell.injected - set(cell.unannotated)
    for unit in judged:
        seen = [b for b in cell.behaviours.get(unit, []) if tier is None or tier in b.all_tiers]
        if seen:
            triggered += 1
            fixed += any(b.repaired_in(tier) for b in seen)
            success += unit in cell.solved
    injected = len(judged)
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
    reasons = Counter(reason for unit_reasons in result.skipped.values() for reason in unit_reasons)
    return FaultRow(
        fault=cell.fault,
        defense=cell.defense,
        units=result.units,
        base_solved=len(base.solved),
        solved=solved,
        rs=ratio(solved, len(base.solved)),
        no_effect=len(unchanged),
        cancelled=len(unchanged & result.cancelled),
        not_annotated=len(result.unannotated),
        skipped=reasons.total(),
        skipped_units=len(set(result.skipped) - result.injected),
        skip_reasons=[SkipReason(reason=r, count=n) for r, n in reasons.most_common(SKIP_REASONS)],
        all_skipped=bool(reasons) and not result.injected,
        **_tolerance(result, None),
    )


def tier_rows(cell: CampaignCell, result: CellResult) -> list[TierRow]:
    return [TierRow(fault=cell.fault, defense=cell.defense, tier=tier, **_tolerance(result, tier)) for tier in TIERS]


def behaviour_rows(cell: CampaignCell, result: CellResult) -> list[BehaviourRow]:
    units: dict[str, set[Unit]] = defaultdict(set)
    repaired: dict[str, set[Unit]] = defaultdict(set)
    failed: dict[str, set[Unit]] = defaultdict(set)
    tiers: dict[str, dict[Tier, None]] = defaultdict(dict)
    in_tier: dict[tuple[str, Tier], tuple[set[Unit], set[Unit]]] = defaultdict(lambda: (set(), set()))
    for unit, seen in result.behaviours.items():
        for b in seen:
            units[b.name].add(unit)
            (repaired if b.repaired else failed)[b.name].add(unit)
            tiers[b.name].update(dict.fromkeys(b.all_tiers))
            for tier in b.all_tiers:
                in_tier[b.name, tier][0 if b.repaired_in(tier) else 1].add(unit)
    names = [n for n in DETECTORS if n in units] + sorted(n for n in units if n not in DETECTORS)
    return [
        BehaviourRow(
            fault=cell.fault,
            defense=cell.defense,
            behaviour=name,
            tier=next(iter(tiers[name])),
            tiers=list(tiers[name]) if len(tiers[name]) > 1 else [],
            units=len(units[name]),
            repaired=len(repaired[name]),
            failed=len(failed[name]),
            solved=len(units[name] & result.solved),
            by_tier={
                tier: TierMarks(repaired=len(in_tier[name, tier][0]), failed=len(in_tier[name, tier][1]))
                for tier in tiers[name]
            },
        )
        for name in names
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


def campaign_report(
    folder: Path,
    *,
    rs: RsVariant = "paper",
    judged: Mapping[str, Annotation | str] | None = None,
    judge: str = "",
    recorded: int = 0,
) -> CampaignReport:
    """The report of a campaign folder, over its finished cells (an unfinished cell is left out); `rs` says how
    RS_f counts the units solved under a fault (`RS_VARIANTS`). With `judged` (see `annotate_episodes`) the
    behaviours are the judge's, `judge` names it and `recorded` says how many answers were recorded ones."""
    if rs not in RS_VARIANTS:
        raise ConfigError(f"rs={rs!r}: RS_f is counted one of these ways: {', '.join(RS_VARIANTS)}")
    manifest: CampaignManifest = read_manifest(folder)
    results: dict[str, CellResult] = {}
    episodes = 0
    for cell in sorted(manifest.cells, key=lambda c: c.fault != BASELINE):  # a fault cell is read against its baseline
        if cell.done:
            base = results.get(CampaignCell(fault=BASELINE, defense=cell.defense).name)
            results[cell.name], count = read_cell(
                manifest.journal_of(folder, cell),
                cell.run_id,
                None if cell.fault == BASELINE else judged,
                None if base is None else base.acts,
            )
            episodes += count
    faults: list[FaultRow] = []
    tiers: list[TierRow] = []
    behaviours: list[BehaviourRow] = []
    unjudged: list[NotAnnotated] = []
    for cell in manifest.cells:
        base = results.get(CampaignCell(fault=BASELINE, defense=cell.defense).name)
        result = results.get(cell.name)
        if cell.fault == BASELINE or result is None or base is None:
            continue
        faults.append(fault_row(cell, result, base, rs))
        tiers.extend(tier_rows(cell, result))
        behaviours.extend(behaviour_rows(cell, result))
        unjudged += [
            NotAnnotated(fault=cell.fault, defense=cell.defense, episode=e, task=u[0], trial=u[1], reason=why)
            for u, (e, why) in sorted(result.unannotated.items())
        ]
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
        note="; ".join(
            n
            for n, on in (
                (SIM_SYSTEM_NOTE if settings.system else SIM_NOTE, settings.model == "sim"),
                (SIM_JUDGE_NOTE, judge.startswith("sim")),
            )
            if on
        ),
        rs=rs,
        behaviour_source="rules" if judged is None else "judged",
        judge=judge,
        annotated=sum(len(r.injected) - len(r.unannotated) for r in results.values()) if judged is not None else 0,
        not_annotated=len(unjudged),
        recorded=recorded,
    )
    return CampaignReport(
        faults=faults,
        tiers=tiers,
        behaviours=behaviours,
        effects=defense_effects(faults),
        summary=summary,
        not_annotated=unjudged,
    )
