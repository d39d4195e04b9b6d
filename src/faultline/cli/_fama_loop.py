"""`faultline fama loop`: the FAMA paper's Algorithm 1 end to end on a local system.

Round 0 runs the tasks with no helpers. After each round the controller's stages analyse its
failures, and the helpers they recommend join the rosters of the next round (a helper once chosen
stays). With `[fama] rosters = "shared"` (Faultline's rule) one roster for every task takes the
helpers recommended for at least `[fama] share` of the failures; with "per_task" (the paper's use)
each task takes those recommended for its own failures, and tasks with the same roster run together.
Each round is real `faultline run`s in processes of their own with one journal (`OUT/round-R.sqlite`),
so every round replays on its own; `OUT/loop.json` records the settings and every finished round (what
`report --paper fama` lays out). The table sets the rounds side by side with the baseline:
pass^1..pass^k, the paper's overhead (Table 2: the helpers' share of the tokens the tool agent and
the helpers generated per episode), and Faultline's own measures, model tokens per episode (every
agent's) and latency, each with its rise over round 0.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import anyio
import msgspec
from rich.table import Table
from rich.text import Text

from faultline._errors import RunError, UsageError
from faultline._files import write_atomically
from faultline.api import TokenOverhead, token_overhead, uses_sim
from faultline.cli import _jsonl
from faultline.cli._args import rate, whole_number
from faultline.cli._fama_counts import add_analysts_flag, category_counts, fama_note, with_fama_flags
from faultline.cli._models import add_model_flags, effective_config, model_label, serving_local_model
from faultline.cli._plots import count_axis, png
from faultline.cli._text import stderr_console, table_console
from faultline.core import HELPERS, helper_agent, helper_name, memory_turns
from faultline.journal import EpisodeFilter, JournalReader
from faultline.runtime import Config, make_backend
from faultline.services.fama import (
    CATEGORIES,
    SHORT,
    analyze_cases,
    attribute_cases,
    choose_roster,
    failure_cases,
    joined,
    task_rosters,
)

HELPER_AGENTS = frozenset(helper_agent(name) for name in HELPERS)
"""Whose generated tokens are the helpers' in the paper's overhead."""
LOOP = "loop.json"
"""The loop's record in its folder (`LoopRecord`), rewritten whole after each round."""


class Round(msgspec.Struct, frozen=True, kw_only=True):
    """One round: the roster it ran with, how it did, what it cost, and what its failures were."""

    round: int
    roster: list[str]
    journal: str
    episodes: int
    pass_k: dict[int, float]
    tokens: float
    """Model tokens per episode, every agent's (helpers included)."""
    latency_s: float
    failures: int
    analysed: int
    categories: dict[str, int]
    chosen: list[str]
    """The roster the next round takes (per task: every helper some task takes)."""
    token_overhead: float = 0.0
    """Faultline's: the rise of `tokens` over round 0's, as a fraction."""
    latency_overhead: float = 0.0
    """Faultline's: the rise of `latency_s` over round 0's, as a fraction."""
    overhead: TokenOverhead | None = None
    """The paper's (Table 2): the helpers' share of the tokens generated per episode, and their spread."""
    rosters: dict[str, list[str]] = {}
    """Per task (`[fama] rosters = "per_task"`): each task's roster in this round, tasks with helpers only."""
    chosen_rosters: dict[str, list[str]] = {}
    """Per task: each task's roster for the next round, tasks with helpers only."""
    recommended: dict[str, int] = {}
    """Per helper (memory with its K), how many analysed failures the mitigation agent recommended it for."""


class LoopSettings(msgspec.Struct, frozen=True, kw_only=True):
    """What a loop ran: its domain, the tool agent's model, the judge of the analysis, and the flags."""

    domain: str
    model: str
    judge: str
    tasks: int
    trials: int
    seed: int
    analysts: str
    rosters: str


class LoopRecord(msgspec.Struct, frozen=True, kw_only=True):
    """`OUT/loop.json`: the loop's settings and its finished rounds, as the table and `--json` show them."""

    version: int = 1
    settings: LoopSettings
    rounds: list[Round]


def read_loop(folder: Path) -> LoopRecord:
    path = folder / LOOP
    try:
        return msgspec.json.decode(path.read_bytes(), type=LoopRecord)
    except (FileNotFoundError, NotADirectoryError):
        raise UsageError(
            f"{folder} is not a fama loop folder: it has no {LOOP} (`faultline fama loop` writes it)"
        ) from None
    except msgspec.DecodeError as exc:
        raise UsageError(f"{path}: not a fama loop record ({exc})") from None


def register(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "loop",
        help="Algorithm 1: a baseline run, analysis of its failures, a roster, a re-run with it, for R rounds",
        description="Run the tasks with no helpers, analyse the failures, run again with the helpers the analysis"
        " chose, and so on; print pass^k, tokens and latency per round against the baseline. With --model sim the"
        " runs and the judge are simulations: their numbers measure the mechanism, not a model.",
    )
    p.add_argument("--domain", default="retail", help="domain of the runs (default retail)")
    p.add_argument("--tasks", type=whole_number(1), default=10, metavar="N", help="the first N tasks (default 10)")
    p.add_argument("--trials", type=whole_number(1), default=1, metavar="K", help="runs per task (default 1)")
    p.add_argument(
        "--rounds", type=whole_number(1), default=2, metavar="R", help="rounds after the baseline (default 2)"
    )
    p.add_argument(
        "--seed", type=whole_number(0), default=0, help="the seed of every round's run, as for `run` (default 0)"
    )
    p.add_argument(
        "--error-rates", type=rate, default=None, metavar="P", help="sim: every category's mistake rate (as for run)"
    )
    p.add_argument("--error-rate", action="append", default=[], metavar="CATEGORY=P", help="sim: one category's rate")
    p.add_argument("--out", type=Path, default=Path("runs/fama-loop"), help="folder of the rounds' journals")
    p.add_argument("--json", action="store_true", help="JSON lines: one per round, then a summary")
    p.add_argument("--plot", type=Path, metavar="OUT.png", help="pass^k per round and main-error counts per round")
    p.add_argument(
        "--rosters",
        choices=("shared", "per_task"),
        help="shared: one roster for all tasks, the helpers recommended for [fama] share of the failures (Faultline's"
        " rule); per_task: each task takes the helpers recommended for its own failure, as in the FAMA paper"
        " (over [fama] rosters)",
    )
    add_analysts_flag(p)
    add_model_flags(p)
    p.set_defaults(handler=_loop)


@serving_local_model
def _loop(args: argparse.Namespace) -> int:
    config = with_fama_flags(effective_config(args), analysts=args.analysts, rosters=args.rosters)
    per_task = config.fama.rosters == "per_task"
    args.out.mkdir(parents=True, exist_ok=True)
    taken = sorted(p.name for p in args.out.glob("round-*.sqlite"))
    if taken:
        raise UsageError(f"fama loop: {args.out} already holds {', '.join(taken)}; choose another --out")
    console = stderr_console()
    settings = LoopSettings(
        domain=args.domain,
        model=model_label(config, config.role_of("tool")),
        judge=model_label(config, config.fama.role),
        tasks=args.tasks,
        trials=args.trials,
        seed=args.seed,
        analysts=config.fama.analysts,
        rosters=config.fama.rosters,
    )
    rounds: list[Round] = []
    roster: list[str] = []
    rosters: dict[str, list[str]] = {}
    for number in range(args.rounds + 1):
        journal = args.out / f"round-{number}.sqlite"
        if number == 0 or not per_task:
            console.print(f"round {number}: running with helpers {','.join(roster) or 'none'}", highlight=False)
            summaries = [_run_round(args, number, roster, journal)]
        else:
            groups = _groups(rosters)
            console.print(f"round {number}: running {len(groups)} group(s) of tasks, by roster", highlight=False)
            summaries = [_run_round(args, number, list(r), journal, tasks) for r, tasks in groups.items()]
        if number == 0:
            rosters = {task: [] for task in _tasks(journal)}
        failures, analysed, categories, recommended = anyio.run(_analyse_round, config, journal)
        counts = Counter(entry for _, helpers in recommended for entry in helpers)
        chosen, chosen_rosters = _next_rosters(config, roster, rosters, recommended)
        latest = _round(
            number,
            roster,
            journal,
            _merged(summaries),
            failures,
            analysed,
            categories,
            chosen,
            baseline=rounds[0] if rounds else None,
            rosters={t: r for t, r in rosters.items() if r} if per_task else {},
            chosen_rosters={t: r for t, r in chosen_rosters.items() if r},
            recommended=dict(counts),
        )
        rounds.append(latest)
        record = LoopRecord(settings=settings, rounds=rounds)
        write_atomically(args.out / LOOP, msgspec.json.format(msgspec.json.encode(record)))
        roster, rosters = chosen, chosen_rosters
    note = fama_note(config, sim_runs=uses_sim(config))
    if args.plot:
        _plot(args.plot, rounds, note)
    if args.json:
        _jsonl.rows("round", rounds)
        last = rounds[-1]
        summary_line = {
            "rounds": len(rounds),
            "roster": last.roster,
            "next_roster": last.chosen,
            "next_rosters": last.chosen_rosters,
            "baseline_pass_1": rounds[0].pass_k.get(1, 0.0),
            "final_pass_1": last.pass_k.get(1, 0.0),
            "token_overhead": last.token_overhead,
            "latency_overhead": last.latency_overhead,
            "helper_share": last.overhead.share if last.overhead else 0.0,
            "analysts": config.fama.analysts,
            "rosters": config.fama.rosters,
            "note": note,
        }
        _jsonl.summary(summary_line)
        return 0
    console = table_console()
    console.print(_table(rounds, args.trials, config.fama.analysts, config.fama.rosters))
    if note:
        console.print(Text(f"note: {note}", style="dim"))
    return 0


def _next_rosters(
    config: Config, roster: list[str], rosters: dict[str, list[str]], recommended: list[tuple[str, list[str]]]
) -> tuple[list[str], dict[str, list[str]]]:
    """The roster and, per task, the rosters (task -> roster) the next round takes, from the helpers
    recommended for this round's failures. Per task, the roster is every helper some task takes."""
    if config.fama.rosters == "per_task":
        chosen = task_rosters(recommended, rosters)
        return _union(chosen.values()), chosen
    return joined(roster, choose_roster([helpers for _, helpers in recommended], config.fama)), {}


def _groups(rosters: dict[str, list[str]]) -> dict[tuple[str, ...], list[str]]:
    """The tasks by roster, each group in the tasks' order: one run each."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for task, roster in rosters.items():
        groups.setdefault(tuple(roster), []).append(task)
    return groups


def _union(rosters: Iterable[list[str]]) -> list[str]:
    """Every helper some roster takes (memory with the largest K any takes)."""
    entries = sorted({e for roster in rosters for e in roster}, key=lambda e: memory_turns(e) if ":" in e else 0)
    return joined([], entries)


def _tasks(journal: Path) -> list[str]:
    """The tasks of a round, in the order their episodes started."""
    with JournalReader(journal) as reader:
        return list(dict.fromkeys(e.task for e in reader.episodes()))


def _merged(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """One round's summary from the summaries of its runs (one per group of tasks): pass^k over all its tasks."""
    if len(summaries) == 1:
        return summaries[0]
    tasks = sum(int(s["tasks"]) for s in summaries)
    episodes = sum(int(s["episodes"]) for s in summaries)
    ks = {k for s in summaries for k in s["pass_k"]}
    return {
        "episodes": episodes,
        "tasks": tasks,
        "pass_k": {k: sum(float(s["pass_k"][k]) * int(s["tasks"]) for s in summaries) / tasks for k in ks},
        "avg_latency_s": sum(float(s["avg_latency_s"]) * int(s["tallied"]) for s in summaries)
        / max(sum(int(s["tallied"]) for s in summaries), 1),
    }


def _run_round(
    args: argparse.Namespace, number: int, roster: list[str], journal: Path, tasks: list[str] | None = None
) -> dict[str, Any]:
    """One `faultline run` in a process of its own (of `tasks`, else the first `--tasks`); its JSON summary."""
    chosen = ["--task-ids", ",".join(tasks)] if tasks is not None else ["--tasks", str(args.tasks)]
    command = [sys.executable, "-m", "faultline.cli", "run", "--domain", args.domain, *chosen]
    command += ["--trials", str(args.trials), "--seed", str(args.seed), "--journal", str(journal), "--json"]
    command += ["--run-id", f"round{number}", "--helpers", ",".join(roster) or "none"]
    if args.error_rates is not None:
        command += ["--error-rates", repr(args.error_rates)]
    for item in args.error_rate:
        command += ["--error-rate", item]
    for flag, value in (("--model", args.model), ("--base-url", args.base_url), ("--model-name", args.model_name)):
        if value:
            command += [flag, value]
    for item in args.model_setting:
        command += ["--model-setting", item]
    if args.config:
        command += ["--config", str(args.config)]
    for folder in args.plugin_path:
        command += ["--plugin-path", str(folder)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:  # its last line says why, in its own words: a usage error of the run is the loop's
        said = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        why = said.removeprefix("faultline: ").removeprefix("usage error: ").removeprefix("error: ")
        failure = UsageError if done.returncode == 2 else RunError
        raise failure(f"round {number}: faultline run failed: {why}")
    summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return summary


async def _analyse_round(config: Config, journal: Path) -> tuple[int, int, dict[str, int], list[tuple[str, list[str]]]]:
    """Failures, analysed failures, main-error counts, and the helpers recommended for each analysed
    failure with its task, in the journal's order."""
    cases = await attribute_cases(journal, failure_cases(journal, analysts=config.fama.analysts), config)
    backend = make_backend(config, config.fama.role)
    try:
        result = await analyze_cases(cases, backend, config.fama)
    finally:
        await backend.aclose()
    recommended = [(c.task, c.analysis.mitigation.helpers) for c in result.cases if c.analysis is not None]
    return len(cases), len(recommended), category_counts(result.cases), recommended


def _round(
    number: int,
    roster: list[str],
    journal: Path,
    summary: dict[str, Any],
    failures: int,
    analysed: int,
    categories: dict[str, int],
    chosen: list[str],
    *,
    baseline: Round | None,
    rosters: dict[str, list[str]],
    chosen_rosters: dict[str, list[str]],
    recommended: dict[str, int],
) -> Round:
    episodes = int(summary["episodes"])
    run = f"round{number}"
    with JournalReader(journal) as reader:
        costs = reader.agent_costs(episodes=reader.of_run(run))
        completed = [e.episode for e in reader.select(EpisodeFilter(run=run)) if e.outcome is not None]
        by_episode = reader.episode_costs(episodes=completed)
    generated = {e: {c.agent: c.completion_tokens for c in by_episode.get(e, [])} for e in completed}
    tokens = sum(c.tokens for c in costs) / max(episodes, 1)
    latency = float(summary["avg_latency_s"])
    overheads = {}
    if baseline is not None:
        overheads = {
            "token_overhead": tokens / baseline.tokens - 1 if baseline.tokens else 0.0,
            "latency_overhead": latency / baseline.latency_s - 1 if baseline.latency_s else 0.0,
        }
    return Round(
        round=number,
        roster=roster,
        journal=str(journal),
        episodes=episodes,
        pass_k={int(k): float(v) for k, v in summary["pass_k"].items()},
        tokens=tokens,
        latency_s=latency,
        failures=failures,
        analysed=analysed,
        categories=categories,
        chosen=chosen,
        overhead=token_overhead(generated, HELPER_AGENTS),
        rosters=rosters,
        chosen_rosters=chosen_rosters,
        recommended=recommended,
        **overheads,
    )


def _table(rounds: list[Round], trials: int, analysts: str, rosters: str) -> Table:
    scope = "one roster per task, as in the paper" if rosters == "per_task" else "one roster for all tasks"
    table = Table(
        title=f"FAMA loop: each round against the baseline (round 0, no helpers); {analysts} analysts; {scope}"
    )
    table.add_column("round", justify="right")
    table.add_column("helpers")
    for k in range(1, trials + 1):
        table.add_column(f"pass^{k}", justify="right")
    table.add_column("helper share", justify="right")
    table.add_column("tokens/ep", justify="right")
    table.add_column("latency s", justify="right")
    for cat in CATEGORIES:
        table.add_column(SHORT[cat.id], justify="right")
    table.add_column("next roster")
    for r in rounds:
        over = "" if r.round == 0 else f" ({r.token_overhead:+.0%})"
        slower = "" if r.round == 0 else f" ({r.latency_overhead:+.0%})"
        table.add_row(
            str(r.round),
            rosters_text(r.roster, r.rosters),
            *[f"{r.pass_k.get(k, 0.0):.3f}" for k in range(1, trials + 1)],
            f"{r.overhead.share:.0%}" if r.overhead else "-",
            f"{r.tokens:.0f}{over}",
            f"{r.latency_s:.2f}{slower}",
            *[str(r.categories.get(c.id, 0)) for c in CATEGORIES],
            rosters_text(r.chosen, r.chosen_rosters),
        )
    table.caption = (
        "helper share: the helpers' share of the tokens the tool agent and the helpers generated per episode"
        " (the FAMA paper's overhead, Table 2); tokens/ep: every agent's model tokens per episode and latency s:"
        " per episode, each with its rise over round 0 (Faultline's measures)"
    )
    return table


def rosters_text(roster: list[str], per_task: dict[str, list[str]]) -> str:
    """A roster, or per task how many tasks take each helper."""
    if not per_task:
        return ",".join(roster) or "none"
    counts = Counter(e for entries in per_task.values() for e in entries)
    ordered = sorted(counts, key=lambda e: (HELPERS.index(helper_name(e)), memory_turns(e) if ":" in e else 0))
    return ", ".join(f"{e} ({counts[e]} tasks)" for e in ordered) or "none"


def _plot(path: Path, rounds: list[Round], note: str) -> None:
    with png(path, width=11.0, note=f"note: {note}" if note else "") as figure:
        left, right = figure.subplots(1, 2)
        for r in rounds:
            ks = sorted(r.pass_k)
            left.plot(
                ks, [r.pass_k[k] for k in ks], marker="o", label=f"round {r.round}: {','.join(r.roster) or 'none'}"
            )
        most_k = max((max(r.pass_k, default=1) for r in rounds), default=1)
        left.set_xticks(range(1, most_k + 1))  # k is a whole number, one trial or many
        left.set_xlim(0.5, most_k + 0.5)
        left.set_xlabel("k")
        left.set_ylabel("pass^k")
        left.set_ylim(0, 1.05)
        left.legend(fontsize=7)
        width = 0.8 / len(rounds)
        for i, r in enumerate(rounds):
            xs = [j + i * width for j in range(len(CATEGORIES))]
            right.bar(xs, [r.categories.get(c.id, 0) for c in CATEGORIES], width=width, label=f"round {r.round}")
        right.set_xticks([j + width * (len(rounds) - 1) / 2 for j in range(len(CATEGORIES))])
        right.set_xticklabels([SHORT[c.id] for c in CATEGORIES])
        right.set_ylabel("failures (main error)")
        count_axis(right, max((n for r in rounds for n in r.categories.values()), default=0))
        right.legend(fontsize=7)
