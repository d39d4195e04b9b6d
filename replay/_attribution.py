"""Failure attribution: which decision of an agent made a failed episode fail.

A repair of decision i is a fork at the message the agent was handling when it
made decision i: everything before is served from the journal, and from decision
i on its model backend follows the task's ground truth (the backend says how, as
`FollowsGroundTruth.repair_settings`), so decision i is replaced by the
ground-truth action and one repair can decide the outcome. A repair at i rescues the episode exactly when no decision before i was
decisive, so "rescued" is true up to the first decisive decision and false after
it. The decisive decision is the last one whose repair still rescues the
episode; bisection finds it in about log2(n) + 1 forks.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from faultline._errors import FaultlineError
from faultline.core import AssistantTurn, FollowsGroundTruth, ModelBackend, Recording, ToolCall
from faultline.envs import EARLY_STOP, POLICY_VIOLATION, WRONG_ENTITY, WRONG_VALUE, Domain, Task, load_domain
from faultline.journal import JournalReader, JournalRow, verify
from faultline.replay._fork import Keep, fork_episode, forks_path
from faultline.replay._replay import AgentLookup


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    """One model call of the tool agent and what it did."""

    index: int
    input_pos: int
    recording_pos: int
    action: dict[str, Any]
    mistake: dict[str, Any] | None = None


class Attribution(msgspec.Struct, frozen=True, kw_only=True):
    episode: str
    agent: str
    decision: int | None
    position: int | None
    wrong: dict[str, Any] | None = None
    right: dict[str, Any] | None = None
    category: str = ""
    forks: int = 0
    decisions: int = 0
    evidence: list[str] = []
    journal: str = ""
    """The journal that holds the repair forks."""


def decisions(rows: list[JournalRow], agent: str) -> list[Decision]:
    """The agent's model calls in order, each with the action it led to."""
    by_id = {r.id: r for r in rows}
    outputs: dict[str, list[JournalRow]] = {}
    for row in rows:
        if row.sender == agent and row.kind in ("tool_call", "assistant_turn"):
            outputs.setdefault(row.causation, []).append(row)
    found: list[Decision] = []
    for row in rows:
        if row.sender != agent or row.kind != "recording":
            continue
        rec = row.envelope().body
        assert isinstance(rec, Recording)
        if rec.call != "llm":
            continue
        source = by_id.get(row.causation)
        acted = outputs.get(row.causation, [])
        found.append(
            Decision(
                index=len(found) + 1,
                input_pos=source.pos if source else row.pos,
                recording_pos=row.pos,
                action=_action(acted[0]) if acted else {"name": "(nothing)"},
                mistake=(rec.response or {}).get("metadata", {}).get("mistake"),
            )
        )
    return found


def _action(row: JournalRow) -> dict[str, Any]:
    body = row.envelope().body
    if isinstance(body, ToolCall):
        return {"name": body.name, "arguments": body.arguments}
    if isinstance(body, AssistantTurn):
        return {"name": "reply", "text": body.text, "done": body.done}
    return {"name": row.kind}


def categorize(wrong: dict[str, Any], right: dict[str, Any] | None, task: Task | None, domain: Domain | None) -> str:
    """The FAMA category of a wrong action, judged against the repaired one.

    Categories are the domain's to define: a wrong tool call is matched against the
    domain's plausible mistakes of each category at the ground-truth step the repair
    took. What the domain does not list falls back to the shape of the difference.
    """
    if right is None:
        return ""
    wrong_reply, right_reply = wrong.get("name") == "reply", right.get("name") == "reply"
    if wrong_reply and wrong.get("done") and not (right_reply and right.get("done")):
        return EARLY_STOP
    if wrong_reply and right_reply:
        return WRONG_VALUE  # the final answer stated something other than the facts
    as_action = {"name": wrong.get("name"), "arguments": wrong.get("arguments") or {}}
    if task is not None and as_action in [a.as_dict() for a in task.forbidden]:
        return POLICY_VIOLATION
    if task is not None and domain is not None and not right_reply:
        steps = [
            i
            for i, a in enumerate(task.actions)
            if a.as_dict() == {"name": right.get("name"), "arguments": right.get("arguments") or {}}
        ]
        for step in steps:
            for category in (POLICY_VIOLATION, WRONG_VALUE, WRONG_ENTITY):
                if as_action in [a.as_dict() for a in domain.mistake_candidates(task, step, category)]:
                    return category
    if wrong.get("name") != right.get("name"):
        return WRONG_ENTITY
    return WRONG_VALUE


async def attribute(
    journal: str | Path,
    episode: str,
    *,
    lookup: AgentLookup,
    backends: Callable[[str], ModelBackend],
    agent: str,
    repair: FollowsGroundTruth,
    scratch: str | Path | None = None,
) -> Attribution:
    """Find the decisive decision of `agent` in a failed episode by bisection over repairs.

    `repair` is the backend that follows the ground truth from a decision on. The
    repair forks go to `scratch` (default `forks_path(journal)`); forks already there
    from an earlier attribution are reused, not run again.
    """
    verify(journal, facts=False, resume=True).raise_if_broken()
    with JournalReader(journal) as reader:
        rows = list(reader.episode_rows(episode))
        summary = reader.episode(episode)
    if summary is None or not rows:
        raise FaultlineError(f"episode {episode!r} is not in {journal}")
    if summary.outcome == "success":
        raise FaultlineError(f"episode {episode!r} succeeded: there is no failure to attribute")
    if repair.repair_settings(agent, 1) is None:
        raise FaultlineError(f"the model backend {type(repair).__name__} cannot repair decisions of agent {agent!r}")
    made = decisions(rows, agent)
    if not made:
        raise FaultlineError(f"episode {episode!r} has no decision of the {agent!r} agent to repair")
    forks: dict[int, Any] = {}
    destination = Path(scratch) if scratch is not None else forks_path(journal)

    async def rescued(i: int) -> bool:
        if i not in forks:
            forks[i] = await fork_episode(
                journal,
                episode,
                made[i - 1].input_pos,
                Keep(),
                lookup=lookup,
                backends=backends,
                out=destination,
                settings=repair.repair_settings(agent, i),
                verified=True,
            )
        return bool(forks[i].outcome.outcome == "success")

    evidence = []
    if not await rescued(1):
        evidence.append("repairing every decision from the first one on does not rescue the episode")
        return Attribution(
            episode=episode,
            agent=agent,
            decision=None,
            position=None,
            forks=len(forks),
            decisions=len(made),
            evidence=evidence,
            journal=str(destination),
        )
    lo, hi = 1, len(made)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if await rescued(mid):
            lo = mid
        else:
            hi = mid - 1
    decisive = made[lo - 1]
    right = _repaired_action(destination, forks[lo].episode, agent, lo, decisive.action)
    domain = load_domain(summary.domain) if summary.domain else None
    task = domain.task(summary.task) if domain and summary.task else None
    evidence.append(f"repair at decision {lo} rescues the episode ({forks[lo].episode})")
    if lo + 1 in forks:
        evidence.append(
            f"repair at decision {lo + 1} does not ({forks[lo + 1].episode}: {forks[lo + 1].outcome.cause})"
        )
    return Attribution(
        episode=episode,
        agent=agent,
        decision=lo,
        position=decisive.recording_pos,
        wrong=decisive.action,
        right=right,
        category=categorize(decisive.action, right, task, domain),
        forks=len(forks),
        decisions=len(made),
        evidence=evidence,
        journal=str(destination),
    )


def _repaired_action(
    journal: str | Path, fork: str, agent: str, index: int, wrong: dict[str, Any]
) -> dict[str, Any] | None:
    """What the repair did at decision `index`; for a wrong call, the call it made (past its confirmation question)."""
    with JournalReader(journal) as reader:
        rows = list(reader.episode_rows(fork))
    made = decisions(rows, agent)[index - 1 :]
    if not made:
        return None
    if wrong.get("name") not in ("reply", "(nothing)"):
        for decision in made:
            if decision.action.get("name") != "reply" or decision.action.get("done"):
                return decision.action
    return made[0].action
