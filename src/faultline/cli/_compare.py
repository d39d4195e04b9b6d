"""`faultline compare A.sqlite B.sqlite ...`: runs of the same tasks side by side.

Each journal is summarised the way `faultline run` summarises a run (pass^k, the
helpers' model use), over the tasks every journal holds, so that a run with helpers
and one without are compared on the same ground. Failures are counted by what the
journal says ended each episode (its outcome and cause), never by the simulator's
own labels of the mistakes it made. With `--run`, each run named is a side of its own
(in each journal): the cells of a campaign that ran into one shared journal compare so.
"""

from __future__ import annotations

import argparse
import math
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import msgspec
from rich.table import Table
from rich.text import Text

from faultline._errors import UsageError
from faultline.api import SIM_NOTE, SIM_SYSTEM_NOTE, PlannedEpisode, RunResult, Summary, costed, summarize
from faultline.cli._filters import add_episode_filters, episode_filter, require_journal
from faultline.cli._text import table_console
from faultline.core import EpisodeCompleted, EpisodeStarted
from faultline.journal import EpisodeFilter, EpisodeSummary, JournalReader

_B = TypeVar("_B", EpisodeCompleted, EpisodeStarted)

_CAUSE_END = re.compile(r"[:;(]")
"""Where a cause's particulars start ("turn limit reached (30 user turns)"): cut there to name its category."""


class Side(msgspec.Struct, frozen=True, kw_only=True):
    """One journal's run, summarised over the tasks all compared journals hold."""

    label: str
    journal: str
    run: str
    """The run whose episodes it summarises; empty: the whole journal."""
    summary: Summary
    failures: dict[str, int]
    """Episodes that did not succeed, by category (see `failure_category`)."""
    left_out: list[str]
    """Tasks of this journal that some other journal does not hold."""
    models: list[str]
    own_system: bool = False
    """Its episodes ran on a system of one's own (their starts name it), not the built-in tool-use agents."""


def failure_category(done: EpisodeCompleted) -> str | None:
    """What ended an unsuccessful episode, in a few words from its journaled outcome and cause; None on success."""
    if done.outcome == "success":
        return None
    if done.outcome != "failure":
        return done.outcome
    cause = _CAUSE_END.split(done.cause, maxsplit=1)[0].strip()
    return cause or "failure"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "compare",
        help="runs of the same tasks side by side: pass^k, failures by cause, tokens and latency per episode",
        description="Summarise each journal's episodes (forks left out) over the tasks all journals hold: "
        "pass^1..pass^k, failures by their journaled outcome and cause, tokens and latency per episode, and "
        "model use per agent (the helpers' overhead). With sim, the numbers measure the runtime's mechanisms, "
        "not a model.",
    )
    p.add_argument(
        "journals", nargs="+", type=Path, metavar="JOURNAL", help="two or more journal files, or one with --run"
    )
    p.add_argument(
        "--run",
        action="append",
        default=[],
        metavar="RUN_ID",
        help="compare this run's episodes (`run --run-id`, a campaign's cells, as their starts record it; in a journal"
        " written before starts did, those whose ids begin RUN_ID-) as a column of its own, in each journal"
        " (repeatable): one journal and two runs compare two cells of a campaign that shared it",
    )
    p.add_argument("--json", action="store_true", help="one JSON object per row, then one with type 'summary'")
    p.add_argument("--plot", type=Path, metavar="OUT.png", help="also draw the comparison as grouped bars")
    add_episode_filters(p, "the same in every journal; several narrow it down", run=False)
    p.set_defaults(handler=_compare)


def _compare(args: argparse.Namespace) -> int:
    runs = list(dict.fromkeys(args.run))
    if len(args.journals) * max(len(runs), 1) < 2:
        raise UsageError("compare: name two or more journals, or runs of one (--run RUN_ID, twice or more)")
    for path in args.journals:
        require_journal(path)
        if runs:
            with JournalReader(path) as reader:
                reader.check_runs(runs)
    wanted = episode_filter(args)
    chosen = _chosen(args.journals, runs)
    episodes = [_completed(path, wanted, run) for _, path, run in chosen]
    common = set.intersection(*({e.task for e in found} for found in episodes))
    if not common:
        raise UsageError(f"compare: the {'runs' if runs else 'journals'} have no task in common")
    sides = [_side(label, path, run, found, common) for (label, path, run), found in zip(chosen, episodes, strict=True)]
    rows = comparison_rows(sides)
    if args.plot:
        _plot(args.plot, sides)
    if args.json:
        for row in rows:
            print(msgspec.json.encode(row).decode())
        print(msgspec.json.encode(_summary(sides, common)).decode())
        return 0
    console = table_console()
    console.print(_table(sides, rows, len(common)))
    for side in sides:
        if side.left_out:
            console.print(f"{side.label}: left out {len(side.left_out)} tasks the others do not hold", highlight=False)
    if note := _sim_note(sides):
        console.print(Text(f"note: {note}", style="dim"))
    return 0


def _labels(paths: Sequence[Path]) -> list[str]:
    """Each journal's file name, or its path as given where two names are alike."""
    names = [path.name for path in paths]
    return names if len(set(names)) == len(names) else [str(path) for path in paths]


def _chosen(journals: Sequence[Path], runs: Sequence[str]) -> list[tuple[str, Path, str]]:
    """The sides to compare, each (label, journal, run): every journal, or every run in every journal; a run's
    label is its id, with its journal's where there are several."""
    labels = _labels(journals)
    if not runs:
        return [(label, path, "") for label, path in zip(labels, journals, strict=True)]
    return [
        (run if len(journals) == 1 else f"{label}:{run}", path, run)
        for label, path in zip(labels, journals, strict=True)
        for run in runs
    ]


def _completed(path: Path, wanted: EpisodeFilter | None, run: str) -> list[EpisodeSummary]:
    """The journal's completed episodes that are not forks, of run `run` (all: "") and matching `wanted`."""
    chosen = msgspec.structs.replace(wanted or EpisodeFilter(), run=run or None)
    with JournalReader(path) as reader:
        found = [e for e in reader.select(chosen) if e.outcome is not None and not e.forked_from]
    if not found:
        of_run = f" of run {run!r}" if run else ""
        raise UsageError(f"compare: {path} holds no completed episode{of_run}" + (" that matches" if wanted else ""))
    return found


def _side(label: str, path: Path, run: str, found: list[EpisodeSummary], common: set[str]) -> Side:
    chosen = [e for e in found if e.task in common]
    completed: dict[str, EpisodeCompleted] = {}
    roster: set[str] = set()
    systems: set[str] = set()
    with JournalReader(path) as reader:
        for e in chosen:
            assert e.completed_pos is not None
            completed[e.episode] = _body(reader, e.episode, e.completed_pos, EpisodeCompleted)
            if e.started_pos is not None:
                started = _body(reader, e.episode, e.started_pos, EpisodeStarted)
                roster.update(started.roster)
                systems.add(started.system)
        costs = reader.agent_costs(episodes=completed)
    per_task = Counter(e.task for e in chosen)
    result = RunResult(
        planned=[PlannedEpisode(episode=e.episode, task=e.task, trial=e.trial, seed=0) for e in chosen],
        completed=completed,
    )
    summary = costed(summarize(result, max(per_task.values()), str(path)), costs, sorted(roster))
    failures = Counter(c for done in completed.values() if (c := failure_category(done)) is not None)
    return Side(
        label=label,
        journal=str(path),
        run=run,
        summary=summary,
        failures=dict(failures.most_common()),
        left_out=sorted({e.task for e in found} - common),
        models=sorted({m for cost in costs for m in cost.models.split(",") if m}),
        own_system=bool(systems) and "" not in systems,
    )


def _body(reader: JournalReader, episode: str, pos: int, kind: type[_B]) -> _B:
    body = reader.row(pos, episode=episode).envelope().body
    assert isinstance(body, kind)
    return body


class Row(msgspec.Struct, frozen=True, kw_only=True):
    """One line of the comparison: a measure and its value in each journal (None where it has none)."""

    type: str
    name: str
    values: dict[str, float | None]


def comparison_rows(sides: Sequence[Side]) -> list[Row]:
    """Episodes, pass^k, failures per category, latency per episode, and model tokens per episode: all agents', each agent's."""

    def row(kind: str, name: str, value: Any) -> Row:
        values = {side.label: value(side) for side in sides}
        return Row(
            type=kind, name=name, values={k: None if v is None or math.isnan(v) else v for k, v in values.items()}
        )

    trials = max(side.summary.trials for side in sides)
    categories = Counter[str]()
    for side in sides:
        categories.update(side.failures)
    agents = sorted({cost.agent for side in sides for cost in side.summary.costs})
    return [
        row("episodes", "episodes", lambda s: float(s.summary.episodes)),
        *(row("pass_k", f"pass^{k}", lambda s, k=k: s.summary.pass_k.get(k)) for k in range(1, trials + 1)),
        *(row("failures", c, lambda s, c=c: float(s.failures.get(c, 0))) for c, _ in categories.most_common()),
        row("latency_s", "latency / episode", lambda s: s.summary.avg_latency_s),
        row("tokens", "all agents", lambda s: sum(cost.tokens for cost in s.summary.costs)),
        *(row("agent_tokens", a, lambda s, a=a: _agent_tokens(s, a)) for a in agents),
    ]


def _agent_tokens(side: Side, agent: str) -> float:
    return next((cost.tokens for cost in side.summary.costs if cost.agent == agent), 0.0)


def _summary(sides: Sequence[Side], common: set[str]) -> dict[str, Any]:
    return {
        "type": "summary",
        "journals": {side.label: side.journal for side in sides},
        "runs": {side.label: side.run or None for side in sides},
        "tasks": len(common),
        "trials": {side.label: side.summary.trials for side in sides},
        "left_out": {side.label: side.left_out for side in sides},
        "helper_overhead": {side.label: side.summary.helper_overhead for side in sides},
        "models": {side.label: side.models for side in sides},
        "note": _sim_note(sides),
    }


def _sim_note(sides: Sequence[Side]) -> str:
    """What to say of the offline simulator where some side's models include it ("" where none does): its numbers
    exercise the runtime, and on systems of one's own it follows no ground truth."""
    if not any("sim" in side.models for side in sides):
        return ""
    return SIM_SYSTEM_NOTE if all(side.own_system for side in sides) else SIM_NOTE


_HEADINGS = {
    "failures": "failed episodes",
    "tokens": "model tokens / episode",
    "agent_tokens": "model tokens / episode",
}
"""Rows of these types are listed under a heading."""


def _table(sides: Sequence[Side], rows: Sequence[Row], tasks: int) -> Table:
    table = Table(title=f"faultline compare — {tasks} tasks in common")
    table.add_column("")
    for side in sides:
        table.add_column(side.label, justify="right")
    section = ""
    for row in rows:
        heading = _HEADINGS.get(row.type, "")
        if heading != section:
            table.add_section()
            if heading:
                table.add_row(Text(heading, style="bold"))
        section = heading
        indent = "  " if heading else ""
        table.add_row(indent + row.name, *(_cell(row, row.values[side.label]) for side in sides))
    return table


def _cell(row: Row, value: float | None) -> str:
    if value is None:
        return "-"
    if row.type == "pass_k":
        return f"{value:.3f}"
    if row.type == "latency_s":
        return f"{value * 1000:.0f} ms"
    return f"{value:.0f}"


def _plot(path: Path, sides: Sequence[Side]) -> None:
    """Four panels of bars grouped by measure, one colour per journal: pass^k, failures, tokens, latency."""
    from faultline.cli._plots import png

    rows = comparison_rows(sides)
    panels = [
        ("pass^k (higher is better)", [r for r in rows if r.type == "pass_k"]),
        ("failed episodes by cause", [r for r in rows if r.type == "failures"]),
        ("model tokens per episode", [r for r in rows if r.type in ("tokens", "agent_tokens")]),
        ("latency per episode (s)", [msgspec.structs.replace(r, name="") for r in rows if r.type == "latency_s"]),
    ]
    with png(path, width=12.0, height=7.5, note=f"note: {note}" if (note := _sim_note(sides)) else "") as figure:
        axes = figure.subplots(2, 2).flat
        width = 0.8 / len(sides)
        for ax, (title, group) in zip(axes, panels, strict=True):
            ax.set_title(title, fontsize=10)
            if not group:
                ax.text(0.5, 0.5, "none", ha="center", va="center", transform=ax.transAxes)
                ax.set_xticks([])
                continue
            for i, side in enumerate(sides):
                heights = [r.values[side.label] or 0.0 for r in group]
                offsets = [g + (i - (len(sides) - 1) / 2) * width for g in range(len(group))]
                bars = ax.bar(offsets, heights, width, label=side.label)
                ax.bar_label(bars, fmt=_short, fontsize=7)
            ax.set_xticks(range(len(group)), [r.name for r in group], fontsize=8, rotation=15 if len(group) > 3 else 0)
            ax.grid(axis="y", alpha=0.3)
        handles, names = next(iter(figure.axes)).get_legend_handles_labels()
        figure.legend(handles, names, loc="outside upper center", ncols=len(sides))


def _short(value: float) -> str:
    """A bar's label: three significant digits, whole numbers from 1000 on."""
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
