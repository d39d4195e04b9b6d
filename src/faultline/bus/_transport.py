"""The bus: typed envelopes over NATS JetStream, with interceptors and dead letters.

`Bus` is one connection and what the rest of Faultline calls; each part of its work lives in a module of its own:
connecting (`_connect.py`), the stream (`_stream.py`), publishing and its confirmations (`_publishing.py`), making
and opening consumers (`_consumers.py`), reading the stream through them (`_reading.py`), and requests on core
NATS (`_requests.py`).

Publishing always goes through JetStream with the envelope id, keyed by the
connection's credential (`Bus.dedup_id`), as `Nats-Msg-Id`, so a message
published twice within the duplicate window is stored once.
Consumers (`_consumer.py`) are push consumers with explicit acks. Beside the
stream, core NATS carries what is never stored: requests and their answers,
announcements (`subscribe`, `notify`, `request`). Every failure is a BusError.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import InitVar, dataclass, field

import anyio
import nats.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import api

from faultline._errors import DecodeError
from faultline.bus._access import INBOX, ConsumerSpec, Login, inbox
from faultline.bus._acks import Confirmations
from faultline.bus._connect import id_key, open_client
from faultline.bus._consumer import Consumer, Delivery, envelopes_of
from faultline.bus._consumers import Consumers, ConsumerState, StartAt
from faultline.bus._messaging import Message, Subscription, nats_failure
from faultline.bus._publishing import Outbox, Publisher, letter_for
from faultline.bus._reading import Reader
from faultline.bus._refusals import Refusals
from faultline.bus._requests import Requests
from faultline.bus._settings import BusSettings
from faultline.bus._stream import Stream, StreamState
from faultline.core import DEFAULT_PREFIX, Envelope, InterceptorChain, Subjects, encode, validate_envelope

log = logging.getLogger(__name__)


@dataclass
class Bus:
    """A connection to NATS that speaks Faultline envelopes."""

    nc: NatsClient
    subjects: Subjects = field(default_factory=Subjects)
    settings: BusSettings = field(default_factory=BusSettings)
    interceptors: InterceptorChain = field(default_factory=InterceptorChain)
    inbox: str = INBOX
    """Where this connection's consumers deliver and its requests are answered (`inbox(user)` with a credential)."""
    id_key: bytes = field(default=b"", repr=False)
    """Keys the ids the stream's duplicate window knows this connection's envelopes by (`dedup_id`): secret to its
    credential, so that no other identity can take one first."""
    user: str = ""
    """The NATS user this connection speaks as ("" on a server without users): the teller of its tells."""
    refusals: InitVar[Refusals | None] = None
    """What the server refuses this connection, as its client's error callback hears it (`connect` hands it on)."""

    def __post_init__(self, refusals: Refusals | None) -> None:
        self.js = self.nc.jetstream()
        self._acks = Confirmations(self.nc, self.settings.publish_max_pending)
        self._refusals = refusals or Refusals("faultline")
        self._publisher = Publisher(self._acks, self._refusals, self.settings, self.id_key)
        self._requests = Requests(self.nc)
        self._stream = Stream(self.js, self.subjects, self.settings, self._refusals)
        self._consumers = Consumers(self.nc, self.js, self.subjects.stream, self.settings, self.inbox, self._refusals)
        self._reader = Reader(self._consumers, self.settings, self._refusals)

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        settings: BusSettings | None = None,
        interceptors: InterceptorChain | None = None,
        name: str = "faultline",
        login: Login | None = None,
    ) -> Bus:
        """Connect to `url`: one server, or several separated by commas (the nodes of a cluster).

        With a credential in `login` the connection is that NATS user's, and every publish
        it is not allowed is refused by the server: logged here and raised as PublishRefusedError.
        With a CA in `login` it speaks TLS and accepts only a server certificate that CA signed.
        """
        settings = settings or BusSettings()
        nc, refusals = await open_client(url, settings, name=name, login=login)
        credential = login.credential if login else None
        return cls(
            nc,
            Subjects(prefix, settings.partitions),
            settings,
            interceptors or InterceptorChain(),
            inbox(credential.user) if credential else INBOX,
            id_key(credential),
            credential.user if credential else "",
            refusals,
        )

    async def close(self) -> None:
        """Drain, else close; a connection the server already dropped has nothing left to lose, so that is no error."""
        if not self.nc.is_closed:
            try:
                await self.nc.drain()
            except (TimeoutError, nats.errors.Error, ConnectionError):
                with contextlib.suppress(ConnectionError):
                    await self.nc.close()

    async def __aenter__(self) -> Bus:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- core NATS: messages for whoever listens now, never stored ------------------------

    async def subscribe(
        self, subject: str, handler: Callable[[Message], Awaitable[None]] | None = None, *, queue: str = ""
    ) -> Subscription:
        """Receive what is sent on `subject` from now on: each message handed to `handler`, one at a time,
        or, without a handler, by iterating the subscription. Subscribers in one `queue` share the messages."""

        deliver: Callable[[Msg], Awaitable[None]] | None = None
        if handler is not None:
            take = handler

            async def deliver(msg: Msg) -> None:
                try:
                    await take(Message._of(msg, self.nc))
                except Exception:  # noqa: BLE001 - the client would hand it to its error callback, far from here
                    log.exception("the handler of a message on %s failed", msg.subject)

        with nats_failure(f"subscribing to {subject}"):
            sub = await self.nc.subscribe(subject, queue=queue, cb=deliver)
        return Subscription(sub, self.nc)

    def check_subscribed(self, subject: str) -> None:
        """SubscribeRefusedError if the server refused this connection's subscription to `subject`: it says so
        within a round trip of the subscription, and the client library only logs it."""
        self._refusals.check_subscribed(subject)

    async def notify(self, subject: str, data: bytes, *, reply: str = "") -> None:
        """Send `data` to whoever subscribes to `subject` now; nothing is stored, and nobody answers, or each
        whoever answers to `reply` (a `new_inbox()` this connection subscribed to), however many they are."""
        with nats_failure(f"sending on {subject}"):
            await self.nc.publish(subject, data, reply=reply)

    def new_inbox(self) -> str:
        """A subject of this connection's own, under its inbox prefix, where answers may be sent to it."""
        return self.nc.new_inbox()

    def next_reconnect(self) -> anyio.Event:
        """An event set when this connection next comes back after losing its server (core NATS missed
        what was sent meanwhile: read it from the stream)."""
        return self._refusals.reconnected

    async def flush(self) -> None:
        """Return once the server has received everything this connection sent before."""
        with nats_failure("flushing the connection to NATS"):
            await self.nc.flush()

    async def request(self, subject: str, payload: bytes, timeout_s: float) -> bytes:
        """Send `payload` to a subscriber of `subject` and return its answer.

        NoResponderError when nobody subscribes to `subject`, ReplyTimeoutError when
        no answer comes within `timeout_s`, BusError when NATS cannot be reached.
        """
        return await self._requests.request(subject, payload, timeout_s)

    async def request_all(
        self, subject: str, payload: bytes, window_s: float, *, enough: Callable[[list[bytes]], bool] | None = None
    ) -> list[bytes]:
        """Ask every subscriber of `subject` and return the answers that arrive within `window_s`, however many.

        Returns sooner once `enough(answers)` holds, and at once when nobody subscribes.
        """
        return await self._requests.request_all(subject, payload, window_s, enough)

    # -- stream ---------------------------------------------------------------------------

    async def ensure_stream(self) -> api.StreamInfo:
        """Create the journal stream, or bring an existing one's subjects up to date. Idempotent.

        The stream records its partitions (`BusSettings.partitions`); a stream that holds messages in another
        layout is refused with BusError, since its history would not be found under this one's subjects.
        """
        return await self._stream.ensure()

    async def check_layout(self) -> None:
        """BusError, in one line, when the system's stream divides its subjects into other partitions than this
        process does: what it publishes would go where no shard reads it (a runner of a system already up)."""
        await self._stream.check_layout()

    async def stream_incarnation(self) -> str:
        """An id of this stream's life: a journal must not mix sequences of two streams."""
        return await self._stream.incarnation()

    async def stream_state(self) -> StreamState:
        """How many messages the stream holds now, and the sequence of the last one."""
        return await self._stream.state()

    async def first_stored(self, subjects: list[str]) -> int:
        """The sequence of the first message the stream holds on any of `subjects` (filters); 0 when it holds none:
        where a trimmed stream's episodes begin, which its first sequence (a control kept for ever) may not say."""
        return await self._stream.first_on(subjects)

    async def last_stored(self, subjects: list[str]) -> int:
        """The sequence of the last message the stream holds on any of `subjects` (filters, wildcards and all: one
        look each, however many messages they hold); 0 when it holds none."""
        return await self._stream.last_on(subjects)

    async def trim_stream(self, subjects: list[str], below: int) -> None:
        """Remove the stream's messages on `subjects` (filters, `Subjects.shard_episodes`) below sequence `below`:
        what the journal holds and no episode needs any more (`runtime.JournalService`)."""
        await self._stream.trim(subjects, below)

    # -- publishing -----------------------------------------------------------------------

    async def publish(self, envelope: Envelope) -> None:
        """Publish through the outbound interceptors; returns once JetStream stored everything."""
        await self.publish_all((envelope,))

    async def publish_all(self, envelopes: Iterable[Envelope]) -> None:
        """Publish many envelopes pipelined; returns once JetStream stored all of them."""
        outbox = self.outbox()
        for envelope in envelopes:
            await outbox.send(envelope)
        await outbox.settle()

    def outbox(self) -> Outbox:
        """Envelopes sent as they are made and confirmed together (see `Outbox`)."""
        return Outbox(self._publisher, self.interceptors, self.subjects)

    def dedup_id(self, envelope_id: str) -> str:
        """The id the stream's duplicate window knows an envelope by.

        An envelope's id is derived from what others read (an episode's id, the message it answers), so any
        identity could work out the ids of the runner's starts or of another group's outputs, and publish its own
        messages under them first to have those dropped as duplicates. Keyed by this connection's credential, the
        id is the same for every process of one identity (a handler run again after a crash publishes the same
        one, and the copy is dropped) and foreseeable by no other.
        """
        return self._publisher.dedup_id(envelope_id)

    async def publish_raw(self, subject: str, data: bytes, msg_id: str = "") -> int:
        """Publish bytes as they are (controls, dead letters, tests of malformed input); their stream sequence."""
        return await self._publisher.publish_raw(subject, data, msg_id)

    async def publish_first(self, envelope: Envelope, claimant: str) -> bool:
        """Publish `envelope` only as the first message on its subject; False, storing nothing, where the stream
        holds one there already that `claimant` did not publish.

        Of two processes that publish on one subject at once, the stream stores one and refuses the other: a
        claim that no look at the stream before publishing can make. The envelope goes out as it is, past the
        outbound interceptors (one that made copies of it would claim its subject twice). Its message id names
        `claimant` (a token its caller makes, one per claim it may make again), so that the copy sent again after no
        answer came in time, or the claim made again after a run was held up, is found to be the claimant's own
        and not another's, even another's of this credential and this envelope id.
        """
        validate_envelope(envelope)
        subject = self.subjects.for_envelope(envelope)
        msg_id = f"{self.dedup_id(envelope.id)}.{claimant}"
        if await self._publisher.publish_first(subject, encode(envelope), msg_id):
            return True
        return await self._stream.last_msg_id(subject) == msg_id  # an earlier copy of this one stored after all

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        """Send refused bytes to `fl.dlq` with the reason.

        The letter's id follows from the message's stream sequence, so a process that refuses it again (after a
        restart) stores no second letter; the stream knows it keyed by this connection's credential, like every
        envelope's (`dedup_id`), so that no other identity can take it first to have the bytes leave no trace.
        Each identity that refuses a message (its worker, the journal) leaves a letter of its own."""
        letter = letter_for(delivery, reason)
        await self.publish_raw(self.subjects.dlq, encode(letter), self.dedup_id(letter.id))

    async def decode_or_dead_letter(self, delivery: Delivery) -> Envelope | None:
        """The envelope, or None after sending the bytes to the dead-letter subject."""
        try:
            return delivery.envelope()
        except DecodeError as exc:
            await self.dead_letter(delivery, str(exc))
            return None

    # -- consumers ------------------------------------------------------------------------

    async def consumer(
        self,
        name: str | None,
        filter_subjects: Sequence[str],
        *,
        start: StartAt = "all",
        ack_all: bool = False,
        max_ack_pending: int | None = None,
        ack_wait_s: float | None = None,
        replace: bool = False,
        heartbeat: bool = False,
    ) -> Consumer:
        """A push consumer over `filter_subjects`.

        A named (durable) consumer survives restarts and is reused as it is unless
        `replace` asks for a fresh one at `start`; with `heartbeat`, it finds deliveries lost
        just before a quiet period (`BusSettings.idle_heartbeat_s`). An unnamed one is for
        reading: it acknowledges nothing, and the server removes it once it is closed. Only
        one on a single subject is made with the filtered create subject, which permissions
        can hold a reader to; several subjects are for the operator's reads.
        """
        return await self._consumers.open(
            name,
            filter_subjects,
            start=start,
            ack_all=ack_all,
            max_ack_pending=max_ack_pending,
            ack_wait_s=ack_wait_s,
            replace=replace,
            heartbeat_s=self.settings.idle_heartbeat_s if heartbeat else None,
        )

    async def own_consumer(
        self,
        name: str,
        filter_subjects: Sequence[str],
        *,
        ack_wait_s: float | None = None,
        rivals: Callable[[str], bool] | None = None,
    ) -> tuple[Consumer, bool]:
        """Durable consumer `name`, read from its acknowledgement floor on; and whether it is fresh (it never
        delivered anything: nothing read before to recover).

        The operator makes it (`ensure_consumers`); a process alone on an open server makes it itself, from
        the next message on, and brings its limit of unacknowledged deliveries up to date. A consumer that delivered before is reset, which sends again at once what was
        sent and not acknowledged: what a process that stopped held, or what was lost on the way.

        It is read alone: ConsumerInUseError, touching nothing, when another process reads it (each would be
        handed every delivery), or, on an open server, one of the consumers `rivals` names, still after
        `other_reader_wait_s` (a reader that has just stopped lets go meanwhile).
        """
        return await self._consumers.own(name, filter_subjects, ack_wait_s=ack_wait_s, rivals=rivals)

    async def ensure_consumers(self, specs: Iterable[ConsumerSpec]) -> None:
        """Make the durable consumers the operator makes for other identities, or bring their filters,
        deliver subject, ack wait and unacknowledged limit up to date (keeping where they are). Idempotent."""
        await self._consumers.ensure(specs)

    async def ack_floor(self, name: str) -> int | None:
        """The stream sequence up to which durable consumer `name` acknowledged everything (0 before its first
        acknowledgement); None when no consumer of that name exists. A consumer replacing it resumes after it."""
        return await self._consumers.ack_floor(name)

    async def acknowledging(self) -> list[ConsumerState]:
        """Every consumer of the stream that acknowledges what it is sent (not those made for reading), with the
        subjects it is sent and how far it has acknowledged them: one request a page of 256 consumers."""
        return await self._consumers.acknowledging()

    async def unacknowledged(self, name: str) -> int | None:
        """How many messages durable consumer `name` has not had acknowledged: those still to deliver and those
        delivered and not acknowledged yet. None when no consumer of that name exists."""
        return await self._consumers.unacknowledged(name)

    # -- reading the stream ---------------------------------------------------------------

    async def read_stored(self, filter_subjects: Sequence[str], timeout_s: float, *, after: int = 0) -> list[Delivery]:
        """Every message the stream holds on `filter_subjects` now after stream sequence `after`, in stream order.

        One short-lived consumer per subject: each one's filter is in the subject that makes it, where
        the server's permissions can hold a reader to its own.
        """
        return await self._reader.read_stored(filter_subjects, timeout_s, after=after)

    async def read_envelopes(
        self, filter_subjects: Sequence[str], timeout_s: float, *, after: int = 0
    ) -> list[tuple[Delivery, Envelope]]:
        """`read_stored`, each message with its envelope; what is none was dead-lettered when it arrived, and is
        passed over."""
        return envelopes_of(await self.read_stored(filter_subjects, timeout_s, after=after))

    async def follow(
        self,
        subject: str,
        take: Callable[[Delivery], Awaitable[None]],
        *,
        after: int,
        opened: Consumer | None = None,
    ) -> None:
        """Hand `take` every message the stream stores on `subject` after stream sequence `after`, in stream
        order, as each is stored, until cancelled (`opened`: a consumer already reading from there).

        Deliveries travel over core NATS, which drops those on their way when a node, or the route between
        two, is lost, and says nothing of it. What comes after tells: a delivery that skips ahead, an idle
        heartbeat that names a later one, a reconnect of this connection, or a consumer silent for
        SILENT_HEARTBEATS heartbeats (the server that held it lost it, or removed it while this reader was
        cut off). Each has the subject read again after the last message taken: none missed, none twice.
        A credential that may not read `subject` ends it with PublishRefusedError: asking again cannot help.
        """
        await self._reader.follow(subject, take, after=after, opened=opened)
