"""A failed episode as the FAMA analysts see it: the trajectory and, for informed analysts, the
task's ground truth and what the one says against the other.

`failure_case` is a pure function of an episode's envelopes in stream order, so the controller on
the bus and `faultline fama analyze` on a journal file build the same case. It reads what a human
analyst could read: the conversation, the tool calls and their results and the completed event's
outcome; for informed analysts (`analysts="informed"`) also the task's ground-truth actions and
required outputs from the domain, which a trajectory case, as in the FAMA paper, never loads. It
never reads a simulator's own mistake labels (`EpisodeCompleted.details`, tallies, model response
metadata).

The evidence lines the trajectory up with the ground truth: each successful tool call that is not
the next ground-truth action is a deviation, judged by `faultline.replay.categorize` against the
action it took the place of. A deviation is recovered when it changed nothing (a read) and the
action it displaced was made later; a write that went through is never recovered.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import msgspec

from faultline._errors import FaultlineError
from faultline.core import (
    AssistantTurn,
    Envelope,
    EpisodeCompleted,
    EpisodeStarted,
    LlmResponse,
    Recording,
    ToolCall,
    ToolResult,
    UserTurn,
)
from faultline.envs import Domain, Task, load_domain
from faultline.replay import Attribution, categorize

TOOL_AGENT = "tool"
"""The agent whose decisions are analysed."""
FAILED_OUTCOMES = frozenset({"failure", "timeout"})
"""Outcomes the controller analyses; an `error` is a crash of code, not a decision gone wrong."""

Analysts = Literal["trajectory", "informed"]
"""What the analysts are shown: the trajectory alone, as in the FAMA paper, or with the ground truth
and the attribution (`faultline.runtime.FamaConfig.analysts`)."""


class Deviation(msgspec.Struct, frozen=True, kw_only=True):
    """A tool call (or the final answer) that is not what the ground truth does at that point."""

    turn: int
    """Index in the case's trajectory."""
    wrong: dict[str, Any]
    right: dict[str, Any] | None
    category: str
    recovered: bool = False


class Decisive(msgspec.Struct, frozen=True, kw_only=True):
    """The replay-based attribution's decisive step: whose step, which, what went wrong, how it was found.

    `confidence` is the success rate of the forks that changed that step (None when the method
    gives none); `decided` is False when the forks did not single it out.
    """

    agent: str
    step: int
    category: str
    method: str
    confidence: float | None = None
    decided: bool = True


class Evidence(msgspec.Struct, frozen=True, kw_only=True):
    """The trajectory against the ground truth; `sources` names what it was built from."""

    deviations: list[Deviation] = []
    unfinished: list[dict[str, Any]] = []
    """Ground-truth actions never made."""
    missing_outputs: list[str] = []
    """Required outputs the agent never told the user."""
    ended_by: str = ""
    """Who closed the conversation first: "agent", "user", or "limit" (a budget or a timeout)."""
    decisive: Decisive | None = None
    """From `with_attribution`, when the attribution found a decisive step."""
    sources: list[str] = []


class FailureCase(msgspec.Struct, frozen=True, kw_only=True):
    """One failed episode, ready for the analysts."""

    episode: str
    domain: str
    task: str
    model: str
    outcome: str
    cause: str = ""
    instruction: str = ""
    trajectory: list[dict[str, Any]] = []
    """Turns in order: {"role": "user"|"agent"|"call"|"result", "text": ...}."""
    gold_actions: list[dict[str, Any]] = []
    required_outputs: list[str] = []
    evidence: Evidence = Evidence()
    analysts: Analysts = "informed"
    """What the analysts are shown of this case; one journaled before the choice existed was informed."""

    def transcript(self) -> str:
        """The trajectory as numbered lines, as a model reads it."""
        return "\n".join(f"[{i}] {turn['role']}: {turn['text']}" for i, turn in enumerate(self.trajectory))

    def shown(self) -> list[str]:
        """What the analysts are given, as a verdict's `evidence` records it: trajectory analysts get
        the trajectory whatever else the case holds (an attribution reported beside them)."""
        return ["trajectory"] if self.analysts == "trajectory" else list(self.evidence.sources)


class _Call(msgspec.Struct, frozen=True, kw_only=True):
    turn: int
    action: dict[str, Any]
    ok: bool


def failure_case(envelopes: Iterable[Envelope], analysts: Analysts = "trajectory") -> FailureCase | None:
    """The case of one episode from its envelopes in stream order; None unless it failed, and on a system of one's
    own, whose agents are none of those FAMA's analysts read and its helpers serve (the user and the tool agent).

    A trajectory case (the default, the FAMA paper's) holds the trajectory, the outcome and who ended
    the conversation; an informed one also the ground truth and the evidence built from it.
    """
    started: EpisodeStarted | None = None
    completed: EpisodeCompleted | None = None
    episode = ""
    model = ""
    trajectory: list[dict[str, Any]] = []
    calls: dict[str, tuple[int, dict[str, Any]]] = {}
    made: list[_Call] = []
    last_speaker = ""
    for env in envelopes:
        body = env.body
        if completed is not None:
            break
        match body:
            case EpisodeStarted() if started is None:
                started, episode = body, env.episode
            case EpisodeCompleted():
                completed, episode = body, env.episode
            case Recording(call="llm") if env.sender == TOOL_AGENT and not model and body.response:
                model = msgspec.convert(body.response, LlmResponse).model
            case UserTurn() if env.recipient == TOOL_AGENT:
                trajectory.append({"role": "user", "text": body.text})
                last_speaker = last_speaker or ("user" if body.done else "")
            case AssistantTurn() if env.sender == TOOL_AGENT:
                trajectory.append({"role": "agent", "text": body.text})
                last_speaker = last_speaker or ("agent" if (body.done or body.ends) else "")
            case ToolCall() if env.sender == TOOL_AGENT:
                action = {"name": body.name, "arguments": dict(body.arguments)}
                calls[body.call_id] = (len(trajectory), action)
                trajectory.append({"role": "call", "text": _call_text(action, body.arguments_error)})
            case ToolResult() if body.call_id in calls:
                turn, action = calls.pop(body.call_id)
                made.append(_Call(turn=turn, action=action, ok=not body.error))
                trajectory.append(
                    {"role": "result", "text": f"Error: {body.error}" if body.error else _short(body.output)}
                )
            case _:
                pass
    if started is None or started.system or completed is None or completed.outcome not in FAILED_OUTCOMES:
        return None
    ended_by = "limit" if completed.outcome == "timeout" or not last_speaker else last_speaker
    alone = FailureCase(
        episode=episode,
        domain=started.domain,
        task=started.task,
        model=model or "unknown",
        outcome=completed.outcome,
        cause=completed.cause,
        trajectory=trajectory,
        evidence=Evidence(ended_by=ended_by, sources=["trajectory"]),
        analysts="trajectory",
    )
    if analysts == "trajectory":
        return alone
    domain, task = _ground_truth(started)
    gold = [a.as_dict() for a in task.actions] if task else []
    outputs = list(task.outputs) if task else []
    return msgspec.structs.replace(
        alone,
        instruction=task.instruction if task else "",
        gold_actions=gold,
        required_outputs=outputs,
        evidence=_evidence(trajectory, made, gold, outputs, task, domain, ended_by),
        analysts="informed",
    )


def with_attribution(case: FailureCase, attribution: Attribution) -> FailureCase:
    """The case with the attribution's decisive step among its evidence (unchanged when it found none)."""
    if attribution.step is None or attribution.agent is None:
        return case
    decisive = Decisive(
        agent=attribution.agent,
        step=attribution.step,
        category=attribution.category,
        method=attribution.method,
        confidence=attribution.p,
        decided=attribution.decided,
    )
    evidence = msgspec.structs.replace(
        case.evidence, decisive=decisive, sources=[*case.evidence.sources, "attribution"]
    )
    return msgspec.structs.replace(case, evidence=evidence)


def _ground_truth(started: EpisodeStarted) -> tuple[Domain | None, Task | None]:
    try:
        domain = load_domain(started.domain)
        return domain, domain.task(started.task)
    except FaultlineError:
        return None, None  # the analysts then judge from the trajectory alone


def _evidence(
    trajectory: list[dict[str, Any]],
    made: list[_Call],
    gold: list[dict[str, Any]],
    outputs: list[str],
    task: Task | None,
    domain: Domain | None,
    ended_by: str,
) -> Evidence:
    writes = {spec.name for spec in domain.tools() if spec.writes} if domain else set()
    done = [c for c in made if c.ok]
    deviations: list[Deviation] = []
    step = 0
    for i, call in enumerate(done):
        if step < len(gold) and call.action == gold[step]:
            step += 1
            continue
        if call.action in gold[:step] and call.action["name"] not in writes:
            continue  # a lookup made again
        right = gold[step] if step < len(gold) else None
        later = [c.action for c in done[i + 1 :]]
        recovered = right is not None and right in later and call.action["name"] not in writes
        deviations.append(
            Deviation(
                turn=call.turn,
                wrong=call.action,
                right=right,
                category=categorize(call.action, right, task, domain),
                recovered=recovered,
            )
        )
        if not recovered and right is not None:
            step += 1  # the deviation took the place of that action
    said = " ".join(t["text"] for t in trajectory if t["role"] == "agent")
    missing = [o for o in outputs if o not in said]
    final = next((i for i in range(len(trajectory) - 1, -1, -1) if trajectory[i]["role"] == "agent"), None)
    misread = [o for o in missing if _near_miss(o, said)]
    if misread and final is not None and step >= len(gold):
        wrong = {"name": "reply", "text": trajectory[final]["text"], "done": ended_by == "agent"}
        right = {"name": "reply", "text": "; ".join(outputs), "done": True}
        deviations.append(
            Deviation(turn=final, wrong=wrong, right=right, category=categorize(wrong, right, task, domain))
        )
    sources = ["trajectory"] + (["gold_actions", "required_outputs"] if task else [])
    return Evidence(
        deviations=deviations,
        unfinished=[a for a in gold[step:] if a not in [c.action for c in done]],
        missing_outputs=missing,
        ended_by=ended_by,
        sources=sources,
    )


def _near_miss(expected: str, said: str) -> bool:
    """True when `said` holds a string of `expected`'s length that differs from it in one character."""
    n = len(expected)
    return n > 1 and any(
        sum(a != b for a, b in zip(expected, said[i : i + n], strict=True)) == 1 for i in range(len(said) - n + 1)
    )


def _call_text(action: dict[str, Any], arguments_error: str) -> str:
    if arguments_error:
        return f"{action['name']}(<unparsable arguments: {arguments_error}>)"
    return f"{action['name']}({msgspec.json.encode(action['arguments']).decode()})"


MAX_RESULT_CHARS = 2000
"""A tool result longer than this is cut in the transcript an analyst reads."""


def _short(output: Any) -> str:
    text = output if isinstance(output, str) else msgspec.json.encode(output).decode()
    return text if len(text) <= MAX_RESULT_CHARS else text[:MAX_RESULT_CHARS] + " ...(cut)"
