"""A run's episode starts share their asks of the journal (`JournalGate`), on a real nats-server.

The journal service answering here is a plain responder that counts the asks: what is under test is how
many asks the starts make and what each start is told, not the journal.
"""

from __future__ import annotations

import functools

import anyio
import msgspec
import pytest

from faultline._errors import JournalError
from faultline.bus import Bus, Message
from faultline.runtime import JOURNAL_SERVICE, JournalGate, JournalState, ask_journal

STARTS = 20


class Journal:
    """Answers every ask on `<prefix>.svc.journal` with `stuck`, counting the asks."""

    def __init__(self, stuck: str = "") -> None:
        self.stuck = stuck
        self.asks = 0

    async def answer(self, msg: Message) -> None:
        self.asks += 1
        await msg.respond(msgspec.json.encode(JournalState(stuck=self.stuck)))


async def starts(gate: JournalGate) -> list[str]:
    """What each of `STARTS` episode starts made at once is told: "" to go on, or the refusal."""
    told: list[str] = []

    async def start() -> None:
        try:
            await gate.check()
        except JournalError as exc:
            told.append(str(exc))
        else:
            told.append("")

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for _ in range(STARTS):
                tg.start_soon(start)
    return told


@pytest.mark.parametrize("stuck", ["", "database or disk is full"])
async def test_starts_made_together_ask_the_journal_once_and_are_all_told_its_answer(bus: Bus, stuck: str) -> None:
    journal, gate = Journal(stuck), JournalGate(bus)
    subscription = await bus.subscribe(bus.subjects.svc(JOURNAL_SERVICE), journal.answer)
    try:
        told = await starts(gate)
        assert journal.asks == 1
        if stuck:
            assert all(
                refusal.startswith("new episodes are refused while the journal cannot write") for refusal in told
            )
            assert all(stuck in refusal for refusal in told) and len(told) == STARTS
        else:
            assert told == [""] * STARTS
        told = await starts(gate)  # a later start asks again: the journal's state may have changed
        assert journal.asks == 2 and len(told) == STARTS
    finally:
        await subscription.unsubscribe()


async def test_a_start_after_the_journal_recovered_is_let_through(bus: Bus) -> None:
    journal = Journal("database or disk is full")
    gate = JournalGate(bus)
    subscription = await bus.subscribe(bus.subjects.svc(JOURNAL_SERVICE), journal.answer)
    try:
        with pytest.raises(JournalError):
            await gate.check()
        journal.stuck = ""
        await gate.check()
        assert journal.asks == 2
    finally:
        await subscription.unsubscribe()


SLOWER_SHARD_S = 0.5
"""How much later than the other the second shard answers, as one process does after another under load."""


async def test_every_shard_that_cannot_write_is_named(bus: Bus) -> None:
    """docs/scale.md: the journal's state names the shards that cannot write (`status` and `journal health` print
    it). A question with no sequence to reach is answered at once by every shard, so it waits for them all: the
    first shard that said it cannot write used to end it, and a second one, stuck on the same disk, went unnamed."""

    async def shard(k: int, msg: Message) -> None:
        if k:
            await anyio.sleep(SLOWER_SHARD_S)
        await msg.respond(msgspec.json.encode(JournalState(stuck="database or disk is full", shard=k, shards=2)))

    subscriptions = [
        await bus.subscribe(bus.subjects.svc(JOURNAL_SERVICE), functools.partial(shard, k)) for k in range(2)
    ]
    try:
        state = await ask_journal(bus, 10 * SLOWER_SHARD_S)
        assert state.stuck == "shard 0: database or disk is full; shard 1: database or disk is full"
    finally:
        for subscription in subscriptions:
            await subscription.unsubscribe()
