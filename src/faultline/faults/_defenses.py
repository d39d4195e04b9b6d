"""Defenses: inbound checks that drop a message before an agent's handler sees it.

Each defense is switched on per agent and keeps its state per (episode, agent).
A decision depends only on the sequence of messages the agent received in the
episode (their ids, senders, bodies, hops), never on a clock or a process, so
replay reaches the same decisions from the journal and a worker that restarts
reaches them again while it rebuilds its agents. Every drop is journaled as
`DefenseFired`, naming the defense, the agent, the message and the settings
the defense ran with (replay rebuilds it from them).

    scope   an agent that has not received a `Start` in an episode takes no
            direct message there: it is not one of the episode's participants
    cycle   a message past the hop limit, or a direct message from the agent to
            itself (a message echoed back to its sender; a timer it set is not one)
    dedup   a message id the agent already received, or the same body (by CRC-32
            of its encoding) from the same sender in answer to the same message
    rate    more than `rate_limit` messages from one sender within one window of
            `rate_window_hops` causation depths

They run in that order (`DEFENSE_ORDER`) whatever order they are switched on in.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from faultline._errors import ConfigError
from faultline.core import (
    ALL_AGENTS,
    DefenseFired,
    Envelope,
    Inbound,
    Interceptor,
    Start,
    TimerFired,
    derive_id,
    encode,
)

DEFENSE_ORDER = ("scope", "cycle", "dedup", "rate")


@dataclass(frozen=True, slots=True)
class DefenseSettings:
    """The parameters of every defense, with defaults that leave fault-free episodes alone."""

    max_hops: int = 256
    """Cycle breaker: a message deeper than this in its causation chain is dropped."""
    echo: bool = True
    """Cycle breaker: drop a direct message an agent gets from itself."""
    rate_limit: int = 4
    """Rate limit: most messages from one sender per window of hops."""
    rate_window_hops: int = 4


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why a defense drops a message. `redelivery`: the agent already received this very
    message (same id); the journal holds it once, so replay has no second copy to drop."""

    reason: str
    redelivery: bool = False


class Defense:
    """One defense for one agent; `check` returns a Rejection, or None to pass the message."""

    name: ClassVar[str]

    def __init__(self, settings: DefenseSettings) -> None:
        self.settings = settings

    def recorded(self) -> dict[str, Any]:
        """The settings this defense depends on, as journaled with each drop."""
        return {}

    def check(self, env: Envelope, agent: str) -> Rejection | None:
        raise NotImplementedError

    def forget(self, episode: str) -> None:
        """Drop the state kept for `episode` (it completed)."""


class ScopeFilter(Defense):
    name = "scope"

    def __init__(self, settings: DefenseSettings) -> None:
        super().__init__(settings)
        self._joined: set[str] = set()

    def check(self, env: Envelope, agent: str) -> Rejection | None:
        if isinstance(env.body, Start):
            self._joined.add(env.episode)
            return None
        if env.recipient and env.episode not in self._joined:
            return Rejection(f"{agent} takes no part in episode {env.episode} (it received no start there)")
        return None

    def forget(self, episode: str) -> None:
        self._joined.discard(episode)


class CycleBreaker(Defense):
    name = "cycle"

    def recorded(self) -> dict[str, Any]:
        return {"max_hops": self.settings.max_hops, "echo": self.settings.echo}

    def check(self, env: Envelope, agent: str) -> Rejection | None:
        if env.hops > self.settings.max_hops:
            return Rejection(f"hop {env.hops} is past the limit of {self.settings.max_hops}")
        if self.settings.echo and env.recipient and env.sender == agent and not isinstance(env.body, TimerFired):
            return Rejection(f"{agent} sent this message and it came back to it")
        return None


class Dedup(Defense):
    name = "dedup"

    def __init__(self, settings: DefenseSettings) -> None:
        super().__init__(settings)
        self._ids: dict[str, set[str]] = {}
        self._bodies: dict[str, set[tuple[str, str, int]]] = {}

    def check(self, env: Envelope, agent: str) -> Rejection | None:
        ids = self._ids.setdefault(env.episode, set())
        if env.id in ids:
            return Rejection(f"id {env.id} was delivered before", redelivery=True)
        ids.add(env.id)
        key = (env.sender, env.causation, zlib.crc32(encode(env.body)))
        bodies = self._bodies.setdefault(env.episode, set())
        if key in bodies:
            answer = env.causation or "nothing"
            return Rejection(f"the same {env.kind} from {env.sender} in answer to {answer} was delivered before")
        bodies.add(key)
        return None

    def forget(self, episode: str) -> None:
        self._ids.pop(episode, None)
        self._bodies.pop(episode, None)


class RateLimit(Defense):
    name = "rate"

    def __init__(self, settings: DefenseSettings) -> None:
        super().__init__(settings)
        self._counts: dict[str, dict[tuple[str, int], int]] = {}

    def recorded(self) -> dict[str, Any]:
        return {"rate_limit": self.settings.rate_limit, "rate_window_hops": self.settings.rate_window_hops}

    def check(self, env: Envelope, agent: str) -> Rejection | None:
        window = env.hops // self.settings.rate_window_hops
        counts = self._counts.setdefault(env.episode, {})
        n = counts.get((env.sender, window), 0) + 1
        counts[(env.sender, window)] = n
        if n > self.settings.rate_limit:
            first = window * self.settings.rate_window_hops
            last = first + self.settings.rate_window_hops - 1
            return Rejection(
                f"{env.sender} sent more than {self.settings.rate_limit} messages within hops {first}-{last}"
            )
        return None

    def forget(self, episode: str) -> None:
        self._counts.pop(episode, None)


DEFENSES: dict[str, type[Defense]] = {cls.name: cls for cls in (ScopeFilter, CycleBreaker, Dedup, RateLimit)}


def check_defenses(names: Iterable[str]) -> tuple[str, ...]:
    """The names in `DEFENSE_ORDER`, or ConfigError naming the unknown one."""
    wanted = set(names)
    unknown = sorted(wanted - DEFENSES.keys())
    if unknown:
        raise ConfigError(f"unknown defense {unknown[0]!r} (known: {', '.join(DEFENSE_ORDER)})")
    return tuple(n for n in DEFENSE_ORDER if n in wanted)


def build_defenses(names: Iterable[str], settings: DefenseSettings) -> list[Defense]:
    return [DEFENSES[n](settings) for n in check_defenses(names)]


def settings_from(recorded: Mapping[str, Any]) -> DefenseSettings:
    """Defense settings from what a `DefenseFired` event recorded (defaults for the rest)."""
    known = {k: v for k, v in recorded.items() if k in DefenseSettings.__dataclass_fields__}
    return DefenseSettings(**known)


def fired_event(defense: Defense, env: Envelope, agent: str, drop: Rejection) -> Envelope:
    return Envelope(
        id=derive_id(f"{env.id}/{agent}", 0, "defense"),
        episode=env.episode,
        sender=agent,
        causation=env.id,
        hops=env.hops + 1,
        ts=time.time(),
        body=DefenseFired(
            defense=defense.name,
            agent=agent,
            message_id=env.id,
            reason=drop.reason,
            settings=defense.recorded(),
            redelivery=drop.redelivery,
        ),
    )


def screen(defenses: Sequence[Defense], env: Envelope, agent: str) -> tuple[Defense, Rejection] | None:
    """The first defense that drops `env` for `agent`, and why; None if all pass it."""
    for defense in defenses:
        drop = defense.check(env, agent)
        if drop is not None:
            return defense, drop
    return None


class DefenseInterceptor(Interceptor):
    """Runs each agent's defenses on its inbound messages; `per_agent` maps agent (or "*") to names."""

    def __init__(self, per_agent: Mapping[str, Iterable[str]], settings: DefenseSettings | None = None) -> None:
        self.settings = settings or DefenseSettings()
        self._names = {agent: check_defenses(names) for agent, names in per_agent.items()}
        self._defenses: dict[str, list[Defense]] = {}

    def names_for(self, agent: str) -> tuple[str, ...]:
        return self._names.get(agent, self._names.get(ALL_AGENTS, ()))

    async def inbound(self, message: Inbound) -> Sequence[Envelope]:
        defenses = self._defenses.get(message.agent)
        if defenses is None:
            defenses = self._defenses[message.agent] = build_defenses(self.names_for(message.agent), self.settings)
        env, agent = message.envelope, message.agent
        dropped = screen(defenses, env, agent)
        if dropped is None:
            return (env,)
        defense, drop = dropped
        message.events.append(fired_event(defense, env, agent, drop))
        return ()

    def forget(self, episode: str) -> None:
        for defenses in self._defenses.values():
            for defense in defenses:
                defense.forget(episode)
