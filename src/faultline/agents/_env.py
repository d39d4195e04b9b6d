"""The environment host: runs tool calls against the episode's own database and scores the end."""

from __future__ import annotations

import sqlite3
from typing import Any

from faultline.agents._episode import RECALL_USER, EpisodeSpec, as_end, as_tally
from faultline.agents.memory import is_preference_task, preference_ratings, task_user
from faultline.core import (
    Agent,
    Context,
    ConversationEnded,
    Envelope,
    EpisodeCompleted,
    Start,
    Tally,
    ToolCall,
    ToolResult,
)
from faultline.envs import Action, Domain, Task, borrow_database, load_domain, return_database


class EnvironmentHost(Agent):
    """Owns one fresh database per episode; completes the episode when the user ends it.

    Tool problems (bad arguments, unknown tools, refused actions) come back to the
    caller as error results; they never fail the episode by themselves. After a
    terminal tool no tool runs, so the state scored is the state it left.
    """

    name = "env"
    environment = True
    completes = True

    def __init__(self) -> None:
        self.spec: EpisodeSpec | None = None
        self.domain: Domain | None = None
        self.task: Task | None = None
        self.db: sqlite3.Connection | None = None
        self.started_at = 0.0
        self.tally = Tally()
        self.calls = 0
        self.called: list[str] = []
        """The tools called, in order, for the user's ratings on preference tasks."""
        self.ended_by = ""

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        body = msg.body
        if isinstance(body, Start):
            self.spec = EpisodeSpec.from_start(body)
            self.domain = load_domain(self.spec.domain)
            self.task = self.domain.task(self.spec.task)
            self.db = borrow_database(self.domain)
            self.started_at = await ctx.now()
        elif isinstance(body, ToolCall):
            ctx.send(msg.sender, self._execute(body))
        elif (tally := as_tally(body)) is not None:
            self.tally = tally
        elif (end := as_end(body)) is not None:
            await self._complete(ctx, end)

    def _execute(self, call: ToolCall) -> ToolResult:
        if self.db is None or self.domain is None or self.ended_by:
            return ToolResult(call_id=call.call_id, name=call.name, error="the episode is over; no tool runs now")
        self.calls += 1
        self.called.append(call.name)
        if call.arguments_error:
            return ToolResult(
                call_id=call.call_id, name=call.name, error=f"arguments are not valid JSON: {call.arguments_error}"
            )
        if call.injected_error:
            return ToolResult(call_id=call.call_id, name=call.name, error=call.injected_error)
        outcome = self.domain.call(self.db, Action(name=call.name, arguments=call.arguments))
        if self.domain.is_terminal(call.name) and (outcome.ok or self.domain.terminal_on_error):
            self.ended_by = call.name
        return ToolResult(
            call_id=call.call_id, name=call.name, output=outcome.output, error=outcome.error, ends=bool(self.ended_by)
        )

    async def _complete(self, ctx: Context, end: ConversationEnded) -> None:
        if self.db is None or self.domain is None or self.task is None or self.spec is None:
            return
        result = self.domain.score(self.task, self.db, end.told)
        return_database(self.domain, self.db)
        self.db = None
        reward = 0.0 if end.failed else result.reward
        cause = end.cause
        if not cause and reward < 1.0:
            cause = (
                "final database differs from the ground truth"
                if not result.db_match
                else ("not told to the user: " + "; ".join(result.missing_outputs))
            )
        ctx.emit(
            EpisodeCompleted(
                outcome="success" if reward >= 1.0 else "failure",
                reward=reward,
                cause=cause,
                turns=end.turns,
                tokens=end.tokens + self.tally.tokens,
                latency_s=max(0.0, await ctx.now() - self.started_at),
                details={
                    "domain": self.spec.domain,
                    "task": self.spec.task,
                    "trial": self.spec.trial,
                    "db_match": result.db_match,
                    "missing_outputs": result.missing_outputs,
                    "tool_calls": self.calls,
                    "mistakes": list(self.tally.mistakes),
                }
                | self._user_details(),
            )
        )

    def _user_details(self) -> dict[str, Any]:
        """Who the user was and, on a preference task, how they rated each tool called (for the memory)."""
        assert self.spec is not None and self.task is not None
        if self.spec.protocol < RECALL_USER:
            return {}
        details: dict[str, Any] = {"user": task_user(self.task)}
        if is_preference_task(self.task):
            details |= {"preference": True, "tool_ratings": preference_ratings(self.task, self.called)}
        return details
