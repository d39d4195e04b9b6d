"""Subject names (docs/design.md) and the validation of the tokens inside them."""

from __future__ import annotations

import hashlib
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


MAX_PARTITIONS = 64
"""The most partitions a system's subjects may have: the stream holds four subjects per partition."""


@dataclass(frozen=True, slots=True)
class Subjects:
    """Builds every subject from one prefix, so two systems can share a server.

    With `partitions` above 1, every subject that names an episode carries the episode's partition
    right after the prefix (`fl.2of4.ep.<episode>.<agent>.<sender>`, `partition_token`), so that a
    shard's consumer is filtered on the server and nats-server delivers each message once, to its shard,
    instead of to every shard. Controls and dead letters name no episode and carry none. One partition
    (the default) is the layout without the token.
    """

    prefix: str = DEFAULT_PREFIX
    partitions: int = 1

    def __post_init__(self) -> None:
        check_token(self.prefix, "subject prefix")
        if not 1 <= self.partitions <= MAX_PARTITIONS:
            raise SubjectError(f"{self.partitions} partitions: a system's subjects have 1 to {MAX_PARTITIONS}")

    def _head(self, episode: str) -> str:
        """The prefix, and the partition of `episode` ("*": any) when there are several."""
        if self.partitions == 1:
            return self.prefix
        if episode == "*":
            return f"{self.prefix}.*"
        return f"{self.prefix}.{partition_token(episode_shard(episode, self.partitions), self.partitions)}"

    def direct(self, episode: str, agent: str, sender: str = "*") -> str:
        return f"{self._head(episode)}.ep.{episode}.{agent}.{sender}"

    def topic(self, episode: str, topic: str, sender: str = "*") -> str:
        return f"{self._head(episode)}.tp.{episode}.{topic}.{sender}"

    def rec(self, episode: str, agent: str) -> str:
        return f"{self._head(episode)}.rec.{episode}.{agent}"

    def event(self, event: str, episode: str, sender: str = "*") -> str:
        return f"{self._head(episode)}.ev.{event}.{episode}.{sender}"

    def of_episode(self, episode: str) -> list[str]:
        """Filters of every subject of `episode`'s messages: direct, topic and recordings in the first, its events in
        the second."""
        head = self._head(episode)
        return [f"{head}.*.{episode}.>", f"{head}.ev.*.{episode}.*"]

    def event_episode(self, subject: str) -> str:
        """The episode an event subject (`event()`) is about."""
        return subject.split(".")[-2]

    def episode_in(self, subject: str) -> str:
        """The episode token of any journaled subject, "" for one that names none (controls, dead letters).

        Read from the subject alone, so a shard can pass over another shard's message without decoding it.
        """
        tokens = subject.split(".", 5)
        skip = 1 if len(tokens) > 1 and tokens[1][:1].isdigit() else 0  # a partition token
        at = _EPISODE_TOKEN.get(tokens[1 + skip]) if len(tokens) > 1 + skip else None
        return tokens[at + skip] if at is not None and len(tokens) > at + skip else ""

    def in_shard(self, subject: str, shard: int, shards: int) -> list[str]:
        """`subject`, made with the episode "*", narrowed to the partitions of shard `shard` of `shards`.

        A partition p belongs to shard p mod `shards` (`episode_shard` agrees, since `shards` divides
        `partitions`). With one partition the subject is left whole: the shard then passes over the others'
        messages itself. One shard takes every partition: the subject is left whole too.
        """
        if self.partitions == 1 or shards == 1:
            return [subject]
        if self.partitions % shards:
            raise SubjectError(f"{shards} shards do not divide the subjects' {self.partitions} partitions")
        head = f"{self.prefix}.*."
        if not subject.startswith(head):
            raise SubjectError(f"{subject!r} names no partition to narrow")
        rest = subject.removeprefix(head)
        tokens = range(shard, self.partitions, shards)
        return [f"{self.prefix}.{partition_token(p, self.partitions)}.{rest}" for p in tokens]

    def shard_events(self, event: str, shard: int, shards: int) -> list[str]:
        """The subjects of `event` in the episodes of shard `shard` of `shards` (`in_shard`): what a worker shard
        hears of the episodes' completions and starts."""
        return self.in_shard(self.event(event, "*"), shard, shards)

    def ctl(self, name: str) -> str:
        return f"{self.prefix}.ctl.{name}"

    def svc(self, service: str) -> str:
        return f"{self.prefix}.svc.{service}"

    def tell(self, service: str, teller: str, what: str) -> str:
        """Where NATS user `teller` tells `what` it did for `service` ("*": any teller). The server lets each user
        tell under its own name alone, so the subject, never the body, says who told."""
        return f"{self.prefix}.svc.{service}.{teller}.{what}"

    @property
    def dlq(self) -> str:
        return f"{self.prefix}.dlq"

    @property
    def journaled(self) -> list[str]:
        """Every subject the stream holds: all but the request/reply services."""
        p = self.prefix
        heads = (
            [p]
            if self.partitions == 1
            else [f"{p}.{partition_token(k, self.partitions)}" for k in range(self.partitions)]
        )
        return [f"{h}.{family}.>" for h in heads for family in _EPISODE_TOKEN] + [f"{p}.ctl.>", f"{p}.dlq"]

    def shard_journaled(self, shard: int, shards: int) -> list[str]:
        """What journal shard `shard` of `shards` reads: its partitions, and the controls and dead letters, whose
        subjects name no episode (each shard decodes those for theirs). Empty (the whole stream, unfiltered) for a
        single journal, or one partition (the shard then passes over the others' messages itself)."""
        if shards == 1 or self.partitions == 1:
            return []
        own = [f"{self.prefix}.{partition_token(p, self.partitions)}.>" for p in range(shard, self.partitions, shards)]
        return [*own, f"{self.prefix}.ctl.>", self.dlq]

    def shard_episodes(self, shard: int, shards: int) -> list[str]:
        """Filters of every subject that names an episode of shard `shard` of `shards`: what trimming the stream of
        the shard's episodes may remove, never a control or a dead letter."""
        if self.partitions == 1:
            return [f"{self.prefix}.{family}.>" for family in _EPISODE_TOKEN]
        tokens = (partition_token(p, self.partitions) for p in range(shard, self.partitions, shards))
        return [f"{self.prefix}.{token}.>" for token in tokens]

    @property
    def stream(self) -> str:
        return f"{self.prefix.upper()}_JOURNAL"

    def for_envelope(self, env: Envelope) -> str:
        """The one subject an envelope travels on, from its body's route."""
        route = _route(env)
        return ".".join((self._head(env.episode) if route[0] in _EPISODE_TOKEN else self.prefix, *route))


_EPISODE_TOKEN = {"ep": 2, "tp": 2, "rec": 2, "ev": 3}
"""Where each subject family carries its episode (`Subjects`), counting the prefix as token 0."""


def partition_token(partition: int, partitions: int) -> str:
    """The subject token of `partition` of `partitions`: it says both, so a receiver checks a message's
    partition against its episode without knowing the system's layout."""
    return f"{partition}of{partitions}"


def episode_shard(episode: str, shards: int) -> int:
    """Which of `shards` shards holds `episode`: workers and journal shards all partition by it.

    Part of the journal set format (`journal._set`): changing it would scatter the episodes of every
    journal set written before, so it never changes. An empty episode (a control) belongs to shard 0.
    """
    return zlib.crc32(episode.encode()) % shards if episode else 0


def episode_cell(episode: str, cells: int) -> int:
    """Which of `cells` cells (independent systems, `[nats] cells`) runs `episode`, and which shard of their journal
    set holds it.

    A hash of its own, independent of `episode_shard`: within a cell, worker shards divide the cell's episodes by
    `episode_shard`, and a cell chosen by that same hash would give some of them none. Part of the format of a set
    written by cells (its `partition`), so it never changes.
    """
    return int.from_bytes(hashlib.blake2b(episode.encode(), digest_size=8).digest(), "big") % cells


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
            and subject == _delivered_on(subject, env)
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
        route = _route(env)
    except SubjectError:
        return "a recipient or a topic", "neither", "$.recipient"
    expected = _delivered_on(subject, env).split(".")[1:]
    got = subject.split(".")[1:]
    shown = f"subject `{_show('.'.join((subject.split('.', 1)[0], *expected)))}` from the envelope's fields"
    fields = _FIELDS[route[0]]
    if len(expected) > len(route):  # the episode's partition comes first
        fields = ("$.episode", *fields)
    elif got and got[0][:1].isdigit():  # a partition token on a subject that takes none, or not read as one
        return shown, f"`{_show(subject)}`", "$.episode" if route[0] in _EPISODE_TOKEN else "$.body.kind"
    for i, (token, path) in enumerate(zip(expected, fields, strict=True)):
        if i >= len(got) or got[i] != token:
            if i == len(expected) - len(route) and len(got) > i and got[i] not in ("ep", "tp"):
                path = "$.body.kind"  # a direct body on an event, control or dead-letter subject
            return shown, f"`{_show(subject)}`", path
    return "no subject tokens past the envelope's fields", f"`{_show(subject)}`", fields[-1]


def _delivered_on(subject: str, env: Envelope) -> str:
    """The subject `env` travels on in the layout `subject` is in: with the partition token it carries
    (checked against the envelope's episode), or none."""
    prefix, _, rest = subject.partition(".")
    route = _route(env)
    token = rest.split(".", 1)[0]
    partitions = _partitions_of(token) if route[0] in _EPISODE_TOKEN else 0
    if partitions:
        return ".".join((prefix, partition_token(episode_shard(env.episode, partitions), partitions), *route))
    return ".".join((prefix, *route))


def _partitions_of(token: str) -> int:
    """The partition count a partition token (`partition_token`) names; 0 for any other token."""
    partition, of, partitions = token.partition("of")
    if of and partition.isdigit() and partitions.isdigit() and 1 < int(partitions) <= MAX_PARTITIONS:
        return int(partitions)
    return 0


def _refuse(expected: str, got: str, path: str) -> NoReturn:
    raise DecodeError(f"envelope refused: Expected {expected}, got {got} - at `{path}`")


def _show(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."
