"""Publishing to the stream: each publish confirmed by JetStream, sent again with its id until it is, and
refused at once when the server refuses it.

An `Outbox` sends envelopes as a handler makes them and waits for their confirmations together; controls, dead
letters and tests of malformed input are published as they are (`Bus.publish_raw`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Sequence

import anyio

from faultline._errors import BusError
from faultline.bus._acks import Confirmations, Publish, Round
from faultline.bus._consumer import Delivery
from faultline.bus._refusals import Refusals
from faultline.bus._retry import RETRY_BACKOFF_MAX_S, RETRY_BACKOFF_S
from faultline.bus._settings import BusSettings
from faultline.core import (
    DEAD_LETTER_KEPT_BYTES,
    DEAD_LETTER_NOTE_CHARS,
    DLQ_EPISODE,
    DLQ_SENDER,
    DeadLetter,
    Envelope,
    InterceptorChain,
    Subjects,
    digest,
    encode,
    validate_envelope,
)

log = logging.getLogger(__name__)


class Publisher:
    """This connection's publishes to the stream, and the waits for JetStream to confirm them."""

    def __init__(self, acks: Confirmations, refusals: Refusals, settings: BusSettings, id_key: bytes) -> None:
        self.acks = acks
        """Where each publish is sent, as one of a round, and its confirmation collected (`settle` waits for them)."""
        self._refusals = refusals
        self._settings = settings
        self._id_key = id_key

    def dedup_id(self, envelope_id: str) -> str:
        if not self._id_key:
            return envelope_id
        return f"{envelope_id}.{hashlib.blake2b(envelope_id.encode(), key=self._id_key, digest_size=8).hexdigest()}"

    async def publish_raw(self, subject: str, data: bytes, msg_id: str) -> int:
        return (await self._publish(Publish(subject, data, msg_id))).seq

    async def publish_first(self, subject: str, data: bytes, msg_id: str) -> bool:
        """Whether the stream stored `data` as the first message on `subject` (False: the subject held one)."""
        return not (await self._publish(Publish(subject, data, msg_id, first=True))).held

    async def _publish(self, publish: Publish) -> Publish:
        round_ = Round()
        await self.acks.send(publish, round_)
        await self.settle([publish], round_)
        return publish

    async def settle(self, publishes: list[Publish], round_: Round) -> None:
        """Wait until JetStream confirmed every publish, sending the unconfirmed ones again with the same
        message ids (the duplicate window stores each once) until `publish_retry_s` has passed.

        An answer this process has not read yet is not a lost publish: while confirmations keep being
        read, a publish that nothing sent after it has overtaken is waited for, not sent again, for as
        long as that takes. It fails only when no confirmation at all was read for `publish_retry_s`
        (the stream is unreachable), or when publishes sent after it were confirmed and it was not, past
        the time it may be sent again. PublishRefusedError as soon as NATS refuses one; BusError when
        the stream said no.
        """
        settings, acks = self._settings, self.acks
        resend_until = anyio.current_time() + settings.publish_retry_s
        delay = RETRY_BACKOFF_S
        overtaken: set[int] = set()
        """Publishes (ids) found overtaken at the last look, past the time to send them again."""
        try:
            while True:
                unconfirmed = await self._confirm(publishes, round_)
                if not unconfirmed:
                    return
                now = anyio.current_time()
                silent_s = now - acks.confirmed_at
                resend: list[Publish] = []
                waiting: list[Publish] = []
                for publish, why in unconfirmed:
                    behind = acks.confirmed_token < publish.token and silent_s < settings.publish_timeout_s
                    if behind and not publish.answered:
                        waiting.append(publish)  # confirmations are being read and its turn has not come
                    elif now + delay <= resend_until:
                        resend.append(publish)
                    elif publish.answered or id(publish) in overtaken or silent_s >= settings.publish_retry_s:
                        raise BusError(
                            f"JetStream did not confirm {len(unconfirmed)} publish(es) within"
                            f" {settings.publish_retry_s:g}s ({why}): is the stream's cluster down,"
                            " or without a leader?"
                        )
                    else:
                        waiting.append(publish)
                overtaken = {id(p) for p in waiting if acks.confirmed_token > p.token}
                if resend:
                    log.warning(
                        "JetStream did not confirm %d publish(es) (%s); sending them again in %.1fs with the same ids",
                        len(resend),
                        unconfirmed[0][1],
                        delay,
                    )
                    await anyio.sleep(delay)
                    delay = min(2 * delay, RETRY_BACKOFF_MAX_S)
                round_ = Round()
                for publish in waiting:
                    if not publish.answered:
                        acks.wait_again(publish, round_)
                    elif publish.failure:
                        resend.append(publish)  # refused for now meanwhile: sent again with the others
                for publish in resend:
                    if not publish.answered or publish.failure:  # still unconfirmed after the wait
                        await acks.send(publish, round_)
        except BaseException:
            acks.forget(publishes)
            raise

    async def _confirm(self, publishes: list[Publish], round_: Round) -> list[tuple[Publish, str]]:
        """Wait up to `publish_timeout_s` for the round's answers; the publishes worth sending again, with why.

        Raises PublishRefusedError when NATS refuses one, BusError when the stream rejects one.
        """
        round_.seal()
        if not round_.complete:
            # A timer and the round's own future: cheaper than a cancel scope and `asyncio.wait` per round.
            timer = asyncio.get_running_loop().call_later(self._settings.publish_timeout_s, round_.expire)
            self._refusals.rounds.add(round_)
            try:
                while True:
                    await round_.done
                    self._refusals.check({publish.subject for publish in publishes})
                    if round_.complete or round_.expired:
                        break
                    round_.rearm()
            finally:
                timer.cancel()
                self._refusals.rounds.discard(round_)
        unconfirmed = []
        for publish in publishes:
            if not publish.answered:
                unconfirmed.append((publish, f"no answer within {self._settings.publish_timeout_s:g}s"))
            elif publish.failure and not publish.held:
                if not publish.transient:
                    raise BusError(f"JetStream refused a publish to {publish.subject}: {publish.failure}")
                unconfirmed.append((publish, publish.failure))
        return unconfirmed


class Outbox:
    """Envelopes on their way to the stream: each is sent the moment it is made, and `settle`
    waits for JetStream to confirm them all.

    One connection delivers its publishes in order, so what is sent first is stored first: a
    handler's recordings, sent as its calls return, are stored before the outputs sent after
    them, and the handler waits for one confirmation round instead of one per recording.
    Should a publish go unconfirmed (a stream without a leader for a moment) it is sent again
    with its id, and may then be stored after later ones; replay, recovery and forks find a
    recording by the input that caused it, wherever it is stored.
    """

    __slots__ = ("_publisher", "_interceptors", "_subjects", "_publishes", "_round")

    def __init__(self, publisher: Publisher, interceptors: InterceptorChain, subjects: Subjects) -> None:
        self._publisher = publisher
        self._interceptors = interceptors
        self._subjects = subjects
        self._publishes: list[Publish] = []
        self._round: Round | None = None
        """Made at the first send: most handlers of a quiet input send nothing."""

    async def send(self, envelope: Envelope) -> None:
        """Send `envelope` through the outbound interceptors, without waiting for its confirmation."""
        chain = self._interceptors
        if chain.rewrites_outbound:
            messages, events = await chain.outbound(envelope)
            outgoing: Sequence[Envelope] = (*messages, *events) if events else messages
        else:
            outgoing = (envelope,)
        for message in outgoing:
            validate_envelope(message)
            publish = Publish(
                self._subjects.for_envelope(message), encode(message), self._publisher.dedup_id(message.id)
            )
            self._publishes.append(publish)
            self._round = self._round or Round()
            await self._publisher.acks.send(publish, self._round)

    async def settle(self) -> None:
        """Return once JetStream stored everything sent (see `Publisher.settle` for the retries and errors)."""
        publishes, round_ = self._publishes, self._round
        if round_ is None:
            return
        self._publishes, self._round = [], None
        await self._publisher.settle(publishes, round_)


def letter_for(delivery: Delivery, reason: str) -> Envelope:
    """The dead letter of `delivery`, refused for `reason`: bounded however large the refused bytes, and known by
    the delivery's stream sequence (`Bus.dead_letter`)."""
    body = DeadLetter(
        reason=reason[:DEAD_LETTER_NOTE_CHARS],
        subject=delivery.subject[:DEAD_LETTER_NOTE_CHARS],
        data=delivery.data[:DEAD_LETTER_KEPT_BYTES],
        stream_seq=delivery.stream_seq,
        size=len(delivery.data),
        digest=digest(delivery.data),
    )
    return Envelope(id=f"dlq-{delivery.stream_seq}", episode=DLQ_EPISODE, sender=DLQ_SENDER, body=body)
