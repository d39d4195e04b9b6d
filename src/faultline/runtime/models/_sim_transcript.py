"""What the simulator reads off a conversation: the agent's progress through the ground truth,
and its size in words (the simulated usage).

Shared by the simulated agent and user (`_sim.py`) and the helpers' stand-ins (`_sim_helpers.py`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Final

from faultline.core import ChatMessage

MAX_RETRIES: Final = 2
"""How often the simulated agent retries a tool call that failed before moving on."""
_STATEMENT_PARTS = re.compile(r", my | and my ")
"""What separates the facts of one statement of the user's (the simulated user's `_reveal` writes them so)."""


@dataclass
class AgentView:
    """What the agent's transcript says about progress through the ground truth."""

    step: int = 0
    calls: int = 0
    user_texts: list[str] = field(default_factory=list)
    last_text: str | None = None
    answered: bool = False

    @classmethod
    def of(cls, messages: list[ChatMessage]) -> AgentView:
        view = cls()
        results = {m.tool_call_id: m.content for m in messages if m.role == "tool"}
        failures = 0
        for message in messages:
            if message.role == "user":
                view.user_texts.append(message.content)
                view.answered = True
            elif message.role == "assistant":
                view.answered = False
                view.last_text = None if message.tool_calls else message.content
                for call in message.tool_calls:
                    view.calls += 1
                    if call.id not in results:
                        continue
                    failures = failures + 1 if _is_error(results[call.id]) else 0
                    if failures == 0 or failures > MAX_RETRIES:
                        view.step += 1
                        failures = 0
        return view

    def replied_to(self, text: str) -> bool:
        """Whether the agent's last message was `text` and the user has answered it."""
        return self.answered and self.last_text == text

    def revealed(self, value: str) -> bool:
        return any(value.casefold() in said.casefold() for said in self.user_texts)

    def stated(self, facts: dict[str, str]) -> dict[str, str]:
        """The facts the user's latest statements give, by key, as the agent read them: a turn
        of the form `My KEY is VALUE, my KEY is VALUE and my KEY is VALUE.` over keys of `facts`,
        each VALUE one word (no fact value has a space)."""
        said: dict[str, str] = {}
        keys = {key.casefold(): key for key in facts}
        for text in self.user_texts:
            if not (text.startswith("My ") and text.endswith(".")):
                continue
            parts = [p.partition(" is ") for p in _STATEMENT_PARTS.split(text[3:-1])]
            if all(sep and key.casefold() in keys and value and not value.split()[1:] for key, sep, value in parts):
                said |= {keys[key.casefold()]: value for key, _, value in parts}
        return said


def _is_error(content: str) -> bool:
    if content.lstrip().lower().startswith("error"):
        return True
    try:
        decoded = json.loads(content)
    except ValueError:
        return False
    return isinstance(decoded, dict) and bool(decoded.get("error"))


def word_count(text: str) -> int:
    return len(text.split())


def prompt_word_count(messages: list[ChatMessage]) -> int:
    return sum(word_count(m.content) + sum(word_count(c.raw_arguments or json.dumps(c.arguments)) for c in m.tool_calls)
               for m in messages)  # fmt: skip
