"""Keeping a worker's fault rules current, and telling the operator when they are.

A worker reads `fl.ctl.faults` and `fl.ev.fault.*.*` from the start of the stream
(the rules in force and the budget they used), then follows both live through
a push consumer each, so a rule added or removed reaches it within milliseconds.
Asked on `fl.svc.faults`, and after every control it takes in, it tells the
stream sequence it has taken in (`fl.svc.faults.<its user>.taken`, `_tells`):
the command that published a rule waits for those to know the rule is in force
everywhere, each worker known by its credential as well as its name.

The consumers acknowledge nothing (a worker may not acknowledge what it did not
make for itself): `Bus.follow` finds a delivery lost on the way, when a cluster
node is lost, and reads the subject again after the last delivery taken.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import msgspec

from faultline._errors import DecodeError
from faultline.bus._consumer import Consumer, Delivery, envelopes_of
from faultline.bus._messaging import Message, decode_notice
from faultline.bus._tells import hear, tell
from faultline.bus._transport import Bus
from faultline.core import Control, Envelope, FaultApplied, encode
from faultline.faults import FAULTS_CONTROL, RuleSet

TAKEN = "taken"


@dataclass(frozen=True, slots=True)
class FollowSettings:
    load_timeout_s: float = 10.0
    """Longest a worker may take to read the rules in force when it starts."""
    confirm_timeout_s: float = 5.0
    """Longest a command waits for workers to confirm a rule change."""
    confirm_grace_s: float = 0.2
    """How long a command waits for workers to answer when it does not know how many there are."""


WorkerId = tuple[str, str]
"""A worker as a command waits for it: the NATS user it connects as (its teller), and its process name."""


class _Taken(msgspec.Struct):
    """A worker's word that it has taken in the stream up to `seq`, told when asked and after every control."""

    worker: str
    seq: int


def _subjects(bus: Bus) -> list[str]:
    s = bus.subjects
    return [s.ctl(FAULTS_CONTROL), s.event("fault", "*")]


def _take(rules: RuleSet, env: Envelope, seq: int) -> bool:
    """Feed one stream message to `rules`; True if it was a control."""
    rules.last_seq = max(rules.last_seq, seq)
    if isinstance(env.body, Control) and env.body.name == FAULTS_CONTROL:
        rules.control(env.body)
        return True
    if isinstance(env.body, FaultApplied):
        rules.count(env.body)
    return False


async def _catch_up(consumers: Mapping[str, Consumer], rules: RuleSet, timeout_s: float) -> dict[str, int]:
    """Take in every consumer's backlog, in stream order; the last stream sequence read of each subject."""
    backlog: list[Delivery] = []
    last: dict[str, int] = {}
    for subject, consumer in consumers.items():
        read = await consumer.backlog(timeout_s)
        last[subject] = read[-1].stream_seq if read else 0
        backlog.extend(read)
    for delivery, env in envelopes_of(sorted(backlog, key=lambda delivery: delivery.stream_seq)):
        _take(rules, env, delivery.stream_seq)
    return last


async def read_rules(bus: Bus, settings: FollowSettings | None = None) -> RuleSet:
    """The rules in force now, and the fault events of each, read from the stream."""
    settings = settings or FollowSettings()
    rules = RuleSet()
    for delivery, env in await bus.read_envelopes(_subjects(bus), settings.load_timeout_s):
        _take(rules, env, delivery.stream_seq)
    return rules


@asynccontextmanager
async def follow_rules(
    bus: Bus, rules: RuleSet, *, name: str, settings: FollowSettings | None = None
) -> AsyncIterator[RuleSet]:
    """Load the rules in force into `rules`, then keep them current until the block ends."""
    settings = settings or FollowSettings()
    s = bus.subjects
    consumers: dict[str, Consumer] = {}
    try:
        opened_at = (await bus.stream_state()).last_seq
        for subject in _subjects(bus):
            consumers[subject] = await bus.consumer(None, [subject], start="all", heartbeat=True)
        read = await _catch_up(consumers, rules, settings.load_timeout_s)

        async def tell_taken(_: Message | None = None) -> None:
            await tell(bus, FAULTS_CONTROL, TAKEN, msgspec.json.encode(_Taken(name, rules.last_seq)))

        async def take(delivery: Delivery) -> None:
            try:
                taken = _take(rules, delivery.envelope(), delivery.stream_seq)
            except DecodeError:
                return
            if taken:
                await tell_taken()

        sub = await bus.subscribe(s.svc(FAULTS_CONTROL), tell_taken)
        try:
            async with anyio.create_task_group() as tg:
                for subject, consumer in consumers.items():
                    after = max(read[subject], opened_at)
                    tg.start_soon(functools.partial(bus.follow, subject, take, after=after, opened=consumer))
                yield rules
                tg.cancel_scope.cancel()
        finally:
            await sub.unsubscribe()
    finally:
        for consumer in consumers.values():
            await consumer.close()


async def publish_controls(
    bus: Bus,
    controls: Sequence[Envelope],
    *,
    workers: Collection[WorkerId] | None = None,
    settings: FollowSettings | None = None,
) -> dict[str, Any]:
    """Publish fault-rule controls and wait until the workers have taken them in.

    With `workers` known, waits for each of them: a worker's word counts only when told under its own
    credential, so that no other worker can say it for it. Else waits for the workers that tell within
    the grace period. Returns {"seq", "workers", "confirmed", "missing", "seconds"}, where `missing` names
    the workers waited for that did not confirm, and `seconds` is how long the slowest confirming worker took.
    """
    settings = settings or FollowSettings()
    s = bus.subjects
    seen: dict[WorkerId, int] = {}
    took: dict[WorkerId, float] = {}
    arrived = anyio.Event()
    seq, started = 0, 0.0

    async def on_told(teller: str, msg: Message) -> None:
        note = decode_notice(msg.data, _Taken, subject=msg.subject)
        if note is None:
            return
        worker, at = (teller, note.worker), note.seq
        seen[worker] = max(seen.get(worker, 0), at)
        if seq and at >= seq and worker not in took:
            took[worker] = anyio.current_time() - started
        arrived.set()

    def missing() -> list[WorkerId]:
        return [worker for worker in workers or () if seen.get(worker, 0) < seq]

    sub = await hear(bus, FAULTS_CONTROL, TAKEN, on_told)
    try:
        started = anyio.current_time()
        last = 0
        for env in controls:
            last = await bus.publish_raw(s.for_envelope(env), encode(env), env.id)
        seq = last
        await bus.notify(s.svc(FAULTS_CONTROL), b"")
        grace = started + settings.confirm_grace_s
        with anyio.move_on_after(settings.confirm_timeout_s):
            while True:
                confirmed = sum(1 for v in seen.values() if v >= seq)
                now = anyio.current_time()
                if workers is not None and not missing():
                    break
                if workers is None and now >= grace and confirmed == len(seen):
                    break
                arrived = anyio.Event()
                with anyio.move_on_after(grace - now if workers is None and now < grace else None):
                    await arrived.wait()
        return {
            "seq": seq,
            "workers": len(seen),
            "confirmed": sum(1 for v in seen.values() if v >= seq),
            "missing": [f"{name} (user {user})" for user, name in missing()],
            "seconds": max(took.values(), default=0.0),
        }
    finally:
        await sub.unsubscribe()
