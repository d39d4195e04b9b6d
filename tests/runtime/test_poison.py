"""No message takes the system down: poison published by a raw NATS client on a live system.

Each message ends dead-lettered and journaled as such, every process keeps running
(same pid, no restart), and the next episode passes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import nats
import pytest

from faultline.bus import DeadLetter, Envelope, EpisodeCompleted, Recording, ToolCall, digest, encode
from faultline.journal import JournalReader, verify
from tests.runtime.live import episode_of, journal_everything, live_system, processes, run_episode

pytestmark = pytest.mark.slow

CALL = ToolCall(call_id="c1", name="get_user_details", arguments={"user_id": "mia_li_3668"})


def tool_call(episode: str, **fields: object) -> bytes:
    values: dict[str, object] = {"id": "poison", "episode": episode, "sender": "tool", "recipient": "env", "body": CALL}
    values.update(fields)
    return encode(Envelope(**values))  # type: ignore[arg-type]


Poison = Callable[[str, int], tuple[str, bytes, str]]
"""(episode, NATS max payload) -> (subject, bytes, how the dead letter's reason ends or begins)."""

POISON: dict[str, Poison] = {
    "sender-is-not-a-name": lambda e, _: (f"fl.ep.{e}.env", tool_call(e, sender="evil.sender"), "at `$.sender`"),
    "ts-is-nan": lambda e, _: (f"fl.ep.{e}.env", tool_call(e, ts=math.nan), "at `$.ts`"),
    "hops-is-2**63": lambda e, _: (f"fl.ep.{e}.env", tool_call(e, hops=2**63), "at `$.hops`"),
    "a-megabyte-of-garbage": lambda e, limit: (f"fl.ep.{e}.env", b"\xc1" * (limit - 64), "not msgpack"),
    "episode-disagrees-with-subject": lambda e, _: (f"fl.ep.{e}.env", tool_call("other"), "at `$.episode`"),
    "recipient-disagrees-with-subject": lambda e, _: (
        f"fl.ep.{e}.env",
        tool_call(e, recipient="user"),
        "at `$.recipient`",
    ),
    "kind-disagrees-with-subject": lambda e, _: (
        f"fl.ep.{e}.env",
        tool_call(e, recipient="", body=EpisodeCompleted(outcome="success")),
        "at `$.body.kind`",
    ),
    "sender-disagrees-with-subject": lambda e, _: (
        f"fl.rec.{e}.user",
        tool_call(e, recipient="", body=Recording(call="now", index=0, request_digest="d", response=1.0)),
        "at `$.sender`",
    ),
}


@pytest.mark.parametrize("poison", POISON)
async def test_a_poison_message_is_dead_lettered_and_the_system_runs_on(poison: str, tmp_path: Path) -> None:
    journal = tmp_path / "journal.sqlite"
    async with live_system(tmp_path, journal) as supervisor:
        bus = supervisor.bus
        assert bus is not None
        assert (await run_episode(bus, "before")).outcome == "success"
        before = processes(supervisor)
        raw = await nats.connect(supervisor.url)
        try:
            subject, data, reason = POISON[poison](episode_of("before"), raw.max_payload)
            seq = (await raw.jetstream().publish(subject, data)).seq
        finally:
            await raw.close()
        assert (await run_episode(bus, "after")).outcome == "success"
        await journal_everything(bus)
        assert processes(supervisor) == before
    with JournalReader(journal) as reader:
        rows = list(reader.rows())
    assert seq not in {r.stream_seq for r in rows}
    letters = [body for r in rows if isinstance(body := r.decoded_body(), DeadLetter) and body.stream_seq == seq]
    assert len(letters) == 1, letters
    letter = letters[0]
    assert letter.reason.endswith(reason) or letter.reason.startswith(reason), letter.reason
    assert (letter.subject, letter.size, letter.digest) == (subject, len(data), digest(data))
    assert letter.data == data[: len(letter.data)] and len(letter.data) <= 4096
    assert verify(journal).ok
