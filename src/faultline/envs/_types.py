"""The values a domain deals in: tool specs, actions, tasks, outcomes and scores."""

from __future__ import annotations

import json
from typing import Any, Final

import msgspec

POLICY_VIOLATION: Final = "policy_violation"
"""A write the tool accepts but the policy forbids (wrong refund target, rule ignored)."""
WRONG_VALUE: Final = "wrong_value"
"""A value taken wrongly from a tool output (a neighbouring id, another variant)."""
WRONG_ENTITY: Final = "wrong_entity"
"""Acting on the wrong order, user or intent (a return where an exchange was meant)."""
EARLY_STOP: Final = "early_stop"
"""Ending the conversation before the task is done."""

ERROR_CATEGORIES: Final = (POLICY_VIOLATION, WRONG_VALUE, WRONG_ENTITY, EARLY_STOP)
"""The four FAMA error categories, in the order the simulator draws them."""


class Budgets(msgspec.Struct, frozen=True, kw_only=True):
    """How long an episode may go on before it fails, in the domain's own terms.

    A *turn* is one message of the user simulator. A *step* is one decision of
    the tool agent: one model call, answered by a tool call or by a message to
    the user (so "30 agent steps" is `agent_steps=30`).
    """

    user_turns: int = 30
    agent_steps: int = 60


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A tool as a model sees it; `writes` says whether it can change the database, `terminal`
    whether a successful call ends the episode."""

    name: str
    description: str
    parameters: dict[str, Any] = {}
    writes: bool = False
    terminal: bool = False

    @classmethod
    def from_openai(cls, tool: dict[str, Any], *, writes: bool, terminal: bool = False) -> ToolSpec:
        """A spec from a tool in the OpenAI `tools` format, as many benchmarks define theirs."""
        function = tool.get("function", tool)
        return cls(
            name=function["name"],
            description=function.get("description", ""),
            parameters=function.get("parameters", {}),
            writes=writes,
            terminal=terminal,
        )

    def openai(self) -> dict[str, Any]:
        """The tool in the OpenAI `tools` format."""
        parameters = self.parameters or {"type": "object", "properties": {}}
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": parameters},
        }


class Action(msgspec.Struct, frozen=True, kw_only=True):
    """One tool call: the name of the tool and its arguments."""

    name: str
    arguments: dict[str, Any] = {}

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": dict(self.arguments)}


class Task(msgspec.Struct, frozen=True, kw_only=True):
    """A user goal with its ground truth.

    `instruction` is what the simulated user wants, in the first person.
    `user_facts` are what the user knows and reveals when asked (key: a short
    phrase such as "email" or "order id"). `actions` are the ground-truth tool
    calls in order, reads included. `outputs` are short strings the agent must
    tell the user. `refusal` marks tasks whose right answer is to refuse;
    `forbidden` lists writes the tools would accept there although the policy
    forbids them (the natural mistake on such a task).
    """

    id: str
    instruction: str
    user_facts: dict[str, str] = {}
    actions: list[Action] = []
    outputs: list[str] = []
    refusal: bool = False
    forbidden: list[Action] = []
    tags: list[str] = []
    extra: dict[str, Any] = {}
    """Whatever else the source benchmark keeps with a task (a user id, an annotator), kept as is."""


class ToolOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What a tool call gave back: an output, or an error that says why it was refused."""

    output: Any = None
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error

    def as_text(self) -> str:
        """The outcome as a model reads it: the output as JSON, or `Error: <reason>`."""
        if self.error:
            return f"Error: {self.error}"
        return json.dumps(self.output, sort_keys=True)


class Score(msgspec.Struct, frozen=True, kw_only=True):
    """How an episode ended: reward 1.0 only if the database matches and every output was told."""

    reward: float
    db_match: bool
    missing_outputs: list[str] = []
