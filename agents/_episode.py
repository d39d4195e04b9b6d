"""What every agent of an episode is told at the start, and the end-of-episode tally."""

from __future__ import annotations

from typing import Any

import msgspec

from faultline.core import Start


class EpisodeSpec(msgspec.Struct, frozen=True, kw_only=True):
    """The `Start.data` the runner sends to `env`, `tool` and `user`.

    `error_rates` and `repair_from_decision` only steer the offline simulator;
    real models ignore them. `repair_from_decision` (set by attribution forks)
    switches the simulator's mistakes off from that tool-agent decision on; it
    leaves earlier requests unchanged, so a fork's history still replays.
    `helpers` is the roster the tool agent waits for.
    """

    domain: str
    task: str
    seed: int = 0
    trial: int = 0
    max_turns: int = 30
    max_steps: int = 60
    tool_role: str = "tool"
    user_role: str = "user"
    error_rates: dict[str, float] = {}
    repair_from_decision: int | None = None
    helpers: list[str] = []
    memory: dict[str, Any] = {}

    @classmethod
    def from_start(cls, body: Start) -> EpisodeSpec:
        return msgspec.convert(body.data, cls)

    def start(self) -> Start:
        return Start(data=msgspec.to_builtins(self))


TALLY = "tally"
"""Note text: the tool agent's running totals (tokens, the simulator's mistakes) for the environment."""

END = "end"
"""Note text: the user simulator ends the conversation and hands over what it was told."""
