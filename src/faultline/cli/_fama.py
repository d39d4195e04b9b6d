"""`faultline fama analyze`: the FAMA controller's three stages on the failures of a journal.

Each failure gets four analysts' verdicts, the orchestrator's main error(s) and the mitigation
agent's helpers; a table of main-error counts per category follows (the FAMA paper's Figure 4),
and `--plot` draws it. With `--model sim` the judge is the simulator's stand-in, which measures the
mechanism, not a model.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import msgspec
from rich.table import Table
from rich.text import Text

from faultline._errors import FaultlineError, UsageError
from faultline.cli import _fama_loop, _jsonl
from faultline.cli._args import connection_flags
from faultline.cli._connect import login, nats_url, subject_prefix
from faultline.cli._fama_counts import (
    SIM_JUDGE_NOTE,
    add_analysts_flag,
    category_counts,
    fama_note,
    with_fama_flags,
)
from faultline.cli._filters import add_episode_filters, filtered_episodes, require_journal
from faultline.cli._models import add_model_flags, effective_config, serving_local_model
from faultline.cli._plots import count_axis, png
from faultline.cli._text import counted, table_console
from faultline.core import EpisodeStarted
from faultline.journal import JournalReader
from faultline.runtime import Config, load_config, make_backend
from faultline.services.fama import (
    CATEGORIES,
    FAILED_OUTCOMES,
    SHORT,
    CaseReport,
    JournalAnalysis,
    analyze_cases,
    attribute_cases,
    failure_cases,
    serve_fama,
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    fama = sub.add_parser("fama", help="FAMA: failure analysis of episodes, and helper rosters chosen from it")
    commands = fama.add_subparsers(dest="fama_command", metavar="SUBCOMMAND")
    commands.required = True
    p = commands.add_parser(
        "analyze",
        help="analyse failed episodes: four error analysts, the main error, the helpers that address it",
        description="Run the FAMA controller's stages (model role [fama] role, default judge) on failed episodes"
        " of a journal and count the main errors per category. " + SIM_JUDGE_NOTE + ".",
    )
    p.add_argument("journal", type=Path, help="journal file")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--episode", action="append", default=[], metavar="E", help="this failed episode (repeatable)")
    which.add_argument("--all-failed", action="store_true", help="every failed episode (the default)")
    p.add_argument("--json", action="store_true", help="JSON lines: one per failure and per category, then a summary")
    p.add_argument("--plot", type=Path, metavar="OUT.png", help="bar chart of the main-error counts per category")
    p.add_argument(
        "--attribution",
        choices=("off", "oracle", "auto"),
        help="find the replay-based attribution's decisive step, shown to informed analysts and reported beside"
        " the verdicts (runs forks, written to the journal's forks file; over [fama] attribution, default off)",
    )
    add_analysts_flag(p)
    add_model_flags(p)
    add_episode_filters(p, "of the failed ones; several narrow it down")
    p.set_defaults(handler=_analyze)
    s = commands.add_parser(
        "serve",
        help="run the controller's service against a running NATS server until stopped (faultline up starts it)",
    )
    connection_flags(s)
    s.add_argument("--name", default="fama", help="process name announced to the supervisor")
    s.add_argument(
        "--journal",
        type=Path,
        help="the journal file the system's journal service writes, read by [fama] attribution (default from config)",
    )
    s.add_argument(
        "--dry-run", action="store_true", help="journal each roster decision, publish none (over [fama] dry_run)"
    )
    s.set_defaults(handler=_serve)
    _fama_loop.register(commands)


def _serve(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    if args.dry_run:
        config = msgspec.structs.replace(config, fama=msgspec.structs.replace(config.fama, dry_run=True))
    url = nats_url(args, config)
    prefix = subject_prefix(args, config, url)
    anyio.run(serve_fama, config, url, prefix, args.name, login(args, config, url), args.journal)
    return 0


def _say_systems_left_out(journal: Path, chosen: list[str] | None, *, analysed: bool) -> None:
    """The failed episodes of systems of one's own are none of FAMA's cases: an error where they are all there is to
    analyse, else a note on stderr, so that no one reads their absence from the tables as a verdict."""
    with JournalReader(journal) as reader:
        wanted = set(chosen) if chosen is not None else None
        failed = [
            e for e in reader.episodes() if e.outcome in FAILED_OUTCOMES and (wanted is None or e.episode in wanted)
        ]
        systems = {
            e.episode: started.system
            for e in failed
            if e.started_pos is not None
            and isinstance(started := reader.row(e.started_pos, episode=e.episode).envelope().body, EpisodeStarted)
            and started.system
        }
    if not systems:
        return
    said = (
        f"{counted(len(systems), 'failed episode')} of {journal} ran on {', '.join(sorted(set(systems.values())))}:"
        " FAMA's analysts read the built-in tool-use agents' conversation and its helpers serve their tool agent;"
        " `faultline attribute` finds what made such an episode fail"
    )
    if not analysed:
        raise UsageError(f"fama analyze: {said}")
    print(f"note: left out {said}", file=sys.stderr)


def _analyze(args: argparse.Namespace) -> int:
    require_journal(args.journal)  # before --model local starts a server
    return _analyze_with(args)


@serving_local_model
def _analyze_with(args: argparse.Namespace) -> int:
    config = with_fama_flags(effective_config(args), attribution=args.attribution, analysts=args.analysts)
    chosen = filtered_episodes(args.journal, args, args.episode)
    cases = failure_cases(args.journal, chosen, config.fama.analysts)
    _say_systems_left_out(args.journal, chosen, analysed=bool(cases))
    missing = sorted(set(args.episode).intersection(chosen or args.episode) - {c.episode for c in cases})
    if missing:
        raise UsageError(f"fama analyze: not a failed episode of {args.journal}: {', '.join(missing)}")
    cases = anyio.run(attribute_cases, args.journal, cases, config)
    result = anyio.run(_run_analysis, config, cases)
    counts = category_counts(result.cases)
    note = fama_note(config, sim_runs=any(case.model == "sim" for case in result.cases))
    if args.plot:
        plot_categories(args.plot, {"failures": counts}, "Main errors of the analysed failures", note)
    summary = analysis_summary(result, counts)
    if args.json:
        _jsonl.rows("case", result.cases)
        _jsonl.rows("category", ({"category": c, "failures": n} for c, n in counts.items()))
        _jsonl.rows("decision", result.decisions)
        _jsonl.summary(summary | {"analysts": config.fama.analysts, "note": note})
    else:
        console = table_console()
        console.print(_cases_table(result.cases, config.fama.analysts))
        console.print(_counts_table(counts, len(result.cases)))
        decided = Counter((d["domain"], d["model"]) for d in result.decisions)
        final = {(d["domain"], d["model"]): d["roster"] for d in result.decisions}  # the last decision stands
        for (domain, model), roster in final.items():
            count = decided[domain, model]
            after = f" (the last of {count} decisions, one per failure analysed)" if count > 1 else ""
            console.print(f"roster for {domain} / {model}: {','.join(roster) or 'none'}{after}")
        if note:
            console.print(Text(f"note: {note}", style="dim"))
    if result.cases and not summary["analysed"]:
        raise FaultlineError(f"none of the {len(result.cases)} failures could be analysed: {_why_not(result.cases)}")
    return 0


async def _run_analysis(config: Config, cases: list[Any]) -> JournalAnalysis:
    backend = make_backend(config, config.fama.role)
    try:
        return await analyze_cases(cases, backend, config.fama)
    finally:
        await backend.aclose()


def analysis_summary(result: JournalAnalysis, counts: dict[str, int]) -> dict[str, Any]:
    """The summary line of `fama analyze --json` (after the case, category and decision rows)."""
    analysed = [c for c in result.cases if c.analysis is not None]
    return {
        "failures": len(result.cases),
        "analysed": len(analysed),
        "skipped": len(result.cases) - len(analysed),
        "categories": counts,
        "helpers": dict(Counter(h for c in analysed if c.analysis for h in c.analysis.mitigation.helpers)),
        "rosters": {f"{d['domain']}/{d['model']}": d["roster"] for d in result.decisions},
        "model_calls": sum(c.model_calls for c in result.cases),
    }


_WHY_CHARS = 300
"""How much of a case's error the line that none was analysed quotes."""


def _why_not(cases: list[CaseReport]) -> str:
    """The most frequent reason a failure was not analysed, and how many it stopped."""
    (error, count), *_ = Counter(case.error for case in cases).most_common(1)
    said = " ".join(error.split())[:_WHY_CHARS]  # one line, however the model's answer it quotes ran
    return f"{said} ({count} of them)" if len(cases) > 1 else said


def plot_categories(path: Path, series: dict[str, dict[str, int]], title: str, note: str = "") -> None:
    """Grouped bars: one group per category, one bar per series (a round, or all failures); `note` beneath."""
    with png(path, note=f"note: {note}" if note else "") as figure:
        axes = figure.add_subplot()
        width = 0.8 / max(len(series), 1)
        for i, (label, counts) in enumerate(series.items()):
            xs = [j + i * width for j in range(len(CATEGORIES))]
            axes.bar(xs, [counts.get(c.id, 0) for c in CATEGORIES], width=width, label=label)
        axes.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(CATEGORIES))])
        axes.set_xticklabels([f"{SHORT[c.id]}\n{c.title}" for c in CATEGORIES], fontsize=7)
        axes.set_ylabel("failures (main error)")
        count_axis(axes, max((n for counts in series.values() for n in counts.values()), default=0))
        axes.set_title(title)
        if len(series) > 1:
            axes.legend()


def _mark(case: CaseReport, category: str) -> str:
    assert case.analysis is not None
    verdict = next(v for v in case.analysis.verdicts if v.category == category)
    if not verdict.verdict:
        return "-"
    return f"yes ({verdict.cause})" + (" rec." if verdict.recovered else "")


def _cases_table(cases: list[CaseReport], analysts: str) -> Table:
    read = "the trajectory only" if analysts == "trajectory" else "the trajectory and the ground truth"
    table = Table(title=f"FAMA analysis of failed episodes (the analysts read {read})")
    table.add_column("episode", overflow="fold")
    for cat in CATEGORIES:
        table.add_column(SHORT[cat.id], justify="center")
    table.add_column("main error")
    table.add_column("helpers")
    attributed = any(case.decisive for case in cases)
    if attributed:
        table.add_column("decisive step (attribution)")
    for case in cases:
        found = case.decisive
        decisive = [f"{found.agent} step {found.step}: {found.category or '-'}" if found else "-"] if attributed else []
        if case.analysis is None:
            error = Text(f"not analysed: {case.error}", style="red")
            table.add_row(case.episode, *["?"] * len(CATEGORIES), error, "", *decisive)
            continue
        main = ", ".join(case.analysis.main.main) or "none named"
        helpers = ",".join(case.analysis.mitigation.helpers) or "-"
        table.add_row(case.episode, *[_mark(case, c.id) for c in CATEGORIES], main, helpers, *decisive)
    return table


def _counts_table(counts: dict[str, int], failures: int) -> Table:
    table = Table(title=f"Main errors over {failures} failures")
    table.add_column("category")
    table.add_column("failures", justify="right")
    table.add_column("share", justify="right")
    for cat in CATEGORIES:
        n = counts[cat.id]
        table.add_row(f"{SHORT[cat.id]} {cat.title}", str(n), f"{n / failures:.0%}" if failures else "-")
    return table
