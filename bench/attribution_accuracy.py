"""Attribution accuracy against faults the benchmark injected itself, with every method and two baselines.

1. A campaign (a real `faultline run`, with no simulated mistakes unless --rate is
   set), or an existing journal (--journal).
2. Every passing episode (up to --episodes) gets one fault: the type is the next of
   every shipped fault type in turn, the sending agent and the message are drawn by
   a seeded rng among the messages that type applies to, and a fork applies it
   (`Inject`: a fault event in the journal, as a worker's interceptor writes one).
   The label is that agent and the step that sent the message. Every faulted
   episode that fails is kept; nothing chooses episodes by their labels, and
   nothing reads the simulator's mistake records.
3. On every kept episode: fault-event repair, oracle-guided repair, sampled
   counterfactuals, and the baselines "first tool error" (the step whose tool call
   first came back with an error) and an all-at-once judge (the whole trace in one
   model request, as Who&When's; with `sim` a documented heuristic stands in, see
   the sim backend), each scored on agent and step, over every kept episode and
   over those of each fault mechanism; and per fault type, how many of the
   episodes it was injected into failed. Forks run under the fault rules of the
   episode they fork, the injected fault included.

--organic skips steps 2 and 3's scoring: it attributes the campaign's own failures
(a real model's mistakes have no labels) and reports flip rate and cost only.

With `sim` the numbers measure the runtime's mechanisms (forks, injection,
search), never a model.

    python -m bench.attribution_accuracy [--episodes 30] [--samples 4] [--config faultline.toml] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from random import Random
from typing import Any, ClassVar

import anyio
from rich.console import Console
from rich.table import Table

from faultline._errors import FaultlineError
from faultline.cli import main as cli
from faultline.core import Agent, AgentHarness, ChatMessage, Context, Envelope, LlmRequest, Notice, ToolResult
from faultline.faults import fault_types
from faultline.journal import JournalReader, JournalRow
from faultline.replay import (
    FAULT_REPAIR,
    ORACLE_REPAIR,
    SAMPLED,
    Attribution,
    Inject,
    Step,
    attribute_episode,
    fork_episode,
    steps,
)
from faultline.runtime import Config, agent_lookup, load_config, make_backend

FIRST_TOOL_ERROR = "first tool error"
JUDGE = "all-at-once judge"
JUDGE_PROMPT = (
    "Below is the trace of a failed multi-agent episode, one line per step: `step N | agent | what it sent`. "
    "Name the agent and the step that caused the failure, exactly as:\nagent: NAME\nstep: N"
)


def campaign(journal: Path, tasks: int, rate: float, seed: int, config: Path | None) -> None:
    args = ["run", "--tasks", str(tasks), "--trials", "1", "--error-rates", str(rate), "--seed", str(seed)]
    args += ["--journal", str(journal), "--json"] + (["--config", str(config)] if config else [])
    assert cli(args) == 0


def candidates(rows: list[JournalRow], fault: str, lookup: Any) -> list[JournalRow]:
    """Messages of agents the fault type applies to (tool-call faults: tool calls; the rest: direct messages)."""
    kinds = fault_types()[fault].kinds
    return [
        r
        for r in rows
        if r.recipient and lookup(r.sender) is not None and (r.kind in kinds if kinds else r.kind != "start")
    ]


async def label_set(
    journal: Path, labelled: Path, want: int, seed: int, config: Config
) -> tuple[list[tuple[str, str, str, int | None]], dict[str, dict[str, int]]]:
    """(episode, fault, agent, step) of every injected episode that failed, and per fault type
    how many episodes it was injected into and how many of those failed."""
    lookup, backends = agent_lookup(config), (lambda role: make_backend(config, role))
    rng = Random(seed)
    names = sorted(fault_types())
    with JournalReader(journal) as reader:
        passed = [s.episode for s in reader.episodes() if s.outcome == "success" and not s.forked_from][:want]
    kept = []
    tally: dict[str, dict[str, int]] = {}
    for n, episode in enumerate(passed):
        with JournalReader(journal) as reader:
            rows = list(reader.episode_rows(episode))
        for attempt in range(len(names)):
            fault = names[(n + attempt) % len(names)]
            pool = candidates(rows, fault, lookup)
            if not pool:
                continue
            agent = rng.choice(sorted({r.sender for r in pool}))
            target = rng.choice([r for r in pool if r.sender == agent])
            try:
                fork = await fork_episode(
                    journal, episode, target.pos, Inject(fault=fault), lookup=lookup, backends=backends, out=labelled
                )
            except FaultlineError:
                continue  # the fault does not apply to that message: the next type
            counts = tally.setdefault(fault, {"injected": 0, "failed": 0})
            counts["injected"] += 1
            counts["failed"] += fork.outcome.outcome != "success"
            if fork.outcome.outcome != "success":
                with JournalReader(labelled) as reader:
                    faulted = list(reader.episode_rows(fork.episode))
                step = next(
                    (s.index for s in steps(faulted, lookup) if s.agent == agent and s.input_id == target.causation),
                    None,
                )
                if step is not None:  # an episode whose label has no step cannot score a method's step
                    kept.append((fork.episode, fault, agent, step))
            break
    return kept, tally


def first_tool_error(rows: list[JournalRow], made: list[Step]) -> tuple[str | None, int | None]:
    """The baseline: blame the step whose tool call first came back with an error."""
    by_id = {r.id: r for r in rows}
    for row in rows:
        body = row.envelope().body if row.kind == "tool_result" else None
        if isinstance(body, ToolResult) and body.error and (call := by_id.get(row.causation)) is not None:
            step = next((s for s in made if s.agent == call.sender and s.input_id == call.causation), None)
            return (step.agent, step.index) if step else (None, None)
    return None, None


def trace(rows: list[JournalRow], made: list[Step]) -> str:
    """The episode as the judge reads it: a line per step, marked when its tool call came back with an error."""
    by_id = {r.id: r for r in rows}
    failed = set()
    for row in rows:
        body = row.envelope().body if row.kind == "tool_result" else None
        if isinstance(body, ToolResult) and body.error and (call := by_id.get(row.causation)) is not None:
            failed.add((call.sender, call.causation))
    return "\n".join(
        f"step {s.index} | {s.agent} | {json.dumps(s.action, sort_keys=True)[:300]}"
        + (" | error" if (s.agent, s.input_id) in failed else "")
        for s in made
    )


class TraceJudge(Agent):
    """The all-at-once judge as an agent: its one model call goes through `ctx.llm`, as every agent's does, so
    the same judge runs in the runtime, journaled, as it runs here in a harness."""

    name: ClassVar[str] = "judge"

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        assert isinstance(msg.body, Notice)
        request = LlmRequest(
            role="judge",
            messages=[
                ChatMessage(role="system", content=JUDGE_PROMPT),
                ChatMessage(role="user", content=msg.body.text),
            ],
            metadata={"sim": "blame"},
        )
        ctx.emit(Notice(text=(await ctx.llm(request)).content))


async def judge(rows: list[JournalRow], made: list[Step], config: Config) -> tuple[str | None, int | None]:
    """The all-at-once judge: one model request (the tool role's model) with the whole trace."""
    backend = make_backend(config, "tool")
    harness = AgentHarness(TraceJudge(), episode=f"judge-{rows[0].episode}", backend=backend)
    try:
        [answer] = await harness.deliver(Notice(text=trace(rows, made)))
    except FaultlineError:
        return None, None
    finally:
        await backend.aclose()
    assert isinstance(answer.body, Notice)
    response = answer.body
    agent, step = None, None
    for line in response.text.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() == "agent":
            agent = value.strip()
        elif key.strip().lower() == "step" and value.strip().isdigit():
            step = int(value.strip())
    return agent, step


Score = tuple[bool, bool, bool, bool, int, int, float]
"""(agent right, step right, answered, flipped, forks, model calls, seconds) of one method on one episode."""


def same(answer: object, label: object) -> bool:
    """Whether a method's answer is the label: no answer (None) is never right, whatever the label."""
    return answer is not None and answer == label


async def evaluate(
    labelled: Path, scratch: Path, kept: list[tuple[str, str, str, int | None]], samples: int, config: Config
) -> dict[str, dict[str, dict[str, float]]]:
    """Each method's summary over every kept episode ("all") and over those of each fault mechanism."""
    lookup, backends = agent_lookup(config), (lambda role: make_backend(config, role))
    scores: dict[str, dict[str, list[Score]]] = {}
    for episode, fault, agent, step in kept:
        mechanism = fault_types()[fault].mechanism
        by_method: dict[str, list[Score]] = {}
        with JournalReader(labelled) as reader:
            rows = list(reader.episode_rows(episode))
        made = steps(rows, lookup)
        for method in (FAULT_REPAIR, ORACLE_REPAIR, SAMPLED):
            result: Attribution = await attribute_episode(
                labelled,
                episode,
                lookup=lookup,
                backends=backends,
                method=method,
                samples=samples,
                scratch=scratch,  # type: ignore[arg-type]
            )
            by_method.setdefault(method, []).append(
                (
                    same(result.agent, agent),
                    same(result.step, step),
                    result.decided,
                    result.flipped,
                    result.forks,
                    result.model_calls,
                    result.seconds,
                )  # fmt: skip
            )
        started = time.perf_counter()
        got = first_tool_error(rows, made)
        by_method.setdefault(FIRST_TOOL_ERROR, []).append(
            (same(got[0], agent), same(got[1], step), got[1] is not None, False, 0, 0, time.perf_counter() - started)
        )
        started = time.perf_counter()
        said_agent, said_step = await judge(rows, made, config)
        by_method.setdefault(JUDGE, []).append(
            (
                same(said_agent, agent),
                same(said_step, step),
                said_step is not None,
                False,
                0,
                1,
                time.perf_counter() - started,
            )
        )
        for group in ("all", mechanism):
            for method, items in by_method.items():
                scores.setdefault(group, {}).setdefault(method, []).extend(items)
    return {group: {method: _summary(items) for method, items in methods.items()} for group, methods in scores.items()}


def _summary(items: list[Score]) -> dict[str, float]:
    n = len(items) or 1
    return {
        "episodes": len(items),
        "agent_accuracy": sum(i[0] for i in items) / n,
        "step_accuracy": sum(i[1] for i in items) / n,
        "answered": sum(i[2] for i in items) / n,
        "flip_rate": sum(i[3] for i in items) / n,
        "forks_per_episode": sum(i[4] for i in items) / n,
        "model_calls_per_episode": sum(i[5] for i in items) / n,
        "seconds_per_episode": sum(i[6] for i in items) / n,
    }


async def organic(
    journal: Path, scratch: Path, samples: int, config: Config, limit: int
) -> dict[str, dict[str, dict[str, float]]]:
    """The campaign's own failures, by every method: no labels, so flip rate and cost only."""
    lookup, backends = agent_lookup(config), (lambda role: make_backend(config, role))
    with JournalReader(journal) as reader:
        failed = [s.episode for s in reader.episodes() if s.outcome not in (None, "success") and not s.forked_from]
    scores: dict[str, list[Score]] = {}
    for episode in failed[:limit]:
        for method in (ORACLE_REPAIR, SAMPLED):
            result = await attribute_episode(
                journal,
                episode,
                lookup=lookup,
                backends=backends,
                method=method,
                samples=samples,
                workers=1,
                scratch=scratch,  # type: ignore[arg-type]
            )
            scores.setdefault(method, []).append(
                (False, False, result.decided, result.flipped, result.forks, result.model_calls, result.seconds)
            )
    return {"all": {method: _summary(items) for method, items in scores.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--episodes", type=int, default=30, help="passing episodes to fault (default 30)")
    parser.add_argument("--tasks", type=int, default=40, help="tasks of the campaign (default 40)")
    parser.add_argument("--rate", type=float, default=0.0, help="simulated mistake rate of the campaign (default 0)")
    parser.add_argument("--samples", type=int, default=4, help="continuations per step, sampled method (default 4)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--config", type=Path, help="faultline.toml with the models (default: sim)")
    parser.add_argument("--journal", type=Path, help="attribute this campaign instead of running one")
    parser.add_argument("--organic", action="store_true", help="attribute the campaign's own failures (no labels)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    config = load_config(args.config) if args.config else Config()
    with tempfile.TemporaryDirectory() as tmp:
        journal = args.journal or Path(tmp) / "campaign.sqlite"
        labelled, scratch = Path(tmp) / "labelled.sqlite", Path(tmp) / "forks.sqlite"
        started = time.perf_counter()
        if args.journal is None:
            campaign(journal, args.tasks, args.rate, args.seed, args.config)
        run_s = time.perf_counter() - started
        started = time.perf_counter()
        tally: dict[str, dict[str, int]] = {}
        if args.organic:
            kept: list[Any] = []
            summary = anyio.run(organic, journal, scratch, args.samples, config, args.episodes)
        else:
            kept, tally = anyio.run(label_set, journal, labelled, args.episodes, args.seed, config)
            summary = anyio.run(evaluate, labelled, scratch, kept, args.samples, config)
        attribute_s = time.perf_counter() - started
    title = (
        f"attribution of {len(kept) if not args.organic else 'organic'} failed episodes"
        f" (campaign {run_s:.0f}s, faults and attribution {attribute_s:.0f}s)"
    )
    table = Table(title=title)
    columns = ("faults", "method", "n", "agent", "step", "answered", "flip rate", "forks/ep", "model calls/ep", "s/ep")
    for column in columns:
        table.add_column(column)
    for group, methods in sorted(summary.items(), key=lambda g: (g[0] != "all", g[0])):
        for method, s in methods.items():
            table.add_row(
                group,
                method,
                str(s["episodes"]),
                f"{s['agent_accuracy']:.0%}",
                f"{s['step_accuracy']:.0%}",
                f"{s['answered']:.0%}",
                f"{s['flip_rate']:.0%}",
                f"{s['forks_per_episode']:.1f}",
                f"{s['model_calls_per_episode']:.0f}",
                f"{s['seconds_per_episode']:.2f}",
            )
    Console().print(table)
    if tally:
        Console().print(
            "failed of injected, per fault type: "
            + ", ".join(
                f"{k} ({fault_types()[k].mechanism}) {v['failed']}/{v['injected']}" for k, v in sorted(tally.items())
            )
        )
    if args.json:
        args.json.write_text(json.dumps({"methods": summary, "faults": tally}, indent=2))


if __name__ == "__main__":
    main()
