"""Subject names (DESIGN.md section 3) and the validation of the tokens inside them."""

from __future__ import annotations

import re
from dataclasses import dataclass

from faultline._errors import SubjectError
from faultline.bus._messages import Control, Envelope

_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

DEFAULT_PREFIX = "fl"


def check_token(value: str, what: str = "name") -> str:
    """Return `value` if it can stand as one subject token, else raise SubjectError."""
    if not isinstance(value, str) or not _TOKEN.match(value):
        raise SubjectError(f"{what} {value!r} is not a valid subject token: use 1-64 letters, digits, '-' or '_'")
    return value


@dataclass(frozen=True, slots=True)
class Subjects:
    """Builds every subject from one prefix, so two systems can share a server."""

    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        check_token(self.prefix, "subject prefix")

    def direct(self, episode: str, agent: str) -> str:
        return f"{self.prefix}.ep.{episode}.{agent}"

    def topic(self, episode: str, topic: str) -> str:
        return f"{self.prefix}.tp.{episode}.{topic}"

    def rec(self, episode: str, agent: str) -> str:
        return f"{self.prefix}.rec.{episode}.{agent}"

    def event(self, event: str, episode: str) -> str:
        return f"{self.prefix}.ev.{event}.{episode}"

    def ctl(self, name: str) -> str:
        return f"{self.prefix}.ctl.{name}"

    def svc(self, service: str) -> str:
        return f"{self.prefix}.svc.{service}"

    @property
    def dlq(self) -> str:
        return f"{self.prefix}.dlq"

    @property
    def journaled(self) -> list[str]:
        """Every subject the stream holds: all but the request/reply services."""
        p = self.prefix
        return [f"{p}.ep.>", f"{p}.tp.>", f"{p}.rec.>", f"{p}.ev.>", f"{p}.ctl.>", f"{p}.dlq"]

    @property
    def stream(self) -> str:
        return f"{self.prefix.upper()}_JOURNAL"

    def for_envelope(self, env: Envelope) -> str:
        """The one subject an envelope travels on, from its body's route."""
        route = type(env.body).route
        if route == "direct":
            if env.recipient:
                return self.direct(env.episode, env.recipient)
            if env.topic:
                return self.topic(env.episode, env.topic)
            raise SubjectError(f"message {env.id} has neither a recipient nor a topic")
        if route == "rec":
            return self.rec(env.episode, env.sender)
        if route.startswith("event:"):
            return self.event(route.removeprefix("event:"), env.episode)
        if route == "ctl" and isinstance(env.body, Control):
            return self.ctl(env.body.name)
        if route == "dlq":
            return self.dlq
        raise SubjectError(f"unknown route {route!r} for {type(env.body).__name__}")


def validate_envelope(env: Envelope) -> None:
    """Check every name that becomes a subject token, so a bad one fails before publishing."""
    check_token(env.episode, "episode id")
    check_token(env.sender, "agent name")
    if env.recipient:
        check_token(env.recipient, "agent name")
    if env.topic:
        check_token(env.topic, "topic")
