"""Subject names (docs/design.md) and the validation of the tokens inside them."""

from __future__ import annotations

import math
import re
import zlib
from dataclasses import dataclass
from typing import NoReturn

from faultline._errors import DecodeError, SubjectError
from faultline.core._messages import Control, Envelope

_TOKEN_CHARS = "[A-Za-z0-9_-]"
_TOKEN = re.compile(rf"^{_TOKEN_CHARS}{{1,64}}$")

DEFAULT_PREFIX = "fl"

MAX_HOPS = 1_000_000
"""The deepest causation chain a delivered message may claim: far past any real
episode, far inside SQLite's integers. A cycle nobody breaks ends here."""

SHOWN_CHARS = 80
"""How much of a refused value a refusal reason quotes."""


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

    def direct(self, episode: str, agent: str, sender: str = "*") -> str:
        return f"{self.prefix}.ep.{episode}.{agent}.{sender}"

    def topic(self, episode: str, topic: str, sender: str = "*") -> str:
        return f"{self.prefix}.tp.{episode}.{topic}.{sender}"

    def rec(self, episode: str, agent: str) -> str:
        return f"{self.prefix}.rec.{episode}.{agent}"

    def event(self, event: str, episode: str, sender: str = "*") -> str:
        return f"{self.prefix}.ev.{event}.{episode}.{sender}"

    def event_episode(self, subject: str) -> str:
        """The episode an event subject (`event()`) is about."""
        return subject.split(".")[-2]

    def episode_in(self, subject: str) -> str:
        """The episode token of any journaled subject, "" for one that names none (controls, dead letters).

        Read from the subject alone, so a shard can pass over another shard's message without decoding it.
        """
        tokens = subject.split(".", 4)
        at = _EPISODE_TOKEN.get(tokens[1]) if len(tokens) > 1 else None
        return tokens[at] if at is not None and len(tokens) > at else ""

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
        return ".".join((self.prefix, *_route(env)))


_EPISODE_TOKEN = {"ep": 2, "tp": 2, "rec": 2, "ev": 3}
"""Where each subject family carries its episode (`Subjects`)."""


def episode_shard(episode: str, shards: int) -> int:
    """Which of `shards` shards holds `episode`: workers and journal shards all partition by it.

    Part of the journal set format (`journal._set`): changing it would scatter the episodes of every
    journal set written before, so it never changes. An empty episode (a control) belongs to shard 0.
    """
    return zlib.crc32(episode.encode()) % shards if episode else 0


def _route(env: Envelope) -> tuple[str, ...]:
    """The tokens after the prefix of the subject `env` travels on (`_FIELDS` says where each comes from)."""
    body = env.body
    route = type(body).route
    if route == "direct":
        if env.recipient:
            return ("ep", env.episode, env.recipient, env.sender)
        if env.topic:
            return ("tp", env.episode, env.topic, env.sender)
        raise SubjectError(f"message {env.id} has neither a recipient nor a topic")
    if route == "rec":
        return ("rec", env.episode, env.sender)
    if route.startswith("event:"):
        return ("ev", route.removeprefix("event:"), env.episode, env.sender)
    if route == "ctl" and isinstance(body, Control):
        return ("ctl", body.name)
    if route == "dlq":
        return ("dlq",)
    raise SubjectError(f"unknown route {route!r} for {type(body).__name__}")


_FIELDS = {
    "ep": ("$.recipient", "$.episode", "$.recipient", "$.sender"),
    "tp": ("$.topic", "$.episode", "$.topic", "$.sender"),
    "rec": ("$.body.kind", "$.episode", "$.sender"),
    "ev": ("$.body.kind", "$.body.kind", "$.episode", "$.sender"),
    "ctl": ("$.body.kind", "$.body.name"),
    "dlq": ("$.body.kind",),
}
"""For each subject family, the envelope field each token of `_route` comes from."""

_NAMES = re.compile("\0".join(rf"{_TOKEN_CHARS}{{{least},64}}" for least in (1, 1, 0, 0)))
"""Episode, sender, recipient and topic joined by NULs: each a token, the last two possibly empty."""


def validate_envelope(env: Envelope) -> None:
    """Check every name that becomes a subject token, so a bad one fails before publishing."""
    check_token(env.episode, "episode id")
    check_token(env.sender, "agent name")
    if env.recipient:
        check_token(env.recipient, "agent name")
    if env.topic:
        check_token(env.topic, "topic")


def check_delivered(env: Envelope, subject: str) -> Envelope:
    """`env` if it may be handled and journaled as it arrived on `subject`; else DecodeError.

    Decoding proves the shape only. Workers and the journal also rely on names that
    are subject tokens, a finite time, a bounded hop count, and fields that agree with
    the subject (a message cannot name one episode or agent and travel on another's).
    The reason reads like msgspec's: what was expected, what came, and where.
    """
    route = type(env.body).route
    agreed = (subject, env.episode, env.sender, env.recipient, env.topic, route)
    if 0.0 <= env.ts < math.inf and 0 <= env.hops <= MAX_HOPS:  # False for NaN too
        if agreed in _agreed:
            return env
        if (
            _NAMES.fullmatch(f"{env.episode}\0{env.sender}\0{env.recipient}\0{env.topic}")
            and (env.recipient or env.topic or route != "direct")
            and subject == ".".join((subject[: subject.find(".")], *_route(env)))
        ):
            if route != "ctl":  # a control's subject also names the control: not in the key
                if len(_agreed) >= AGREED_KEPT:
                    _agreed.clear()
                _agreed.add(agreed)
            return env
    _refuse(*_problem(env, subject))


AGREED_KEPT = 8_192
"""How many (subject, names, route) that passed `check_delivered` it remembers: the messages of one
episode and agent pair share them, and a name's regex and the subject's rebuild cost more than the lookup."""
_agreed: set[tuple[str, str, str, str, str, str]] = set()


def _problem(env: Envelope, subject: str) -> tuple[str, str, str]:
    """What `check_delivered` expected of a refused envelope, what it got, and where."""
    names = [("$.episode", env.episode), ("$.sender", env.sender)]
    names += [(path, value) for path, value in (("$.recipient", env.recipient), ("$.topic", env.topic)) if value]
    for path, value in names:
        if not _TOKEN.match(value):
            return "a subject token (1-64 letters, digits, '-' or '_')", _show(repr(value)), path
    if not 0.0 <= env.ts < math.inf:
        return "a finite `float` >= 0", _show(repr(env.ts)), "$.ts"
    if not 0 <= env.hops <= MAX_HOPS:
        return f"`int` in 0..{MAX_HOPS}", _show(str(env.hops)), "$.hops"
    try:
        expected = _route(env)
    except SubjectError:
        return "a recipient or a topic", "neither", "$.recipient"
    got = subject.split(".")[1:]
    shown = f"subject `{_show('.'.join((subject.split('.', 1)[0], *expected)))}` from the envelope's fields"
    fields = _FIELDS[expected[0]]
    for i, (token, path) in enumerate(zip(expected, fields, strict=True)):
        if i >= len(got) or got[i] != token:
            if i == 0 and got and got[0] not in ("ep", "tp"):
                path = "$.body.kind"  # a direct body on an event, control or dead-letter subject
            return shown, f"`{_show(subject)}`", path
    return "no subject tokens past the envelope's fields", f"`{_show(subject)}`", fields[-1]


def _refuse(expected: str, got: str, path: str) -> NoReturn:
    raise DecodeError(f"envelope refused: Expected {expected}, got {got} - at `{path}`")


def _show(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."
