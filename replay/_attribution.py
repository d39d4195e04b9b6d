"""Failure attribution: which tool-agent decision made a failed episode fail.

A repair of decision i is a fork at the message the tool agent was handling when
it made decision i: everything before is served from the journal, and from
decision i on the simulator runs without mistakes (`repair_from_decision`), so
decision i is replaced by the ground-truth action and one repair can decide the
outcome. A repair at i rescues the episode exactly when no decision before i was
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
from faultline.bus import AssistantTurn, Recording, ToolCall
from faultline.envs import EARLY_STOP, POLICY_VIOLATION, WRONG_ENTITY, WRONG_VALUE, load_domain
from faultline.journal import JournalReader, JournalRow
from faultline.replay._fork import Keep, fork_episode
from faultline.replay._replay import AgentLookup
from faultline.runtime.models import ModelBackend

TOOL_AGENT = "tool"


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


def decisions(rows: list[JournalRow], agent: str = TOOL_AGENT) -> list[Decision]:
    """The agent's model calls in order, each with the action it led to."""
    by_id = {r.id: r for r in rows}
    outputs: dict[str, list[JournalRow]] = {}
    for row in rows:
        if row.sender == agent and row.kind in ("tool_call", "assistant_turn"):
            outputs.setdefault(row.causation, []).append(row)
    found = []
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


def categorize(wrong: dict[str, Any], right: dict[str, Any] | None, forbidden: list[dict[str, Any]]) -> str:
    """The FAMA category of a wrong action, judged against the repaired one."""
    if right is None:
        return ""
    if wrong.get("name") == "reply" and right.get("name") != "reply":
        return EARLY_STOP
    if {"name": wrong.get("name"), "arguments": wrong.get("arguments")} in forbidden:
        return POLICY_VIOLATION
    if wrong.get("name") != right.get("name"):
        return WRONG_ENTITY
    wrong_args, right_args = wrong.get("arguments") or {}, right.get("arguments") or {}
    if wrong_args.keys() == right_args.keys():
        changed = [k for k in right_args if wrong_args[k] != right_args[k]]
        if changed and all(k.endswith("_id") or k.endswith("_ids") for k in changed):
            return WRONG_ENTITY if any(k in ("order_id", "user_id") for k in changed) else WRONG_VALUE
        return WRONG_VALUE
    return POLICY_VIOLATION


async def attribute(
    journal: str | Path,
    episode: str,
    *,
    lookup: AgentLookup,
    backends: Callable[[str], ModelBackend],
    scratch: str | Path,
) -> Attribution:
    """Find the decisive tool-agent decision of a failed episode by bisection over repairs.

    Forks are written to `scratch` (a journal file of their own), not to `journal`.
    """
    with JournalReader(journal) as reader:
        rows = list(reader.episode_rows(episode))
        summary = reader.episode(episode)
    if summary is None or not rows:
        raise FaultlineError(f"episode {episode!r} is not in {journal}")
    if summary.outcome == "success":
        raise FaultlineError(f"episode {episode!r} succeeded: there is no failure to attribute")
    made = decisions(rows)
    if not made:
        raise FaultlineError(f"episode {episode!r} has no decision of the {TOOL_AGENT!r} agent to repair")
    forks: dict[int, Any] = {}

    async def rescued(i: int) -> bool:
        if i not in forks:
            forks[i] = await fork_episode(
                journal, episode, made[i - 1].input_pos, Keep(),
                lookup=lookup, backends=backends, out=scratch, settings={"repair_from_decision": i},
            )
        return bool(forks[i].outcome.outcome == "success")

    evidence = []
    if not await rescued(1):
        evidence.append("repairing every decision from the first one on does not rescue the episode")
        return Attribution(episode=episode, agent=TOOL_AGENT, decision=None, position=None, forks=len(forks), decisions=len(made), evidence=evidence)
    lo, hi = 1, len(made)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if await rescued(mid):
            lo = mid
        else:
            hi = mid - 1
    decisive = made[lo - 1]
    right = _repaired_action(scratch, forks[lo].episode, lo)
    task = load_domain(summary.domain).task(summary.task) if summary.domain and summary.task else None
    forbidden = [a.as_dict() for a in task.forbidden] if task else []
    evidence.append(f"repair at decision {lo} rescues the episode ({forks[lo].episode})")
    if lo + 1 in forks:
        evidence.append(f"repair at decision {lo + 1} does not ({forks[lo + 1].episode}: {forks[lo + 1].outcome.cause})")
    return Attribution(
        episode=episode,
        agent=TOOL_AGENT,
        decision=lo,
        position=decisive.recording_pos,
        wrong=decisive.action,
        right=right,
        category=categorize(decisive.action, right, forbidden),
        forks=len(forks),
        decisions=len(made),
        evidence=evidence,
    )


def _repaired_action(journal: str | Path, fork: str, index: int) -> dict[str, Any] | None:
    with JournalReader(journal) as reader:
        rows = list(reader.episode_rows(fork))
    made = decisions(rows)
    return made[index - 1].action if len(made) >= index else None
