"""Failure attribution: which step of which agent made a failed episode fail, and how sure that is.

A step is one handling by one agent (the tool agent, the user, a helper, the
environment) that sent something: its input message and what it made of it.
Every method is a set of forks of the failed episode (`fork_episode`): the
history before a step is served exactly from the journal, one thing changes,
and the rest runs live. What each method can prove:

- fault-event repair: the journal holds the faults injected into the episode;
  the fork at a fault event delivers the original message instead (`UndoFault`).
  Where no event undone alone decides, a rule that applied more than once is
  undone whole from its first event (`UndoRule`). No ground truth is needed and
  any model backend works.
- oracle-guided repair: where the domain has gold actions (the task's ground
  truth), the runtime gives the step's model call the gold action for that point
  as its recorded output (`Answer`); the backend is not asked, so it works for
  every backend. Steps are tried in order; the first whose repair decides is named.
- Each repair is weighed against a control fork: the same history with the step
  (or the fault) kept, the rest drawn again. A repair decides only when the success
  interval of its continuations lies above the control's, so with a sampling model
  one lucky continuation never names a cause (`_weigh`: one continuation each
  first, `samples` each when the repair rescued and the control did not).
- sampled counterfactuals: from the exact prefix before step k, live continuations
  estimate p(k), the chance of success when everything from step k on is drawn
  again (Wilson interval). The decisive step is where p rises most from step k+1
  to step k (p after the last step is 0: that is the recorded failure, replayed
  exactly); it is "undecided" when the two intervals overlap. Only steps with a
  model call are probed (the others draw nothing new), from the last back to the
  first that rescues the episode, where continuations are shortest (`largest_rise`),
  one continuation per probe; the step found and the next then get `samples` each.

Every fork draws the model's randomness afresh after the history it keeps (each its
own `sample`), as a sampling model's continuation would: the simulator, which has
no sampling of its own, draws its mistakes again, so forks and their controls differ.

`flipped` says whether some single change rescued the episode (the flip rate of
a set of episodes is the share where one did).
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

import anyio
import msgspec

from faultline._errors import FaultlineError
from faultline.core import (
    DEFAULT_HANDLER_TIMEOUT_S,
    AssistantTurn,
    FaultApplied,
    Finished,
    ModelBackend,
    Note,
    Recording,
    ToolCall,
)
from faultline.envs import Domain, Task, load_domain
from faultline.journal import JournalReader, JournalRow, verify
from faultline.replay._categorize import categorize
from faultline.replay._fork import Answer, Change, ForkResult, Keep, UndoFault, UndoRule, fork_episode, forks_path
from faultline.replay._replay import AgentLookup, episode_lookup, episode_system

FAULT_REPAIR: Final = "fault-event repair"
ORACLE_REPAIR: Final = "oracle-guided repair"
SAMPLED: Final = "sampled counterfactuals"
METHODS: Final = (FAULT_REPAIR, ORACLE_REPAIR, SAMPLED)
"""The attribution methods, by the name the output gives them."""

DEFAULT_SAMPLES: Final = 8
"""Live continuations per probed step of the sampled method."""

Method = Literal["auto", "fault-event repair", "oracle-guided repair", "sampled counterfactuals"]

PILOT_SAMPLES: Final = 1
"""Continuations per probe while the sampled method searches; the two steps it names get `samples`."""
ORACLE: Final = "oracle"
"""The model an oracle's answer names: the runtime gave the step its gold action."""
RECORDED: Final = "recorded"
"""The change of a control with nothing left to draw: the recorded failure itself."""
NOTHING = "(nothing)"
"""The action of a step that made a model call and sent nothing (yet, in journal order)."""
_SECONDARY: Final = frozenset({NOTHING, "tally", "note", "notice", "context_request", "timer", "conversation_ended"})
"""Outputs that do not say what a step did when it also sent something else (a tally beside a reply)."""

_Z: Final = 1.96  # 95% two-sided
T = TypeVar("T")


class Step(msgspec.Struct, frozen=True, kw_only=True):
    """One handling by one agent that sent something: the unit attribution blames.

    `index` counts every agent's steps in journal order (from 1); `model_call` is the
    index of its first model call when it made one (the call an oracle answers).
    """

    index: int
    agent: str
    input_pos: int
    input_id: str
    position: int
    action: dict[str, Any]
    model_call: int | None = None


class ForkOutcome(msgspec.Struct, frozen=True, kw_only=True):
    fork: str
    outcome: str
    cause: str = ""


class Probe(msgspec.Struct, frozen=True, kw_only=True):
    """The forks run for one step (or fault event) and how they ended."""

    step: int | None
    agent: str
    position: int
    change: str
    successes: int
    samples: int
    low: float
    high: float
    forks: list[ForkOutcome] = []

    @property
    def p(self) -> float:
        return self.successes / self.samples if self.samples else 0.0


class Attribution(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="episode"):
    """The answer for one failed episode, with the forks that back it.

    `step`/`position` name the decisive step (None: none found): `position` is where its forks
    changed the history, the journal position of the input the step handled (or of the fault event
    undone), as the fork ids (`-f<position>-`) and the viewer give it; `decided` is False when
    the evidence does not single it out (overlapping intervals, or no change rescued the
    episode). `p`/`low`/`high` are the success rate, with its 95% Wilson interval, of the
    changes at the decisive step; `p_after`/`low_after`/`high_after` the same for what they are
    weighed against: the step after it (sampled) or the control fork (the repairs).
    """

    episode: str
    method: str
    agent: str | None
    step: int | None
    position: int | None
    decided: bool
    flipped: bool
    category: str = ""
    fault: str = ""
    p: float | None = None
    low: float | None = None
    high: float | None = None
    p_after: float | None = None
    low_after: float | None = None
    high_after: float | None = None
    wrong: dict[str, Any] | None = None
    right: dict[str, Any] | None = None
    steps: int = 0
    forks: int = 0
    model_calls: int = 0
    seconds: float = 0.0
    search: str = ""
    evidence: list[Probe] = []
    journal: str = ""
    """The journal that holds the forks."""


def wilson(successes: int, n: int, z: float = _Z) -> tuple[float, float]:
    """The Wilson score interval of a success rate."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def steps(rows: list[JournalRow], lookup: AgentLookup) -> list[Step]:
    """Every step of the episode's agents in journal order (see `Step`)."""
    by_id = {r.id: r for r in rows}
    found: dict[tuple[str, str], Step] = {}
    for row in rows:
        source = by_id.get(row.causation)
        if source is None or lookup(row.sender) is None or not (source.recipient or source.topic):
            continue
        key = (row.sender, source.id)
        step = found.get(key)
        if row.kind == "recording":
            rec = row.envelope().body
            assert isinstance(rec, Recording)
            if rec.call != "llm" or (step is not None and step.model_call is not None):
                continue
            if step is None:
                step = Step(index=0, agent=row.sender, input_pos=source.pos, input_id=source.id,
                            position=row.pos, action={"name": NOTHING})  # fmt: skip
            found[key] = msgspec.structs.replace(step, model_call=rec.index)
        elif row.recipient or row.topic:
            if step is None:
                found[key] = Step(index=0, agent=row.sender, input_pos=source.pos, input_id=source.id,
                                  position=row.pos, action=_action(row))  # fmt: skip
            elif step.action.get("name") == NOTHING or (
                step.action.get("name") in _SECONDARY and row.kind not in _SECONDARY
            ):
                found[key] = msgspec.structs.replace(step, action=_action(row))
    ordered = sorted(found.values(), key=lambda s: s.position)
    return [msgspec.structs.replace(s, index=i) for i, s in enumerate(ordered, start=1)]


def _action(row: JournalRow) -> dict[str, Any]:
    body = row.envelope().body
    if isinstance(body, ToolCall):
        return {"name": body.name, "arguments": body.arguments}
    if isinstance(body, AssistantTurn):
        return {"name": "reply", "text": body.text, "done": body.done}
    if isinstance(body, Note):
        return {"name": "note", "text": body.text, "to": row.recipient or f"#{row.topic}"}
    if isinstance(body, Finished):
        return {"name": "finish", "output": body.output}
    return {"name": row.kind}


def gold_action(
    rows: list[JournalRow], step: Step, task: Task, tools: list[str], agents: Collection[str] | None = None
) -> dict[str, Any] | None:
    """The task's gold action at `step`: the first ground-truth call its agent has not yet
    made successfully before it, else the final answer. None for an agent that neither calls
    tools nor is offered the domain's `tools` by its model requests (`tool_agents`; pass them as `agents` when
    asking of many steps of one episode: finding them reads every model request)."""
    if step.agent not in (tool_agents(rows, tools) if agents is None else agents):
        return None
    calls = {r.id: r for r in rows if r.kind == "tool_call" and r.sender == step.agent}
    done: list[dict[str, Any]] = []
    for row in rows:
        if row.pos > step.input_pos or row.kind != "tool_result" or row.causation not in calls:
            continue
        result = row.envelope().body
        if not getattr(result, "error", ""):
            done.append(_action(calls[row.causation]))
    for action in task.actions:
        if action.as_dict() in done:
            done.remove(action.as_dict())
        else:
            return action.as_dict()
    return {"name": "reply", "text": _final_text(task), "done": True}


def tool_agents(rows: list[JournalRow], tools: list[str]) -> set[str]:
    """Agents that call tools, or whose model requests offer the domain's `tools` (natively or in the prompt)."""
    found = {r.sender for r in rows if r.kind == "tool_call"}
    for row in rows:
        if row.kind == "recording" and row.sender not in found:
            rec = row.envelope().body
            if isinstance(rec, Recording) and rec.call == "llm" and _offers(rec.request, tools):
                found.add(row.sender)
    return found


def _offers(request: Any, tools: list[str]) -> bool:
    if not isinstance(request, dict):
        return False
    if request.get("tools"):
        return True
    messages = request.get("messages") or []
    system = str(messages[0].get("content", "")) if messages and isinstance(messages[0], dict) else ""
    return bool(tools) and all(name in system for name in tools)


def _final_text(task: Task) -> str:
    said = "; ".join(task.outputs)
    return f"Here is the outcome of your request: {said}." if said else "Everything you asked for is done."


class _Forks:
    """Runs the forks of one attribution (up to `workers` at a time) and keeps their results."""

    def __init__(
        self,
        journal: Path,
        episode: str,
        rows: list[JournalRow],
        made: list[Step],
        *,
        lookup: AgentLookup,
        backends: Callable[[str], ModelBackend],
        out: Path,
        workers: int,
        handler_timeout_s: float,
        system: str,
    ) -> None:
        self.journal, self.episode, self.rows, self.made = journal, episode, rows, made
        self.lookup, self.backends, self.out = lookup, backends, out
        self.handler_timeout_s = handler_timeout_s
        self.system = system
        self.limiter = anyio.CapacityLimiter(max(1, workers))
        self.results: dict[str, ForkResult] = {}
        self.draws = 0
        ref = episode_system(rows, system)
        self.own_system = ref is not None and ref.is_user_system

    def fresh(self, position: int, count: int = 1) -> list[dict[str, Any]]:
        """`fork_episode`'s arguments for `count` forks that each draw the model's randomness afresh from
        `position` on.

        A fork is a new draw of everything live after its change, as a sampling model's
        continuation is; each gets a number of its own in this attribution (in the order asked
        for, so an attribution run again reuses its forks). Models that sample by themselves
        ignore the setting; the simulator draws the built-in agents' mistakes again (`sample`,
        `sample_from` in their Start data). A system of one's own gets its records as journaled
        (its agents may read every field, and the history must replay), so there the number is
        the fork's `draw` alone.
        """
        self.draws += count
        numbers = range(self.draws - count + 1, self.draws + 1)
        if self.own_system:
            return [{"draw": n} for n in numbers]
        before = {
            agent: 1
            + sum(1 for s in self.made if s.agent == agent and s.model_call is not None and s.input_pos < position)
            for agent in {s.agent for s in self.made}
        }
        return [{"settings": {"sample": n, "sample_from": before}} for n in numbers]

    async def run(
        self,
        at: int,
        change: Change,
        draws: list[dict[str, Any]],
        answer: Answer | None = None,
    ) -> list[ForkResult]:
        done: list[ForkResult | None] = [None] * len(draws)

        async def one(i: int) -> None:
            async with self.limiter:
                done[i] = await fork_episode(
                    self.journal,
                    self.episode,
                    at,
                    change,
                    lookup=self.lookup,
                    backends=self.backends,
                    out=self.out,
                    verified=True,
                    answer=answer,
                    handler_timeout_s=self.handler_timeout_s,
                    system=self.system,
                    **draws[i],
                )

        async with anyio.create_task_group() as group:
            for i in range(len(draws)):
                group.start_soon(one, i)
        results = [r for r in done if r is not None]
        for r in results:
            self.results[r.episode] = r
        return results

    async def draw(
        self, step: int | None, agent: str, at: int, change: Change, n: int, answer: Answer | None = None
    ) -> Probe:
        """`probe` with `n` forks that each draw afresh from `at` on (see `fresh`)."""
        return await self.probe(step, agent, at, change, self.fresh(at, n), answer)

    async def probe(
        self,
        step: int | None,
        agent: str,
        at: int,
        change: Change,
        draws: list[dict[str, Any]],
        answer: Answer | None = None,
    ) -> Probe:
        results = await self.run(at, change, draws, answer)
        wins = sum(r.outcome.outcome == "success" for r in results)
        low, high = wilson(wins, len(results))
        return Probe(
            step=step,
            agent=agent,
            position=at,
            change=type(change).__struct_config__.tag if answer is None else "oracle",  # type: ignore[arg-type]
            successes=wins,
            samples=len(results),
            low=low,
            high=high,
            forks=[ForkOutcome(fork=r.episode, outcome=r.outcome.outcome, cause=r.outcome.cause) for r in results],
        )


async def attribute_episode(
    journal: str | Path,
    episode: str,
    *,
    lookup: AgentLookup,
    backends: Callable[[str], ModelBackend],
    method: Method = "auto",
    samples: int = DEFAULT_SAMPLES,
    workers: int = DEFAULT_SAMPLES,
    scratch: str | Path | None = None,
    handler_timeout_s: float = DEFAULT_HANDLER_TIMEOUT_S,
    system: str = "",
) -> Attribution:
    """Attribute the failure of `episode` to an agent and a step (see the module docstring).

    "auto" tries fault-event repair when the episode holds fault events, then
    oracle-guided repair when its domain has gold actions, then sampled
    counterfactuals, and stops at the first that finds a decisive step. Forks go to
    `scratch` (default `forks_path(journal)`), never to the source unless it is
    named; forks already there are reused. `samples` is the number of live
    continuations per step of the sampled method, run `workers` at a time, each handler of theirs within
    `handler_timeout_s`, its agents held to the recipients of `system` where the episode's start names no system
    (`fork_episode`).
    """
    started = time.perf_counter()
    journal = Path(journal)
    verify(journal, facts=False, resume=True).raise_if_broken()
    with JournalReader(journal) as reader:
        reader.check_episodes([episode])
        rows = list(reader.episode_rows(episode))
        summary = reader.episode(episode)
    assert summary is not None  # the journal holds the episode
    if summary.outcome == "success":
        raise FaultlineError(f"episode {episode!r} succeeded: there is no failure to attribute")
    if method not in ("auto", *METHODS):
        raise FaultlineError(f"unknown attribution method {method!r}; use auto or one of: {', '.join(METHODS)}")
    if samples < 1:
        raise FaultlineError(f"samples must be at least 1, not {samples}")
    lookup = episode_lookup(rows, lookup)
    made = steps(rows, lookup)
    if not made:
        raise FaultlineError(f"episode {episode!r} has no step of a known agent to attribute")
    domain = load_domain(summary.domain) if summary.domain else None
    task = domain.task(summary.task) if domain and summary.task else None
    forks = _Forks(
        journal,
        episode,
        rows,
        made,
        lookup=lookup,
        backends=backends,
        out=Path(scratch) if scratch is not None else forks_path(journal),
        workers=workers,
        handler_timeout_s=handler_timeout_s,
        system=system,
    )
    order: list[tuple[str, Callable[[], Awaitable[Attribution | None]]]] = [
        (FAULT_REPAIR, lambda: _fault_repair(forks, samples)),
        (ORACLE_REPAIR, lambda: _oracle_repair(forks, task, domain, samples)),
        (SAMPLED, lambda: _sampled(forks, samples)),
    ]
    chosen = [(name, run) for name, run in order if method in ("auto", name)]
    tried: list[Attribution] = []
    for _, run in chosen:
        found = await run()
        if found is None:
            continue
        tried.append(found)
        if found.decided or method != "auto":
            break
    if tried:
        answer = tried[-1] if tried[-1].decided else _undecided(tried)
        answer = msgspec.structs.replace(answer, evidence=[p for t in tried for p in t.evidence])
    else:
        answer = Attribution(
            episode=episode,
            method=chosen[-1][0],
            agent=None,
            step=None,
            position=None,
            decided=False,
            flipped=False,
            search=f"{chosen[-1][0]} does not apply: " + _why_not(chosen[-1][0], task),
        )
    flipped = any(p.successes for p in answer.evidence)
    return msgspec.structs.replace(
        answer,
        episode=episode,
        flipped=flipped,
        steps=len(made),
        forks=len(forks.results),
        model_calls=sum(r.model_calls for r in forks.results.values()),
        seconds=time.perf_counter() - started,
        journal=str(forks.out),
    )


def _undecided(tried: list[Attribution]) -> Attribution:
    """Where no method decided: the first answer that names a step (a repair that rescued where its control did
    too), else the last, saying what each method that ran found, so that one method's search hides no other's."""
    named = next((t for t in tried if t.agent is not None), tried[-1])
    if len(tried) == 1:
        return named
    return msgspec.structs.replace(named, search="; ".join(f"{t.method}: {t.search}" for t in tried))


def _why_not(method: str, task: Task | None) -> str:
    if method == FAULT_REPAIR:
        return "the episode holds no fault event"
    if method == ORACLE_REPAIR:
        return "no gold actions for this episode" if task is None else "no step of an agent that calls tools"
    return "no step to resample"


def _blank(method: str, search: str = "") -> Attribution:
    return Attribution(
        episode="", method=method, agent=None, step=None, position=None, decided=False, flipped=False, search=search
    )


def _at_step(
    blank: Attribution,
    step: Step,
    probe: Probe,
    after: Probe | None,
    evidence: list[Probe],
    **more: Any,
) -> Attribution:
    """The answer naming `step`: its success estimate `probe`, and `after`, the one at the step that follows."""
    return msgspec.structs.replace(
        blank,
        agent=step.agent,
        step=step.index,
        position=step.input_pos,
        wrong=step.action,
        evidence=evidence,
        **_estimates(probe, after),
        **more,
    )


def _estimates(probe: Probe, after: Probe | None) -> dict[str, float | None]:
    """An answer's success estimates: `probe` at what it names, `after` at what it is compared with."""
    return {
        "p": probe.p,
        "low": probe.low,
        "high": probe.high,
        "p_after": after.p if after else None,
        "low_after": after.low if after else None,
        "high_after": after.high if after else None,
    }


def _undoable(row: JournalRow) -> bool:
    applied = row.envelope().body
    return isinstance(applied, FaultApplied) and applied.model_call < 0


async def _fault_repair(forks: _Forks, samples: int) -> Attribution | None:
    """Undo each fault event in turn, beside a control that keeps it; the first whose undoing rescues
    the episode where the control does not decided it. Where none did, a rule that applied more than once
    is undone whole (`UndoRule`, at its first event): a cycle on every message of an agent is undone only so.
    A fault on a model request has no message to deliver instead: the other methods cover it."""
    faults = [r for r in forks.rows if r.kind == "fault_applied" and _undoable(r)]
    if not faults:
        return None

    def undone(row: JournalRow) -> tuple[FaultApplied, Step | None]:
        applied = row.envelope().body
        assert isinstance(applied, FaultApplied)
        sender, causation = str(applied.original.get("sender", "")), str(applied.original.get("causation", ""))
        return applied, next((s for s in forks.made if s.agent == sender and s.input_id == causation), None)

    async def weigh(change: UndoFault, row: JournalRow) -> tuple[Probe, Probe | None]:
        applied, step = undone(row)
        index, sender = (step.index if step else None), str(applied.original.get("sender", ""))
        # The control keeps what the fault delivered and draws the rest again, from its first message.
        delivered = {str(result.get("id", "")) for result in applied.results}
        at = min((r.pos for r in forks.rows if r.id in delivered), default=row.pos)
        return await _weigh(
            samples,
            partial(forks.draw, index, sender, row.pos, change),
            partial(forks.draw, index, sender, at, Keep()),
        )

    probes, named = await _first_decided(faults, partial(weigh, UndoFault()))
    events: dict[str, list[JournalRow]] = {}
    for row in faults:
        events.setdefault(_rule_of(row), []).append(row)
    firsts = [rows[0] for rows in events.values() if len(rows) > 1]
    whole = False
    if firsts and not (named is not None and named[1].low > named[2].high):
        more, by_rule = await _first_decided(firsts, partial(weigh, UndoRule()))
        probes += more
        if by_rule is not None and (named is None or by_rule[1].low > by_rule[2].high):
            named, whole = by_rule, True
    if named is None:
        rules = ""
        if firsts:
            which = "the rule" if len(firsts) == 1 else f"any of the {len(firsts)} rules"
            rules = f"; nor does undoing {which} that applied more than once, whole"
        return msgspec.structs.replace(
            _blank(
                FAULT_REPAIR, f"undoing any one of the {len(faults)} fault events does not rescue the episode{rules}"
            ),
            evidence=probes,
        )
    row, undo, control = named
    applied, step = undone(row)
    if whole:
        search = (
            f"no fault event undone alone rescued the episode; rule {applied.rule_id} undone whole, its"
            f" {len(events[applied.rule_id])} events: {_controlled(undo, control)}"
        )
    else:
        tried = sum(1 for p in probes if p.change == "undo_fault")
        search = f"undid {tried} of {len(faults)} fault events in journal order; {_controlled(undo, control)}"
    return msgspec.structs.replace(
        _blank(FAULT_REPAIR, search),
        agent=str(applied.original.get("sender", "")),
        step=undo.step,
        position=row.pos,
        decided=undo.low > control.high,
        fault=applied.fault,
        wrong=step.action if step else None,
        evidence=probes,
        **_estimates(undo, control),
    )


def _rule_of(row: JournalRow) -> str:
    applied = row.envelope().body
    assert isinstance(applied, FaultApplied)
    return applied.rule_id


async def _first_decided(
    candidates: Sequence[T], weigh: Callable[[T], Awaitable[tuple[Probe, Probe | None]]]
) -> tuple[list[Probe], tuple[T, Probe, Probe] | None]:
    """Each candidate repair weighed in turn (`_weigh`) until one decides; the probes run, and the one to
    name: the first that decided, else the largest rise of a repair over its control (None: no repair
    rescued the episode)."""
    probes: list[Probe] = []
    weighed: list[tuple[T, Probe, Probe]] = []
    for candidate in candidates:
        fixed, control = await weigh(candidate)
        probes += [fixed] + ([control] if control else [])
        if control is not None:
            weighed.append((candidate, fixed, control))
            if fixed.low > control.high:
                break
    return probes, max(weighed, key=lambda w: (w[1].low > w[2].high, w[1].p - w[2].p), default=None)


async def _weigh(
    samples: int, repair: Callable[[int], Awaitable[Probe]], control: Callable[[int], Awaitable[Probe]]
) -> tuple[Probe, Probe | None]:
    """A repair and its control (None: the repair's first continuation did not rescue, so no control ran).

    One continuation each first; when the repair rescued and its control did not, both are topped up
    to `samples`, so one lucky continuation never decides: the repair decided the episode when its
    interval lies above the control's."""
    fixed = await repair(1)
    if not fixed.successes:
        return fixed, None
    kept = await control(1)
    if not kept.successes and samples > 1:
        fixed = _pooled(fixed, await repair(samples - 1))
        if kept.change != RECORDED:
            kept = _pooled(kept, await control(samples - 1))
    return fixed, kept


async def _control(forks: _Forks, step: Step, n: int) -> Probe:
    """The control of a repaired step: its recorded output kept, everything after it drawn again.

    It forks at the first message after the step's own outputs; when there is none, the rest is the
    recorded failure itself, with nothing left to draw."""
    sent = max(
        (r.pos for r in forks.rows if r.sender == step.agent and r.causation == step.input_id), default=step.position
    )
    at = next((r.pos for r in forks.rows if r.pos > sent and (r.recipient or r.topic)), None)
    if at is None:
        recorded = [ForkOutcome(fork=forks.episode, outcome="failure", cause="the recorded episode")]
        return Probe(step=step.index, agent=step.agent, position=sent, change=RECORDED, successes=0, samples=1,
                     low=0.0, high=0.0, forks=recorded)  # fmt: skip
    return await forks.probe(step.index, step.agent, at, Keep(), forks.fresh(at, n))


def _controlled(repair: Probe, control: Probe) -> str:
    """What a repair that rescued and its control (the same history, the step kept, the rest drawn again) say."""
    said = (
        f"{repair.successes} of {repair.samples} repaired continuations succeeded,"
        f" {control.successes} of {control.samples} of the control's"
    )
    if repair.low > control.high:
        return f"{said}: decided"
    return f"{said}: the intervals overlap, so undecided (the continuation alone can rescue it)"


async def _oracle_repair(forks: _Forks, task: Task | None, domain: Domain | None, samples: int) -> Attribution | None:
    """Give each model step of a tool-calling agent its gold action, one step at a time, beside a control;
    see the module docstring."""
    if task is None or domain is None:
        return None
    tools = [spec.name for spec in domain.tools()]
    agents = tool_agents(forks.rows, tools)
    candidates = [
        (s, gold)
        for s in forks.made
        if s.model_call is not None and (gold := gold_action(forks.rows, s, task, tools, agents)) is not None
    ]
    if not candidates:
        return None

    async def weigh(candidate: tuple[Step, dict[str, Any]]) -> tuple[Probe, Probe | None]:
        step, gold = candidate
        answer = Answer.acting(step.agent, gold, model=ORACLE, call_id=f"oracle-{step.index}")
        return await _weigh(
            samples,
            partial(forks.draw, step.index, step.agent, step.input_pos, Keep(), answer=answer),
            partial(_control, forks, step),
        )

    probes, named = await _first_decided(candidates, weigh)
    if named is None:
        return msgspec.structs.replace(
            _blank(ORACLE_REPAIR, f"no single gold action among {len(candidates)} steps rescues the episode"),
            evidence=probes,
        )
    (step, gold), fixed, control = named
    tried = sum(1 for p in probes if p.change == "oracle")
    return _at_step(
        _blank(
            ORACLE_REPAIR, f"gold action at {tried} steps in turn, each beside a control; {_controlled(fixed, control)}"
        ),
        step,
        fixed,
        control,
        probes,
        decided=fixed.low > control.high,
        category=categorize(step.action, gold, task, domain),
        right=gold,
    )


async def largest_rise(p: Callable[[int], Awaitable[Probe]], n: int) -> int | None:
    """The step k of 1..n where p rises most from step k+1 (p(n+1) is the recorded failure).

    Searched from the end, where continuations are shortest: steps n, n-1, ... are probed until one
    rescues the episode (the latest step before which the failure was not yet locked in), then the
    step before it; the answer is the largest rise among the adjacent steps probed. So a curve such
    as 1, 1, .88, .12, 0 gives step 3 (the rise of .76), not step 4, the last with any success, and
    one that rises again, such as .12, 0, 1, 0, 0, gives step 3 whatever lies before it. None: no
    step rescues the episode.
    """
    probed: dict[int, Probe] = {n + 1: await p(n + 1)}
    k = n
    while k >= 1:
        probed[k] = await p(k)
        if probed[k].successes:
            break
        k -= 1
    if k > 1:
        probed[k - 1] = await p(k - 1)
    return _best_rise(probed)


def _best_rise(probed: Mapping[int, Probe]) -> int | None:
    """The step of the largest positive rise of p to the next step among adjacent steps probed."""
    rises = [(probed[k].p - probed[k + 1].p, k) for k in sorted(probed) if k + 1 in probed]
    rise, best = max(rises, key=lambda r: (r[0], -r[1]), default=(0.0, 0))
    return best if rise > 0 else None


async def _sampled(forks: _Forks, samples: int) -> Attribution | None:
    """p(k) searched from the last model step back (`largest_rise`); see the module docstring.

    Only steps that made a model call are probed: resampling from a step without one draws
    nothing new before the next that has one, so both share that step's continuations. The
    search probes with `PILOT_SAMPLES` continuations; the step it finds and the one after are then
    topped up to `samples`, unless no outcome of the rest could separate their intervals, and when
    the step after then shows the larger rise, the answer moves on to it.
    """
    drawn = [s for s in forks.made if s.model_call is not None]
    probes: dict[int, Probe] = {}

    async def p(k: int, wanted: int = min(samples, PILOT_SAMPLES)) -> Probe:
        """The probe of the k-th model step (k = len(drawn) + 1: after the last one, the recorded failure)."""
        if k > len(drawn):
            return Probe(step=None, agent="", position=0, change="replay", successes=0, samples=1, low=0.0, high=0.0)
        step = drawn[k - 1]
        had = probes.get(k)
        more = wanted - (had.samples if had else 0)
        if more > 0:
            probe = await forks.draw(step.index, step.agent, step.input_pos, Keep(), more)
            probes[k] = _pooled(had, probe) if had else probe
        return probes[k]

    n = len(drawn)
    if n == 0:
        return None
    lo = await largest_rise(p, n)
    if lo is None:
        return msgspec.structs.replace(
            _blank(SAMPLED, f"scan: resampling from no model step rescues the episode ({len(probes)} probed)"),
            evidence=[probes[k] for k in sorted(probes)],
        )
    best, after = probes[lo], await p(lo + 1)
    while _separable(best, after, samples):
        best, after = await p(lo, samples), await p(lo + 1, samples)
        later = _best_rise({k: probe for k, probe in probes.items() if k >= lo} | {n + 1: await p(n + 1)})
        if later is None or later <= lo:
            break
        lo, best, after = later, probes[later], await p(later + 1)  # the next step rescues more: the rise is later
    step = drawn[lo - 1]
    return _at_step(
        _blank(
            SAMPLED,
            f"backward scan over {n} model steps of {len(forks.made)}, {min(samples, PILOT_SAMPLES)} sample per probe,"
            f" {samples} at the step named and the next",
        ),
        step,
        best,
        after,
        [probes[k] for k in sorted(probes)],
        decided=best.low > after.high,
    )


def _pooled(one: Probe, more: Probe) -> Probe:
    """Two probes of the same step as one."""
    wins, n = one.successes + more.successes, one.samples + more.samples
    low, high = wilson(wins, n)
    return msgspec.structs.replace(one, successes=wins, samples=n, low=low, high=high, forks=[*one.forks, *more.forks])


def _separable(best: Probe, after: Probe, samples: int) -> bool:
    """Whether topping the two probes up to `samples` is worth it: something to add, and some outcome
    of the added continuations would put best's interval above after's."""
    exact = after.step is None  # after the last model step: the recorded failure, nothing to draw
    if best.samples >= samples and (exact or after.samples >= samples):
        return False
    top = wilson(best.successes + max(0, samples - best.samples), max(samples, best.samples))[0]
    bottom = after.high if exact else wilson(after.successes, max(samples, after.samples))[1]
    return top > bottom
