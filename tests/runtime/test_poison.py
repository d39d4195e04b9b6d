"""No message takes the system down: poison published by a raw NATS client on a live system.

Each message ends dead-lettered and journaled as such, every process keeps running
(same pid, no restart), and the next episode passes. The single poison messages go to one
system shared by their cases (per test process), each between two episodes of its own.
"""

from __future__ import annotations

import math
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import pytest
import pytest_asyncio

from faultline._errors import SubjectError
from faultline.api import replay
from faultline.core import (
    OPERATOR,
    RUNNER,
    Control,
    DeadLetter,
    Envelope,
    EpisodeCompleted,
    EpisodeStarted,
    FaultApplied,
    MessageBody,
    Recording,
    Subjects,
    ToolCall,
    UserTurn,
    body_kind,
    decode_envelope,
    digest,
    encode,
)
from faultline.core._subjects import MAX_HOPS
from faultline.journal import JournalReader, verify
from faultline.runtime import Supervisor, worker_identity
from tests.runtime.live import (
    episode_of,
    held,
    journal_everything,
    live_system,
    processes,
    raw_client,
    run_episode,
)
from tests.wire import hpub, pub, publish_stored, send

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

MAIN = worker_identity("main")
"""The credential of the worker group that runs the episodes' agents."""

CALL = ToolCall(call_id="c1", name="get_user_details", arguments={"user_id": "mia_li_3668"})


def tool_call(episode: str, **fields: object) -> bytes:
    values: dict[str, object] = {"id": "poison", "episode": episode, "sender": "tool", "recipient": "env", "body": CALL}
    values.update(fields)
    return encode(Envelope(**values))  # type: ignore[arg-type]


Poison = Callable[[str, int], tuple[str, bytes, str]]
"""(episode, NATS max payload) -> (subject, bytes, how the dead letter's reason ends or begins)."""

POISON: dict[str, Poison] = {
    "sender-is-not-a-name": lambda e, _: (f"fl.ep.{e}.env.tool", tool_call(e, sender="evil.sender"), "at `$.sender`"),
    "ts-is-nan": lambda e, _: (f"fl.ep.{e}.env.tool", tool_call(e, ts=math.nan), "at `$.ts`"),
    "hops-is-2**63": lambda e, _: (f"fl.ep.{e}.env.tool", tool_call(e, hops=2**63), "at `$.hops`"),
    "a-megabyte-of-garbage": lambda e, limit: (f"fl.ep.{e}.env.tool", b"\xc1" * (limit - 64), "not msgpack"),
    "episode-disagrees-with-subject": lambda e, _: (f"fl.ep.{e}.env.tool", tool_call("other"), "at `$.episode`"),
    "recipient-disagrees-with-subject": lambda e, _: (
        f"fl.ep.{e}.env.tool",
        tool_call(e, recipient="user"),
        "at `$.recipient`",
    ),
    "kind-disagrees-with-subject": lambda e, _: (
        f"fl.ep.{e}.env.tool",
        tool_call(e, recipient="", body=EpisodeCompleted(outcome="success")),
        "at `$.body.kind`",
    ),
    "sender-disagrees-with-subject": lambda e, _: (f"fl.ep.{e}.env.user", tool_call(e), "at `$.sender`"),
    "a-runners-completion-of-garbage": lambda e, _: (
        Subjects().event("completed", e, RUNNER),
        b"\xc1" * 512,
        "not msgpack",
    ),
    "a-completion-of-nan-reward": lambda e, _: (
        Subjects().event("completed", e, "env"),
        tool_call(e, sender="env", recipient="", body=EpisodeCompleted(outcome="success", reward=math.nan)),
        "at `$.body.reward`",
    ),
    "a-timer-of-negative-wait": lambda e, _: (
        Subjects().event("timer", e, "env"),
        msgspec.msgpack.encode(
            {"id": "poison", "episode": e, "sender": "env", "body": {"kind": "timer", "after_s": -5}}
        ),
        "at `$.body`",
    ),
    "a-start-of-helpers-there-are-not": lambda e, _: (
        Subjects().event("started", e, RUNNER),
        msgspec.msgpack.encode(
            {"id": "poison", "episode": e, "sender": RUNNER, "body": {"kind": "episode_started", "roster": ["bogus"]}}
        ),
        "at `$.body`",
    ),
    "an-id-of-half-a-megabyte": lambda e, _: (f"fl.ep.{e}.env.tool", tool_call(e, id="x" * 500_000), "at `$.id`"),
    "a-dead-letter-of-most-of-a-megabyte": lambda e, _: (
        "fl.dlq",
        encode(
            Envelope(
                id="poison",
                episode="dlq",
                sender="bus",
                body=DeadLetter(reason="r" * 300_000, subject="fl.ep", data=b"d" * 600_000),
            )
        ),
        "at `$.body.reason`",
    ),
    "a-recording-of-a-negative-index": lambda e, _: (
        f"fl.rec.{e}.env",
        tool_call(
            e, sender="env", recipient="", body=Recording(call="now", index=-3, request_digest="d", response=1.0)
        ),
        "at `$.body.index`",
    ),
    "recorder-disagrees-with-subject": lambda e, _: (
        f"fl.rec.{e}.user",
        tool_call(e, recipient="", body=Recording(call="now", index=0, request_digest="d", response=1.0)),
        "at `$.sender`",
    ),
}


class Running(NamedTuple):
    supervisor: Supervisor
    journal: Path


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def running(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Running]:
    """The live system the single poison messages are sent to."""
    folder = tmp_path_factory.mktemp("poison")
    journal = folder / "journal.sqlite"
    async with held(live_system(folder, journal)) as supervisor:
        yield Running(supervisor, journal)
    assert verify(journal).ok  # and the journal the stopped system leaves holds
    assert replay(journal).identical  # and its episodes, all run between poison messages, replay as they ran


@pytest.mark.parametrize("poison", POISON)
async def test_a_poison_message_is_dead_lettered_and_the_system_runs_on(poison: str, running: Running) -> None:
    supervisor, journal = running
    bus = supervisor.bus
    assert bus is not None
    case = list(POISON).index(poison)
    assert (await run_episode(bus, f"before{case}")).outcome == "success"
    before = processes(supervisor)
    raw = await raw_client(supervisor)
    try:
        subject, data, reason = POISON[poison](episode_of(f"before{case}"), raw.max_payload)
        seq = (await raw.jetstream().publish(subject, data)).seq
    finally:
        await raw.close()
    assert (await run_episode(bus, f"after{case}")).outcome == "success"
    await journal_everything(bus)
    assert processes(supervisor) == before
    with JournalReader(journal) as reader:
        rows = list(reader.rows())
    assert seq not in {r.stream_seq for r in rows}
    letters = [body for r in rows if isinstance(body := r.decoded_body(), DeadLetter) and body.stream_seq == seq]
    # One from each process that refused it: the worker that would have handled it, the journal.
    assert 1 <= len(letters) <= 2, letters
    assert any(letter.reason.endswith(reason) or letter.reason.startswith(reason) for letter in letters), letters
    for letter in letters:
        assert (letter.subject, letter.size, letter.digest) == (subject, len(data), digest(data))
        assert letter.data == data[: len(letter.data)] and len(letter.data) <= 4096
    assert verify(journal).ok


def _sent(episode: str, sender: str, body: MessageBody, **fields: Any) -> bytes:
    return encode(Envelope(id=f"forged-{body_kind(body)}", episode=episode, sender=sender, body=body, **fields))


DEEP = msgspec.Raw(b"\x91" * 900 + b"\x01")
"""A list in a list ... 900 deep: inside what the decoder takes, past what Python's own recursion would."""

FORGED: dict[str, Callable[[str], tuple[str, str, bytes]]] = {
    "a-fault-event-that-names-no-message": lambda e: (
        MAIN,
        Subjects().event("fault", e, "tool"),
        _sent(e, "tool", FaultApplied(rule_id="r", fault="message_storm", original={"id": "x"}, results=[{}])),
    ),
    "a-fault-on-a-model-call-of-a-garbled-request": lambda e: (
        MAIN,
        Subjects().event("fault", e, "tool"),
        _sent(e, "tool", FaultApplied(rule_id="r", fault="memory_loss", original={"body": "x"}, model_call=0)),
    ),
    "a-call-of-arguments-nested-deep-and-not-numbers": lambda e: (
        MAIN,
        Subjects().direct(e, "env", "tool"),
        _sent(
            e,
            "tool",
            ToolCall(call_id="c", name="x\0", arguments={"a": DEEP, "b": [math.nan, -math.inf]}),
            recipient="env",
        ),
    ),
    "an-input-caused-by-another-episodes-message": lambda e: (
        MAIN,
        Subjects().direct(e, "tool", "user"),
        _sent(e, "user", UserTurn(text="hi"), recipient="tool", causation=episode_of("before0"), hops=5),
    ),
    "a-second-start-of-an-episode-that-ran": lambda e: (
        OPERATOR,
        Subjects().event("started", e, RUNNER),
        _sent(e, RUNNER, EpisodeStarted(domain="retail", task="0", settings={"x": math.nan})),
    ),
}
"""Well-formed messages no process of the system would send, from credentials that may send them (episode -> the
credential, the subject, the bytes): journaled as they came, and every episode replays as it ran."""


@pytest.mark.parametrize("case", FORGED)
async def test_a_well_formed_forgery_is_journaled_and_every_episode_replays_as_it_ran(
    case: str, running: Running
) -> None:
    supervisor, journal = running
    bus = supervisor.bus
    assert bus is not None
    run = f"forged{list(FORGED).index(case)}"
    assert (await run_episode(bus, run)).outcome == "success"
    before = processes(supervisor)
    identity, subject, data = FORGED[case](episode_of(run))
    raw = await raw_client(supervisor, identity)
    try:
        seq = (await raw.jetstream().publish(subject, data)).seq
    finally:
        await raw.close()
    assert (await run_episode(bus, f"{run}-after")).outcome == "success"
    await journal_everything(bus)
    assert processes(supervisor) == before
    with JournalReader(journal) as reader:
        assert seq in {r.stream_seq for r in reader.rows()}
    assert replay(journal).identical


UNREADABLE = "\N{REPLACEMENT CHARACTER}"
WIRE_INBOX = b"_INBOX.worker-main.wire"


def _input(token: bytes, headers: bytes = b"") -> Callable[[str], tuple[bytes, str]]:
    """An input to `env` on its episode's subject with `token` after the episode id, and the subject as read."""

    def write(episode: str) -> tuple[bytes, str]:
        subject = b"fl.ep.%s%s.env.tool" % (episode.encode(), token)
        operation = hpub(subject, headers, b"\xc1", WIRE_INBOX) if headers else pub(subject, b"\xc1", WIRE_INBOX)
        return operation, f"fl.ep.{episode}{UNREADABLE if token else ''}.env.tool"

    return write


WIRE: dict[str, Callable[[str], tuple[bytes, str]]] = {
    "an-input-on-a-subject-that-is-not-utf-8": _input(b"\xff"),
    "an-input-on-a-subject-with-a-vertical-tab": _input(b"\x0b"),
    "an-input-with-headers-without-their-first-line": _input(b"", b"\r\n\r\n"),
    "a-question-to-the-journal-with-a-reply-that-is-not-utf-8": lambda _: (pub(b"fl.svc.journal", b"{}", b"\xff"), ""),
    "a-question-to-the-journal-with-a-status-that-is-not-utf-8": lambda _: (
        hpub(b"fl.svc.journal", b"NATS/1.0 \xff\xff\r\n\r\n", b"{}"),
        "",
    ),
}
"""Bytes no NATS client library sends, from a worker's credential (episode -> what to send, and the subject its
dead letters show, "" for a question, which nothing stores): each stopped the NATS client's reading."""


@pytest.mark.parametrize("case", WIRE)
async def test_a_message_the_nats_client_could_not_read_is_dead_lettered_and_the_system_runs_on(
    case: str, running: Running
) -> None:
    supervisor, journal = running
    bus = supervisor.bus
    assert bus is not None and supervisor.access is not None
    run = f"wire{list(WIRE).index(case)}"
    assert (await run_episode(bus, run)).outcome == "success"
    before = processes(supervisor)
    operation, shown = WIRE[case](episode_of(run))
    credential = supervisor.access.credential(MAIN)
    if shown:
        seq = await publish_stored(supervisor.url, operation, WIRE_INBOX, credential)
    else:
        await send(supervisor.url, operation, credential)
    assert (await run_episode(bus, f"{run}-after")).outcome == "success"
    await journal_everything(bus)
    assert processes(supervisor) == before
    if shown:
        with JournalReader(journal) as reader:
            letters = [
                b for r in reader.rows() if isinstance(b := r.decoded_body(), DeadLetter) and b.stream_seq == seq
            ]
        # One from each process that refused it: the worker that would have handled it, the journal.
        assert len(letters) == 2, letters
        assert all((letter.subject, letter.data) == (shown, b"\xc1") for letter in letters), letters


async def test_a_dead_letter_whose_id_was_taken_first_is_journaled_all_the_same(tmp_path: Path) -> None:
    """A credential that may publish dead letters took the ids of the letters of its next messages, to have its
    poison leave no trace: the stream knows each identity's letters by ids keyed by its credential, so the real
    letter is journaled all the same, with the refused bytes' digest. (A system of its own: the ids it takes stay
    taken for the stream's duplicate window.)"""
    journal = tmp_path / "journal.sqlite"
    squats = 10  # the poison lands right after them, unless something else comes first: then a little later
    async with held(live_system(tmp_path, journal)) as supervisor:
        bus = supervisor.bus
        assert bus is not None
        raw = await raw_client(supervisor)
        try:
            js = raw.jetstream()
            last = (await bus.stream_state()).last_seq
            for i in range(squats):
                forged = Envelope(
                    id=f"squat{i}", episode="dlq", sender="bus", body=DeadLetter(reason="-", subject="-", data=b"")
                )
                await js.publish("fl.dlq", encode(forged), headers={"Nats-Msg-Id": f"dlq-{last + squats + 1 + i}"})
            poison = b"\xc1 poison"
            seq = (await js.publish(f"fl.ep.{episode_of('squatted')}.env.tool", poison)).seq
            # and the id of its letter, right after it, before the processes that refuse it have sent theirs
            harmless = DeadLetter(reason="duplicate delivery (harmless)", subject="-", data=b"{}", stream_seq=seq)
            forged = Envelope(id=f"dlq-{seq}", episode="dlq", sender="bus", body=harmless)
            await js.publish("fl.dlq", encode(forged), headers={"Nats-Msg-Id": f"dlq-{seq}"})
        finally:
            await raw.close()
        assert last + squats < seq <= last + 2 * squats
        await journal_everything(bus)
    with JournalReader(journal) as reader:
        letters = [(r.id, b) for r in reader.rows() if isinstance(b := r.decoded_body(), DeadLetter)]
    real = [(i, b) for i, b in letters if b.stream_seq == seq and b.digest == digest(poison)]
    # One from each process that refused the bytes (the worker that would have handled them, the journal).
    assert 1 <= len(real) <= 2 and all(i == f"dlq-{seq}" and b.data == poison for i, b in real), letters


FUZZ_MESSAGES = 300
FUZZ_SEED = 20261123
NAMES = ["env", "tool", "user", "runner", "fz-1", "", "evil.sender", "a b", "*", ">", "x" * 65]
HOPS = [0, 1, MAX_HOPS, MAX_HOPS + 1, -1, 2**63, 2**64 - 1, -(2**63)]
TIMES = [0.0, 1.7e9, math.nan, math.inf, -math.inf, -1.0, 1e308]


def fuzz(rng: random.Random, bases: list[tuple[str, bytes]], limit: int) -> list[tuple[str, bytes]]:
    """Random and mutated messages on journaled subjects: fields, bytes, shapes, garbage and controls."""
    episode = decode_envelope(bases[0][1]).episode
    subjects = Subjects()
    messages = []
    for i in range(FUZZ_MESSAGES):
        subject, data = rng.choice(bases)
        env = decode_envelope(data)
        ep = rng.choice([episode, f"fz-{i % 7}", "a.b"])
        anywhere = rng.choice(
            [
                subjects.direct(ep, rng.choice(["env", "tool", "user", "nobody"])),
                subjects.topic(ep, "chat"),
                subjects.rec(ep, rng.choice(["env", "tool", "user"])),
                subjects.event(rng.choice(["started", "completed", "error", "fault", "defense"]), ep),
                subjects.ctl(rng.choice(["faults", "helpers", "x"])),
                subjects.dlq,
            ]
        )
        kind = rng.choice(["field", "field", "field", "body", "bytes", "shape", "garbage", "control"])
        if kind == "field":
            name, value = rng.choice(
                [
                    ("episode", rng.choice([episode, *NAMES])),
                    ("sender", rng.choice(NAMES)),
                    ("recipient", rng.choice(NAMES)),
                    ("topic", rng.choice(NAMES)),
                    ("hops", rng.choice(HOPS)),
                    ("ts", rng.choice(TIMES)),
                    ("id", rng.choice(["", "x" * 300, f"fz{i}"])),
                    ("causation", rng.choice(["", env.id, "\0"])),
                ]
            )
            env = msgspec.structs.replace(env, **{name: value})
            data = encode(env)
            subject = rng.choice([subject, anywhere, _home(subjects, env) or subject])
        elif kind == "body":
            env = msgspec.structs.replace(env, body=decode_envelope(rng.choice(bases)[1]).body)
            data = encode(env)
            subject = rng.choice([subject, _home(subjects, env) or subject])
        elif kind == "bytes":
            mutable = bytearray(data)
            for _ in range(rng.randint(1, 5)):
                mutable[rng.randrange(len(mutable))] = rng.randrange(256)
            data = bytes(mutable[: rng.randint(1, len(mutable))] if rng.random() < 0.3 else mutable)
        elif kind == "shape":
            shape = {key: rng.choice([1, -1, "", "e", [], {}, None, 2.5, True]) for key in msgspec.structs.asdict(env)}
            shape["body"] = rng.choice([{"kind": env.kind}, {"kind": "nope"}, [], msgspec.to_builtins(env.body)])
            data, subject = msgspec.msgpack.encode(shape), anywhere
        elif kind == "garbage":
            size = limit - 64 if i % 150 == 0 else rng.randint(1, 4096)
            data, subject = rng.randbytes(size), anywhere
        else:
            op = rng.choice(["add", "remove", "clear", "nope"])
            rule = {"id": rng.choice(["r1", "", "a b"]), "fault": rng.choice(["no-such-fault", 7]), "probability": 2}
            body = Control(name="faults", data={"op": op, "rule": rule, "id": rule["id"]})
            env = Envelope(id=f"fz{i}", episode="ops", sender=rng.choice(["operator", "evil.sender"]), body=body)
            data, subject = encode(env), subjects.ctl("faults")
        messages.append((subject, data))
    return messages


def _home(subjects: Subjects, env: Envelope) -> str | None:
    """The subject the envelope's fields name, if they name one a client can publish on."""
    try:
        subject = subjects.for_envelope(env)
    except SubjectError:
        return None
    tokens = subject.split(".")
    return subject if all(t and t not in ("*", ">") and not any(c.isspace() for c in t) for t in tokens) else None


async def test_hundreds_of_random_and_mutated_messages_take_nothing_down(tmp_path: Path) -> None:
    journal = tmp_path / "journal.sqlite"
    async with live_system(tmp_path, journal) as supervisor:
        bus = supervisor.bus
        assert bus is not None
        assert (await run_episode(bus, "before")).outcome == "success"
        before = processes(supervisor)
        bases = [(d.subject, d.data) for d in await bus.read_stored(bus.subjects.journaled, 10)]
        raw = await raw_client(supervisor)
        try:
            js = raw.jetstream()
            published = [
                (await js.publish(subject, data)).seq
                for subject, data in fuzz(random.Random(FUZZ_SEED), bases, raw.max_payload)
            ]
        finally:
            await raw.close()
        assert (await run_episode(bus, "after")).outcome == "success"
        await journal_everything(bus)
        assert processes(supervisor) == before
    with JournalReader(journal) as reader:
        rows = list(reader.rows())
    journaled = {r.stream_seq for r in rows}
    letters = [body for r in rows if isinstance(body := r.decoded_body(), DeadLetter)]
    dead = {letter.stream_seq for letter in letters}
    assert set(published) <= journaled | dead
    assert not set(published) & journaled & dead
    refused = len(set(published) & dead)
    assert FUZZ_MESSAGES / 2 < refused < FUZZ_MESSAGES  # most mutations are refused, not all
    assert all(len(letter.data) <= 4096 for letter in letters)
    assert verify(journal).ok
