"""Attribution on organic failures: who made an episode fail, by every method, scored after it answered.

1. Campaigns, one per seed (a real `faultline run`): the simulator makes its own
   stochastic mistakes (`--rate` per category and decision), and two fault rules
   run live: a decoy (`parameter_format_error`: the tool rejects the malformed call,
   the agent calls again; journaled, visible, harmless) and a cause
   (`parameter_filling_error`: a changed argument, which fails the episode when a
   write goes through with it). Every failed episode is kept.
2. Every method answers on every failure, seeing only the journal: oracle-guided
   repair, sampled counterfactuals, an all-at-once judge and a step-by-step judge
   (agents whose model calls go through `ctx.llm`; with `sim` documented heuristics
   that read only the trace stand in, see the sim backend), the first tool error,
   and a random step. Forks draw the model's randomness afresh, so continuations
   differ as a sampling model's would.
3. Only then does the scorer label each failure, from what any run's journal holds
   (messages, causation, tool results, fault events) lined up with the task's ground
   truth: an oracle label by design, as `faultline fama`'s informed evidence is. The
   label is the earliest departure from the ground truth the episode never recovered
   from: a tool call the ground truth does not make there that went through (a wrong
   write, a write before the lookups it needs, a final answer that misstates a fact),
   else the agent ending the conversation with ground-truth actions or required
   outputs left (an early stop). It carries the agent's decisions that led to it,
   from its last successful tool result on (its question, its confirmation, its
   call); where a fault changed the call the agent sent, only the step that sent it,
   and the cause is that fault. Decoys never make a label (the tool rejects what
   they deliver). A failure with no departure is counted as unexplained and scored
   by no method. The simulator's own labels of its mistakes are never read.
4. Fault-event repair is reported apart, as a confirmation rate on the failures
   that carry a causing fault: it reads the fault events, so beside the others it
   would be graded on its own input.

Oracle-guided repair repairs with the same ground truth the label is drawn from, so
its agreement with the label is in part by design; the other methods see no gold.
With `sim` the numbers measure the runtime's mechanisms (forks, search, scoring),
never a model. `--model local` (a llama.cpp server started for the run, `make real`)
or `--config` with an openai model runs the same harness, and the same labeller, on
a real model's own failures. Such a model makes no simulated mistakes; the fault
rules still run.

    python -m bench.attribution_accuracy [--seeds 11,12,13] [--tasks 65] [--trials 4] [--rate 0.05] [--json out.json]
    python -m bench.attribution_accuracy --model local --seeds 1 --tasks 2 --trials 1 --decoys 0 --causes 0 \
        --samples 2 --limit 2 --max-turns 3
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from random import Random
from typing import Any, ClassVar

import anyio
import msgspec
from rich.console import Console
from rich.table import Table

from faultline._errors import FaultlineError
from faultline.api import SIM_NOTE, uses_sim
from faultline.cli import main as cli
from faultline.core import (
    Agent,
    AgentHarness,
    ChatMessage,
    Context,
    Envelope,
    FaultApplied,
    LlmRequest,
    Notice,
    ToolResult,
)
from faultline.envs import EARLY_STOP
from faultline.journal import JournalReader, JournalRow
from faultline.replay import FAULT_REPAIR, ORACLE_REPAIR, SAMPLED, Method, Step, attribute_episode, steps, wilson
from faultline.runtime import MODEL_NAME, Config, agent_lookup, load_config, local_model_server, make_backend
from faultline.services.fama import failure_case

DECOY = "parameter_format_error"
CAUSE = "parameter_filling_error"
FIRST_TOOL_ERROR = "first tool error"
JUDGE = "all-at-once judge"
STEP_JUDGE = "step-by-step judge"
RANDOM = "random step"
METHODS = (ORACLE_REPAIR, SAMPLED, JUDGE, STEP_JUDGE, FIRST_TOOL_ERROR, RANDOM)
JUDGE_PROMPT = (
    "Below is the trace of a failed multi-agent episode, one line per step: `step N | agent | what it sent`. "
    "Name the agent and the step that caused the failure, exactly as:\nagent: NAME\nstep: N"
)
STEP_PROMPT = (
    "Below is the start of the trace of a multi-agent episode that failed, one line per step: "
    "`step N | agent | what it sent`. Is its last step the one that made the episode fail? "
    "Answer yes or no on the first line."
)
TOOL_AGENT = "tool"
"""The agent whose messages a FAMA case's trajectory holds."""
RANDOM_SEED = 0
"""The random baseline's seed: with the episode id, it picks that episode's step."""
WHO_AND_WHEN = "Who&When (all-at-once, hand-crafted systems): agent 53.5%, step 14.2%"


class Label(msgspec.Struct, frozen=True):
    """What the scorer holds an episode's failure to be; `steps` are every step carrying that cause."""

    cause: str
    agent: str
    steps: list[int]


class Said(msgspec.Struct, frozen=True):
    """One method's answer on one failure, with what it cost."""

    agent: str | None
    step: int | None
    decided: bool
    forks: int = 0
    model_calls: int = 0
    seconds: float = 0.0


def campaign(journal: Path, seed: int, args: argparse.Namespace, config: Path | None) -> None:
    command = ["run", "--tasks", str(args.tasks), "--trials", str(args.trials), "--seed", str(seed)]
    command += ["--journal", str(journal), "--json"] + (["--config", str(config)] if config else [])
    command += ["--error-rates", str(args.rate)] if config is None else []  # the simulator's own mistakes
    command += ["--max-turns", str(args.max_turns)] if args.max_turns else []
    for fault, probability in ((DECOY, args.decoys), (CAUSE, args.causes)):
        command += ["--fault", f"{fault}:probability={probability}"] if probability else []
    assert cli(command) == 0


LOCAL_MODEL = """\
[models.default]
backend = "openai"
base_url = "{url}"
api_key_env = ""
model = "{model}"
max_tokens = 128
tool_calls = "text"
timeout_s = 300.0
max_retries = 1

[run]
concurrency = 1
"""
"""Every role on the local model server, as `faultline run --model local` sets them (LOCAL_SETTINGS)."""


def failures(journal: Path) -> list[str]:
    with JournalReader(journal) as reader:
        return [s.episode for s in reader.episodes() if s.outcome not in (None, "success") and not s.forked_from]


# -- the methods that read only the journal ------------------------------------------------------


def failed_calls(rows: list[JournalRow]) -> list[JournalRow]:
    """The tool calls whose result came back with an error, in journal order."""
    by_id = {r.id: r for r in rows}
    found = []
    for row in rows:
        body = row.envelope().body if row.kind == "tool_result" else None
        if isinstance(body, ToolResult) and body.error and (call := by_id.get(row.causation)) is not None:
            found.append(call)
    return found


def step_of(made: list[Step], row: JournalRow) -> Step | None:
    """The step that sent `row`."""
    return next((s for s in made if s.agent == row.sender and s.input_id == row.causation), None)


def first_tool_error(rows: list[JournalRow], made: list[Step]) -> Said:
    """The baseline: blame the step whose tool call first came back with an error."""
    step = next((s for call in failed_calls(rows) if (s := step_of(made, call)) is not None), None)
    return Said(step.agent if step else None, step.index if step else None, False)


def random_step(episode: str, made: list[Step], seed: int) -> Said:
    step = Random(f"{seed}:{episode}").choice(made)
    return Said(step.agent, step.index, False)


def trace_lines(rows: list[JournalRow], made: list[Step]) -> list[str]:
    """The episode as the judges read it: a line per step, marked when its tool call came back with an error."""
    failed = {(call.sender, call.causation) for call in failed_calls(rows)}
    return [
        f"step {s.index} | {s.agent} | {json.dumps(s.action, sort_keys=True)[:300]}"
        + (" | error" if (s.agent, s.input_id) in failed else "")
        for s in made
    ]


class TraceJudge(Agent):
    """A judge as an agent: its model calls go through `ctx.llm`, as every agent's do, so the same
    judge runs journaled in the runtime as it runs here in a harness. The Notice's text is what it
    reads; `sim` in the Notice's first line says which stand-in answers with the offline model."""

    name: ClassVar[str] = "judge"

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        assert isinstance(msg.body, Notice)
        prompt, _, text = msg.body.text.partition("\n")
        request = LlmRequest(
            role="judge",
            messages=[ChatMessage(role="system", content=prompt), ChatMessage(role="user", content=text)],
            metadata={"sim": "blame" if prompt == JUDGE_PROMPT else "blame_step"},
        )
        ctx.emit(Notice(text=(await ctx.llm(request)).content))


async def ask(config: Config, episode: str, prompt: str, text: str) -> str | None:
    """One judge request (the tool role's model); None when the model call failed."""
    backend = make_backend(config, "tool")
    harness = AgentHarness(TraceJudge(), episode=f"judge-{episode}", backend=backend)
    try:
        [answer] = await harness.deliver(Notice(text=f"{prompt}\n{text}"))
    except FaultlineError:
        return None
    finally:
        await backend.aclose()
    assert isinstance(answer.body, Notice)
    return answer.body.text


async def judge(episode: str, rows: list[JournalRow], made: list[Step], config: Config) -> Said:
    """All at once: the whole trace in one request."""
    said = await ask(config, episode, JUDGE_PROMPT, "\n".join(trace_lines(rows, made)))
    agent, step = None, None
    for line in (said or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() == "agent":
            agent = value.strip()
        elif key.strip().lower() == "step" and value.strip().isdigit():
            step = int(value.strip())
    return Said(agent, step, False, model_calls=1)


async def step_judge(episode: str, rows: list[JournalRow], made: list[Step], config: Config) -> Said:
    """Step by step: the trace up to each step in turn, until the judge says that step failed it."""
    lines = trace_lines(rows, made)
    for n, step in enumerate(made, start=1):
        said = await ask(config, episode, STEP_PROMPT, "\n".join(lines[:n]))
        if said is not None and said.strip().lower().startswith("yes"):
            return Said(step.agent, step.index, False, model_calls=n)
    return Said(None, None, False, model_calls=len(made))


async def answers(
    journal: Path, scratch: Path, episode: str, args: argparse.Namespace, config: Config
) -> dict[str, Said]:
    lookup, backends = agent_lookup(config), (lambda role: make_backend(config, role))
    with JournalReader(journal) as reader:
        rows = list(reader.episode_rows(episode))
    made = steps(rows, lookup)
    found: dict[str, Said] = {}
    repairs: list[Method] = [ORACLE_REPAIR, SAMPLED]
    if any(r.kind == "fault_applied" for r in rows):
        repairs.append(FAULT_REPAIR)
    for method in repairs:
        result = await attribute_episode(
            journal, episode, lookup=lookup, backends=backends, method=method, samples=args.samples, scratch=scratch
        )
        found[method] = Said(
            result.agent, result.step, result.decided, result.forks, result.model_calls, result.seconds
        )
    for name, run in ((JUDGE, judge), (STEP_JUDGE, step_judge)):
        started = time.perf_counter()
        said = await run(episode, rows, made, config)
        found[name] = msgspec.structs.replace(said, seconds=time.perf_counter() - started)
    found[FIRST_TOOL_ERROR] = first_tool_error(rows, made)
    found[RANDOM] = random_step(episode, made, RANDOM_SEED)
    return found


# -- the scorer: the ground truth lined up with the journal, after every method has answered ----


def label(rows: list[JournalRow], made: list[Step]) -> Label | None:
    """The earliest departure from the task's ground truth the episode never recovered from (see the module
    docstring), or None when the ground truth shows none."""
    case = failure_case([r.envelope() for r in rows], analysts="informed")
    if case is None or not case.evidence.sources[1:]:  # no ground truth: the domain or the task is unknown here
        return None
    evidence = case.evidence
    first = next((d for d in evidence.deviations if not d.recovered), None)
    if first is not None:
        row, cause = turn_row(rows, case.trajectory, first.turn), first.category or "past the last gold action"
    elif evidence.ended_by == "agent" and (evidence.unfinished or evidence.missing_outputs):
        row, cause = turn_row(rows, case.trajectory, last_turn(case.trajectory, "agent")), EARLY_STOP
    else:
        return None
    if row is None or (step := step_of(made, row)) is None:
        return None
    faults = [f.fault for f in applied(rows) if row.id in {str(r.get("id", "")) for r in f.results}]
    if faults:  # the agent sent it right and a fault changed it: only that step carries the cause
        return Label(f"fault: {faults[0]}", step.agent, [step.index])
    return Label(f"ground truth: {cause}", step.agent, [s.index for s in decision(rows, made, step)])


def turn_row(rows: list[JournalRow], trajectory: list[dict[str, Any]], turn: int) -> JournalRow | None:
    """The tool agent's message that is turn `turn` of a FAMA case's trajectory: its calls and its turns to the
    user are in the trajectory in journal order, so the n-th call turn is its n-th tool call."""
    role = trajectory[turn]["role"]
    kind = {"call": "tool_call", "agent": "assistant_turn"}.get(role)
    nth = sum(1 for t in trajectory[:turn] if t["role"] == role)
    sent = [r for r in rows if r.sender == TOOL_AGENT and r.kind == kind]
    return sent[nth] if kind is not None and nth < len(sent) else None


def last_turn(trajectory: list[dict[str, Any]], role: str) -> int:
    return max(i for i, t in enumerate(trajectory) if t["role"] == role)


def decision(rows: list[JournalRow], made: list[Step], step: Step) -> list[Step]:
    """The agent's steps with a model call that led to `step`: from its last tool result that came back without an
    error before it (else the first user turn it got) on. An agent that asks for facts, then for confirmation, then
    calls, decided the call at the first of them."""
    to_agent = [r for r in rows if r.recipient == step.agent and r.pos <= step.input_pos]
    first_turn = min((r.pos for r in to_agent if r.kind == "user_turn"), default=0)
    since = max((r.pos for r in to_agent if r.kind == "tool_result" and not tool_error(r)), default=first_turn)
    return [
        s for s in made if s.agent == step.agent and s.model_call is not None and since <= s.input_pos <= step.input_pos
    ]


def tool_error(row: JournalRow) -> str:
    body = row.envelope().body
    return body.error if isinstance(body, ToolResult) else ""


def applied(rows: list[JournalRow]) -> list[FaultApplied]:
    return [body for r in rows if r.kind == "fault_applied" and isinstance(body := r.envelope().body, FaultApplied)]


def fault_events(rows: list[JournalRow]) -> set[str]:
    return {f.fault for f in applied(rows)}


Score = dict[str, Any]


def score(answer: Said, truth: Label | None) -> Score:
    """The answer against the label (None: unexplained, so right or wrong is not known)."""
    known = truth is not None and answer.step is not None
    return {
        "agent": None if truth is None else answer.agent is not None and answer.agent == truth.agent,
        "step": None if truth is None else known and answer.step in truth.steps,
        "near": None if truth is None else known and any(abs(answer.step - s) <= 1 for s in truth.steps),  # type: ignore[operator]
        "decided": answer.decided,
        "answered": answer.step is not None,
        "forks": answer.forks,
        "model_calls": answer.model_calls,
        "seconds": answer.seconds,
    }


def summary(scores: list[Score]) -> dict[str, Any]:
    """Rates with their intervals (accuracy over the labelled failures, the rest over all), and costs."""
    n = len(scores)
    out: dict[str, Any] = {"n": n, "labelled": sum(s["step"] is not None for s in scores)}
    for key in ("agent", "step", "near", "decided", "answered"):
        counted = [s[key] for s in scores if s[key] is not None]
        k = sum(bool(v) for v in counted)
        low, high = wilson(k, len(counted))
        out[key] = {"rate": k / len(counted) if counted else 0.0, "low": low, "high": high, "k": k, "n": len(counted)}
    for key in ("forks", "model_calls", "seconds"):
        out[f"{key}_per_failure"] = sum(s[key] for s in scores) / n if n else 0.0
    return out


# -- the run -------------------------------------------------------------------------------------


def commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def benchmark(args: argparse.Namespace, config: Config, tmp: Path, progress: Callable[[str], None]) -> dict[str, Any]:
    scored: dict[str, list[Score]] = {m: [] for m in METHODS}
    confirmations: list[dict[str, Any]] = []
    causes: dict[str, int] = {}
    unexplained, per_seed = 0, {}
    lookup = agent_lookup(config)
    for seed in args.seeds:
        journal, scratch = tmp / f"campaign-{seed}.sqlite", tmp / f"forks-{seed}.sqlite"
        started = time.perf_counter()
        campaign(journal, seed, args, args.config)
        failed = failures(journal)[: args.limit or None]
        per_seed[seed] = {"failures": len(failed), "campaign_s": time.perf_counter() - started}
        for i, episode in enumerate(failed, start=1):
            progress(f"seed {seed}: failure {i} of {len(failed)}")
            said = anyio.run(answers, journal, scratch, episode, args, config)
            with JournalReader(journal) as reader:
                rows = list(reader.episode_rows(episode))
            truth = label(rows, steps(rows, lookup))
            if truth is None:
                unexplained += 1
            else:
                causes[truth.cause] = causes.get(truth.cause, 0) + 1
            for method in METHODS:
                scored[method].append(score(said[method], truth))
            if FAULT_REPAIR in said and truth is not None:
                confirmations.append(
                    {"cause": truth.cause, "carries": sorted(fault_events(rows)), **score(said[FAULT_REPAIR], truth)}
                )
    return {
        "commit": commit(),
        "seeds": args.seeds,
        "campaign": {k: getattr(args, k) for k in ("tasks", "trials", "rate", "decoys", "causes", "samples")},
        "per_seed": per_seed,
        "failures": sum(s["failures"] for s in per_seed.values()),
        "unexplained": unexplained,
        "causes": causes,
        "methods": {m: summary(s) for m, s in scored.items()},
        "fault_repair": {
            "on_causing_faults": summary([c for c in confirmations if c["cause"].startswith("fault")]),
            "on_decoys_only": summary([c for c in confirmations if c["carries"] == [DECOY]]),
        },
    }


def _rate(cell: dict[str, Any]) -> str:
    return f"{cell['rate']:.0%} [{cell['low']:.0%}, {cell['high']:.0%}]"


def show(result: dict[str, Any], console: Console) -> None:
    model = result.get("model", "sim")
    note = "sim: the runtime's mechanisms, not a model" if "note" in result else f"model {model}"
    table = Table(title=f"attribution on {result['failures']} organic failures ({note})")
    columns = (
        "method",
        "n",
        "labelled",
        "agent",
        "step",
        "step ±1",
        "answered",
        "decided",
        "forks",
        "model calls",
        "s",
    )
    for column in columns:
        table.add_column(column, justify="left" if column == "method" else "right")
    for method, s in result["methods"].items():
        if not s["n"]:
            continue
        accuracy = [_rate(s[k]) if s[k]["n"] else "-" for k in ("agent", "step", "near")]
        table.add_row(
            method, str(s["n"]), str(s["labelled"]), *accuracy, _rate(s["answered"]), _rate(s["decided"]),
            f"{s['forks_per_failure']:.1f}", f"{s['model_calls_per_failure']:.1f}", f"{s['seconds_per_failure']:.2f}",
        )  # fmt: skip
    console.print(table)
    console.print(f"per failure; 95% Wilson intervals. Beside: {WHO_AND_WHEN} (real models, not simulator failures)")
    if "note" in result:
        console.print(f"note: {result['note']}")
    console.print(
        f"causes: {', '.join(f'{k} {v}' for k, v in sorted(result['causes'].items()))};"
        f" unexplained (no departure from the ground truth, scored by no method): {result['unexplained']}"
    )
    for name, s in result["fault_repair"].items():
        if s["n"]:
            console.print(
                f"fault-event repair, {name.replace('_', ' ')}: n {s['n']}, decided {_rate(s['decided'])},"
                f" step right {_rate(s['step'])} (a confirmation rate, not an accuracy)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[11, 12, 13])
    parser.add_argument("--tasks", type=int, default=65, help="tasks per campaign (default 65: every retail task)")
    parser.add_argument("--trials", type=int, default=4, help="trials per task (default 4)")
    parser.add_argument("--rate", type=float, default=0.05, help="simulated mistake rate per category (default 0.05)")
    parser.add_argument("--decoys", type=float, default=0.08, help=f"{DECOY} probability per message (default 0.08)")
    parser.add_argument("--causes", type=float, default=0.03, help=f"{CAUSE} probability per message (default 0.03)")
    parser.add_argument("--samples", type=int, default=4, help="continuations at the step named, sampled (default 4)")
    parser.add_argument("--limit", type=int, default=0, help="failures attributed per seed (default all)")
    parser.add_argument("--max-turns", type=int, default=0, help="user turns per episode (default: the domain's)")
    parser.add_argument("--config", type=Path, help="faultline.toml with the models (default: sim)")
    parser.add_argument(
        "--model", choices=("sim", "local"), default="sim",
        help="local: every role on a llama.cpp server started for the benchmark (make real installs it)",
    )  # fmt: skip
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    console = Console(stderr=True)
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack, console.status("campaigns") as status:
        if args.model == "local":
            url = stack.enter_context(local_model_server(log_file=Path(tmp) / "llama.log"))
            args.config = Path(tmp) / "local.toml"
            args.config.write_text(LOCAL_MODEL.format(url=url, model=MODEL_NAME))
        config = load_config(args.config) if args.config else Config()
        result = benchmark(args, config, Path(tmp), status.update if console.is_terminal else console.log)
    result["model"] = args.model if args.config is None or args.model == "local" else str(args.config)
    if uses_sim(config):
        result["note"] = SIM_NOTE
    show(result, Console())
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
