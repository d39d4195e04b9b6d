"""`faultline report --reflection JOURNAL`: the structured-reflection reward of a journal's turns.

A turn is a model answer with a `<reflect>`, `<call>` or `<final>` part, or any answer to a request
that asked for the form (the tool agent's reflection after a failed call: `metadata.reflect`); an
answer in another form scores the parts it lacks as missing. Its reference is
the task's gold action at that point, as attribution defines it (`gold_action`): the first
ground-truth call the tool agent has not yet made successfully, as a `<call>`, or past the
last one the gold reply, as a `<final>`. No gold reflection exists, so no reference has one.
The built-in tool agent calls tools natively or as bare JSON, never in this form; the
verifier's answers are in it, and a PASS is read as the proposal it lets through unchanged
(the call, or the message as a `<final>`), a RECHECK as its fix.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
from rich.table import Table

from faultline._errors import AnswerFormatError, DomainError
from faultline.cli._text import table_console
from faultline.core import PASS, EpisodeStarted, Recording, Turn, parse_turn, parse_verdict
from faultline.envs import Domain, Task, known_domain
from faultline.journal import JournalReader, JournalRow
from faultline.replay import Step, gold_action, tool_agents
from faultline.report import SIM_NOTE, ComponentStats, TurnReward, reward_stats, turn_reward

TOOL_AGENT = "tool"
VERIFIER = "verifier"
_FORM = re.compile(r"<(reflect|call|final)>")

HELP = (
    "score a journal's turns in the reflect/call/final form with the structured-reflection reward, against"
    " each task's gold action: the tool agent's reflections (its role's reflection = \"after_error\") and the"
    " verifier's answers (a PASS as the proposal it lets through)"
)


class ScoredTurn(msgspec.Struct, frozen=True, kw_only=True):
    """One turn's reward, where it is in the journal, and the reference it was scored against."""

    episode: str
    agent: str
    pos: int
    model: str
    reference: dict[str, Any]
    reward: TurnReward


class ReflectionSummary(msgspec.Struct, frozen=True, kw_only=True):
    journal: str
    episodes: int
    turns: int
    skipped: int
    """Turns in the form with no reference: a task without gold actions, an unknown domain."""
    backoffs: int
    agents: dict[str, int]
    note: str
    """For answers of the `sim` model, that they follow the ground truth: no result about a model."""


def score_journal(path: Path) -> tuple[list[ScoredTurn], int, int]:
    """Every turn in the form that has a reference, scored; how many episodes were read; how many turns had none."""
    domains: dict[str, Domain | None] = {}
    scored: list[ScoredTurn] = []
    episodes = skipped = 0
    with JournalReader(path) as reader:
        for episode, rows in reader.by_episode(reader.domains()):  # episodes: not the controls and dead letters
            episodes += 1
            task, tools = _task(rows, domains)
            agents = tool_agents(rows, tools) if task is not None else set()
            for row, model, turn in _turns(rows):
                gold = None
                if task is not None:
                    agent = _acting(rows, row)
                    step = Step(index=0, agent=agent, input_pos=row.pos, input_id="", position=row.pos, action={})
                    gold = gold_action(rows, step, task, tools, agents)
                if gold is None:
                    skipped += 1
                    continue
                reference = Turn(final=gold["text"]) if gold["name"] == "reply" else Turn(calls=[gold])
                reward = turn_reward(turn, reference)
                scored.append(
                    ScoredTurn(
                        episode=episode, agent=row.sender, pos=row.pos, model=model, reference=gold, reward=reward
                    )
                )
    return scored, episodes, skipped


def _task(rows: list[JournalRow], domains: dict[str, Domain | None]) -> tuple[Task | None, list[str]]:
    """The episode's task and its domain's tool names; None where the journal names no known domain or task."""
    started = next((b for r in rows if isinstance(b := r.envelope().body, EpisodeStarted)), None)
    if started is None or not started.domain:
        return None, []
    domain = known_domain(started.domain, domains)
    if domain is None:
        return None, []
    try:
        return domain.task(started.task), [t.name for t in domain.tools()]
    except DomainError:
        return None, []


def _acting(rows: list[JournalRow], row: JournalRow) -> str:
    """Whose gold action a turn is measured against: its own agent's when it calls tools, else the tool agent's."""
    return row.sender if any(r.kind == "tool_call" and r.sender == row.sender for r in rows) else TOOL_AGENT


def _turns(rows: list[JournalRow]) -> Iterator[tuple[JournalRow, str, Turn]]:
    """Each model answer in the form, with the model that gave it, read as the turn it amounts to."""
    for row in rows:
        if row.kind != "recording":
            continue
        body = row.envelope().body
        if not isinstance(body, Recording) or body.call != "llm" or body.error:
            continue
        text = body.response.get("content") if isinstance(body.response, dict) else None
        if not isinstance(text, str) or not (_FORM.search(text) or _asked_for_the_form(body.request)):
            continue
        turn = parse_turn(text)
        if row.sender == VERIFIER:
            turn = _verdict_turn(text, turn, body.request)
        yield row, str(body.response.get("model", "")), turn


def _asked_for_the_form(request: Any) -> bool:
    metadata = request.get("metadata") if isinstance(request, dict) else None
    return isinstance(metadata, dict) and metadata.get("reflect") is True


def _verdict_turn(text: str, turn: Turn, request: Any) -> Turn:
    """A verifier's answer as the turn it lets happen: a PASS the proposal, a RECHECK its fix."""
    try:
        verdict = parse_verdict(text)
    except AnswerFormatError:
        return turn  # scored as written: its format is what is wrong
    if verdict.verdict != PASS:
        return turn
    metadata = request.get("metadata") if isinstance(request, dict) else None
    proposal = metadata.get("proposal") if isinstance(metadata, dict) else None
    if not isinstance(proposal, dict):
        return turn
    if isinstance(proposal.get("name"), str):
        call = {"name": proposal["name"], "arguments": proposal.get("arguments") or {}}
        return msgspec.structs.replace(turn, calls=[call])
    if isinstance(proposal.get("reply"), str):
        return msgspec.structs.replace(turn, final=proposal["reply"])
    return turn


def report_reflection(path: Path, as_json: bool) -> int:
    scored, episodes, skipped = score_journal(path)
    stats = reward_stats([s.reward for s in scored])
    summary = ReflectionSummary(
        journal=str(path),
        episodes=episodes,
        turns=len(scored),
        skipped=skipped,
        backoffs=sum(s.reward.backoff for s in scored),
        agents=dict(Counter(s.agent for s in scored)),
        note=SIM_NOTE if any(s.model == "sim" for s in scored) else "",
    )
    if as_json:
        for s in scored:
            row = {"type": "turn", "episode": s.episode, "agent": s.agent, "pos": s.pos, "model": s.model}
            row["reference"] = s.reference
            print(msgspec.json.encode(row | msgspec.structs.asdict(s.reward)).decode())
        for c in stats:
            print(msgspec.json.encode({"type": "component"} | msgspec.structs.asdict(c)).decode())
        print(msgspec.json.encode({"type": "summary"} | msgspec.structs.asdict(summary)).decode())
        return 0
    table_console().print(_table(stats, summary))
    return 0


def _table(stats: list[ComponentStats], summary: ReflectionSummary) -> Table:
    table = Table(title=f"structured-reflection reward of {summary.journal}")
    for column in ("component", "n", "mean", "min", "median", "max"):
        table.add_column(column)
    for c in stats:
        values = (c.mean, c.min, c.median, c.max)
        table.add_row(c.component, str(c.n), *("-" if v is None else f"{v:.3f}" for v in values))
    agents = ", ".join(f"{agent} {n}" for agent, n in sorted(summary.agents.items())) or "none"
    table.caption = (
        f"{summary.turns} turns in {summary.episodes} episodes (by agent: {agents}); {summary.skipped} without a"
        f" reference left out; {summary.backoffs} scored by the similarity backoff. Reference: the task's gold"
        " action (a call, or past the last one the gold reply as a final); reflection has no reference, n 0."
        " total = S * F, S over the parts the reference has, F the format factor."
        + (f" {summary.note}." if summary.note else "")
    )
    return table
