"""Making the stream's consumers, opening them, and asking how far they got.

`_consumer.py` reads one consumer's deliveries; this is where a consumer comes from: one a worker reads alone
(made by the operator, or by a process alone on an open server), one for reading what is stored, which the server
removes once nobody reads it, and the durable ones other processes keep.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import anyio
import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext, api

from faultline._errors import BusError, ConsumerInUseError
from faultline.bus._access import INBOX, ConsumerSpec
from faultline.bus._consumer import Consumer
from faultline.bus._refusals import Refusals
from faultline.bus._retry import RETRY_BACKOFF_MAX_S, RETRY_BACKOFF_S, asked_again
from faultline.bus._settings import BusSettings

EPHEMERAL_INACTIVE_S = 5.0
"""How soon the server removes a consumer made for reading once nobody reads it (no reader deletes one: most
identities may not)."""


StartAt = Literal["all", "new"] | int

JS_API = "$JS.API"
"""The JetStream API's subjects: the client library's default, which every connection of the bus uses."""
JS_API_TIMEOUT_S = 5.0
"""How long a request to the JetStream API made here waits for its answer: the client library's own default."""


class _ConsumerPage(msgspec.Struct):
    """One answer of the JetStream API's consumer list."""

    total: int = 0
    consumers: list[dict[str, Any]] = []
    missing: list[str] = []
    error: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ConsumerState:
    """A consumer that acknowledges what it is sent, as the server held it when asked (`Bus.acknowledging`)."""

    name: str
    filters: tuple[str, ...]
    """The subjects it is sent (NATS filters); none: every subject of the stream."""
    ack_floor: int
    """The stream sequence up to which everything it was sent is acknowledged: all of it handled, not only sent.
    A consumer that no process reads now holds the rest for the next that will."""

    def receives(self, subject: str) -> bool:
        """Whether a message stored on `subject` is sent to it (NATS's matching: `*` one token, `>` the rest)."""
        return not self.filters or any(_matches(f, subject) for f in self.filters)


def _matches(filter_subject: str, subject: str) -> bool:
    wanted, tokens = filter_subject.split("."), subject.split(".")
    for i, token in enumerate(wanted):
        if token == ">":
            return len(tokens) > i
        if i >= len(tokens) or token not in ("*", tokens[i]):
            return False
    return len(tokens) == len(wanted)


log = logging.getLogger(__name__)


class Consumers:
    """The consumers of the stream as this connection makes and opens them (`Bus.consumer`, `Bus.own_consumer`,
    `Bus.ensure_consumers`)."""

    def __init__(
        self,
        nc: NatsClient,
        js: JetStreamContext,
        stream: str,
        settings: BusSettings,
        inbox: str,
        refusals: Refusals,
    ) -> None:
        self._nc = nc
        self._js = js
        self._stream = stream
        self._settings = settings
        self._inbox = inbox
        self._refusals = refusals

    async def open(
        self,
        name: str | None,
        filter_subjects: Sequence[str],
        *,
        start: StartAt = "all",
        ack_all: bool = False,
        max_ack_pending: int | None = None,
        ack_wait_s: float | None = None,
        replace: bool = False,
        heartbeat_s: float | None = None,
    ) -> Consumer:
        deliver_subject = self._nc.new_inbox()
        consumer = name or deliver_subject.rsplit(".", 1)[-1]
        what = f"opening consumer {name or 'of ' + ', '.join(filter_subjects)}"
        with self._refusals.asking_jetstream(what, consumer):
            stream = self._stream
            if name is not None and not replace:
                try:
                    info = await self._js.consumer_info(stream, name)
                    assert info.config.deliver_subject is not None
                    return await self._subscribe_to(name, info.config.deliver_subject, durable=True, info=info)
                except nats.js.errors.NotFoundError:
                    pass
            if name is not None and replace:
                try:
                    await self._js.delete_consumer(stream, name)
                except nats.js.errors.NotFoundError:
                    pass
            durable = name is not None
            config = api.ConsumerConfig(
                name=consumer,
                durable_name=name,
                deliver_subject=deliver_subject,
                ack_policy=(api.AckPolicy.ALL if ack_all else api.AckPolicy.EXPLICIT)
                if durable
                else api.AckPolicy.NONE,
                ack_wait=(ack_wait_s or self._settings.ack_wait_s) if durable else None,
                max_ack_pending=(max_ack_pending or self._settings.max_ack_pending) if durable else None,
                idle_heartbeat=heartbeat_s,
                **_filters(filter_subjects),
                inactive_threshold=None if durable else EPHEMERAL_INACTIVE_S,
                **_start_policy(start),
            )
            try:
                info = await self._js.add_consumer(stream, config)
            except nats.errors.TimeoutError:
                self._refusals.check_consumer(stream, config.name or "", filter_subjects)
                raise
            return await self._subscribe_to(info.name, deliver_subject, durable=durable, info=info)

    async def own(
        self,
        name: str,
        filter_subjects: Sequence[str],
        *,
        ack_wait_s: float | None = None,
        rivals: Callable[[str], bool] | None = None,
    ) -> tuple[Consumer, bool]:
        stream = self._stream
        try:
            info = await self._alone(name, rivals)  # before the reset, which would send a reader's deliveries again
            if info is None:
                deliver_subject = f"{self._inbox}.{name}"
                config = _own_config(
                    name, deliver_subject, filter_subjects, ack_wait_s or self._settings.ack_wait_s, self._settings
                )
                with self._refusals.asking_jetstream(f"opening consumer {name}", name):
                    info = await self._js.add_consumer(stream, config)
            elif self._inbox == INBOX and info.config.max_ack_pending != self._settings.max_ack_pending:
                with self._refusals.asking_jetstream(
                    f"updating consumer {name}'s limit of unacknowledged deliveries", name
                ):
                    info = await self._js.add_consumer(
                        stream, info.config.evolve(max_ack_pending=self._settings.max_ack_pending)
                    )
        except ConsumerInUseError:
            raise
        except BusError as exc:
            if self._inbox == INBOX:
                raise
            raise BusError(
                f"consumer {name} is not one the operator made for this identity, and only the operator makes"
                f" a worker's consumers ({exc}): start the system with `faultline up`, and a worker by hand only"
                " as an agent and shard its configuration names"
            ) from None
        delivered = info.delivered.consumer_seq if info.delivered else 0
        floor = info.ack_floor.stream_seq if info.ack_floor else 0
        last = info.delivered.stream_seq if info.delivered else 0
        fresh = not delivered and not info.num_ack_pending and floor == last
        if fresh:
            fresh = not await self._passed_any(filter_subjects, info.num_pending or 0)
        if not fresh:
            with self._refusals.asking_jetstream(f"resetting consumer {name} to its acknowledgement floor", name):
                info = (await self._js.reset_consumer(stream, name)).info
        assert info.config.deliver_subject is not None
        return await self._subscribe_to(name, info.config.deliver_subject, durable=True, info=info), fresh

    async def _passed_any(self, filter_subjects: Sequence[str], pending: int) -> bool:
        """Whether the stream holds more messages on `filter_subjects` than the `pending` a consumer has still to
        deliver: some lie at or below its floor. A reset numbers a consumer's deliveries from 0 again and clears
        what waited for acknowledgement, so one reset by a reader gone before its next delivery looks like one
        that never delivered; only these tell it apart (one made where such messages were stored already, or
        stored one while this looks, is taken for one that delivered: its reader recovers, which costs reads)."""
        stored = 0
        for subject in filter_subjects:
            reader = await self.open(None, [subject], start="all")
            try:
                stored += reader.pending_when_opened
            finally:
                await reader.close()
        return stored > pending

    async def _alone(self, name: str, rivals: Callable[[str], bool] | None) -> api.ConsumerInfo | None:
        """Consumer `name`'s state (None if there is none) once no other process reads it, nor, on an open server,
        one of the consumers `rivals` names. A reader stopped or killed a moment ago is one until its server has
        dropped it: that is waited for, up to `other_reader_wait_s`; ConsumerInUseError after."""
        deadline = anyio.current_time() + self._settings.other_reader_wait_s

        async def look() -> api.ConsumerInfo | None:
            info = await self._info(name)
            if info is not None and info.push_bound:
                raise ConsumerInUseError(f"consumer {name} has a reader already", name)
            if rivals is not None and self._inbox == INBOX:
                await self._check_rivals(name, rivals)
            return info

        async def refuse_when_late(exc: Exception) -> None:
            if anyio.current_time() >= deadline:
                raise exc
            log.debug("%s; asking again", exc)

        return await asked_again(
            look,
            first_s=RETRY_BACKOFF_S,
            max_s=RETRY_BACKOFF_MAX_S,
            retried=ConsumerInUseError,
            failed=refuse_when_late,
        )

    async def _check_rivals(self, name: str, rivals: Callable[[str], bool]) -> None:
        """ConsumerInUseError if another consumer of the same inputs (one `rivals` names: on an open server any
        process makes its own, so workers of two shard layouts would each make theirs) has a reader."""
        infos, _ = await self._listed(f"listing the consumers beside {name}")
        for info in infos:
            if info.push_bound and info.name != name and rivals(info.name):
                raise ConsumerInUseError(f"consumer {info.name} of the same inputs has a reader", info.name)

    async def acknowledging(self) -> list[ConsumerState]:
        """Every consumer of the stream that acknowledges what it is sent, as the server holds it now; BusError
        when a consumer's state is missing (its node of a cluster did not answer): a list without it is no list."""
        infos, missing = await self._listed(f"listing the consumers of stream {self._stream}")
        if missing:
            raise BusError(
                f"listing the consumers of stream {self._stream} failed: {', '.join(missing)} did not answer"
            )
        return [_state(info) for info in infos if info.config.ack_policy not in (None, api.AckPolicy.NONE)]

    async def _listed(self, what: str) -> tuple[list[api.ConsumerInfo], list[str]]:
        """The state of every consumer of the stream that answered, a page of the server's at a time, and the
        names of those that did not (a cluster's server lists a consumer whose leader does not answer as missing,
        which the client library's listing passes over)."""
        infos: list[api.ConsumerInfo] = []
        missing: list[str] = []
        offset = 0
        with self._refusals.asking_jetstream(what):
            while True:
                answer = await self._nc.request(
                    f"{JS_API}.CONSUMER.LIST.{self._stream}",
                    msgspec.json.encode({"offset": offset}),
                    timeout=JS_API_TIMEOUT_S,
                )
                page = msgspec.json.decode(answer.data, type=_ConsumerPage)
                if page.error is not None:
                    raise BusError(f"{what} failed: {page.error.get('description', page.error)}")
                infos.extend(api.ConsumerInfo.from_response(info) for info in page.consumers)
                missing.extend(page.missing)
                offset += len(page.consumers) + len(page.missing)
                if offset >= page.total or not (page.consumers or page.missing):
                    return infos, missing

    async def ensure(self, specs: Iterable[ConsumerSpec]) -> None:
        for spec in specs:
            info = await self._info(spec.name)
            config = _own_config(spec.name, spec.deliver_subject, spec.filters, spec.ack_wait_s, self._settings)
            if info is not None:
                now = info.config
                kept = (
                    now.filter_subject,
                    now.filter_subjects,
                    now.deliver_subject,
                    now.ack_wait,
                    now.idle_heartbeat,
                    now.max_ack_pending,
                )
                if kept == (
                    config.filter_subject,
                    config.filter_subjects,
                    config.deliver_subject,
                    config.ack_wait,
                    config.idle_heartbeat,
                    config.max_ack_pending,
                ):
                    continue
                config = now.evolve(
                    filter_subject=config.filter_subject,
                    filter_subjects=config.filter_subjects,
                    deliver_subject=config.deliver_subject,
                    ack_wait=config.ack_wait,
                    idle_heartbeat=config.idle_heartbeat,
                    max_ack_pending=config.max_ack_pending,
                )
            with self._refusals.asking_jetstream(f"making consumer {spec.name}", spec.name):
                await self._js.add_consumer(self._stream, config)

    async def ack_floor(self, name: str) -> int | None:
        info = await self._info(name)
        if info is None:
            return None
        return info.ack_floor.stream_seq if info.ack_floor else 0

    async def unacknowledged(self, name: str) -> int | None:
        info = await self._info(name)
        if info is None:
            return None
        return (info.num_pending or 0) + (info.num_ack_pending or 0)

    async def _info(self, name: str) -> api.ConsumerInfo | None:
        with self._refusals.asking_jetstream(f"asking for the state of consumer {name}", name):
            try:
                info: api.ConsumerInfo = await self._js.consumer_info(self._stream, name)
            except nats.js.errors.NotFoundError:
                return None
        return info

    async def _subscribe_to(
        self, name: str, deliver_subject: str, *, durable: bool, info: api.ConsumerInfo
    ) -> Consumer:
        """Subscribe to the deliveries of consumer `name`, which the server holds as `info`."""
        consumer = Consumer(
            self._nc,
            self._js,
            self._stream,
            name,
            deliver_subject,
            durable,
            info,
            pending_msgs_limit=self._settings.pending_msgs_limit,
        )
        await consumer._start()
        return consumer


def _state(info: api.ConsumerInfo) -> ConsumerState:
    config = info.config
    filters = config.filter_subjects or ([config.filter_subject] if config.filter_subject else [])
    floor = (info.ack_floor.stream_seq or 0) if info.ack_floor else 0
    return ConsumerState(name=info.name, filters=tuple(filters), ack_floor=floor)


def _filters(filter_subjects: Sequence[str]) -> dict[str, Any]:
    if len(filter_subjects) == 1:
        return {"filter_subject": filter_subjects[0]}
    return {"filter_subjects": list(filter_subjects) or None}


def _own_config(
    name: str, deliver_subject: str, filter_subjects: Sequence[str], ack_wait_s: float, settings: BusSettings
) -> api.ConsumerConfig:
    """A durable consumer a worker reads alone, acknowledging each delivery, from the next message on."""
    return api.ConsumerConfig(
        name=name,
        durable_name=name,
        deliver_subject=deliver_subject,
        deliver_policy=api.DeliverPolicy.NEW,
        ack_policy=api.AckPolicy.EXPLICIT,
        ack_wait=ack_wait_s,
        max_ack_pending=settings.max_ack_pending,
        idle_heartbeat=settings.idle_heartbeat_s,
        **_filters(filter_subjects),
    )


def _start_policy(start: StartAt) -> dict[str, Any]:
    if start == "all":
        return {"deliver_policy": api.DeliverPolicy.ALL}
    if start == "new":
        return {"deliver_policy": api.DeliverPolicy.NEW}
    return {"deliver_policy": api.DeliverPolicy.BY_START_SEQUENCE, "opt_start_seq": int(start)}
