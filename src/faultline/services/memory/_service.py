"""The memory service: one entry per completed episode, and retrieval over `fl.svc.memory`.

Ingestion. A durable JetStream consumer (`memory`) reads `fl.ev.completed.*.*`
with one event in flight, so events are handled strictly in stream order and
none is missed across restarts (each start resumes right after the last
acknowledged event). For each event the service reads the
episode's subjects back from the stream (`fl.ep.<e>.*.*`, `fl.tp.<e>.*.*`,
`fl.rec.<e>.*`, `fl.ev.*.<e>.*`, one ordered read) and builds the entry with
`entry_from_episode`, the function `rebuild` applies to a journal file. The
event is acknowledged only after the entry is stored. Any failure (an
embeddings endpoint that is down, a model error, NATS trouble) is retried on
the same event with backoff, so no episode is lost and entries are added in
completion order; adding is idempotent by episode id.

Reflections are a projection of the journal too. A failed episode's
reflection comes from the memory extractor; on a preference task, every
episode's reflection is the extractor's summary of the user's preferences. The
offline extractor (`sim_reflection`, `sim_preferences`) is a pure function of
the journaled episode, so nothing more is recorded. A model extractor is asked once, and the exchange
is journaled before the entry is stored: a `Recording` (call "llm", index 0,
request digest, request and response) from sender `memory` on
`fl.rec.<episode>.memory`, whose id derives from the completed event's id.
`entry_from_episode` prefers a journaled reflection, so a retry, a restarted
service and `faultline memory rebuild` reuse it and never call a model again.
An episode whose run set `[memory] extractor = "off"` (recorded in its started
event) gets no reflection and no extractor call.

Retrieval requests (`RetrievalRequest`, msgpack) are answered with a
`RetrievalReply`, or `{"error": "..."}` when the request is malformed or
cannot be served; the service keeps serving either way. `fl.svc.memory_sync`
answers `{"until": seq}` once the completed events up to `seq` are handled
(see `wait_for_memory`). On stop the service first handles the completed
events the stream holds, within `drain_timeout_s`, as the journal catches up.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import msgspec

from faultline._errors import BusError, DecodeError, FaultlineError
from faultline.agents.memory import (
    MEMORY_SERVICE,
    SYNC_SERVICE,
    MemoryEntry,
    MemorySync,
    RetrievalReply,
    RetrievalRequest,
    SyncRequest,
)
from faultline.bus import Bus, Consumer, Delivery, Login, Message, Subscription
from faultline.core import Envelope, EpisodeCompleted, ModelBackend, Recording, encode
from faultline.envs import load_domain
from faultline.runtime import Config, connect, serve_until_signal, serving
from faultline.services._resume import resumed_consumer
from faultline.services.memory._configured import extractor_backend, open_memory
from faultline.services.memory._preference import MIN_ZERO_RATINGS, hidden_tools
from faultline.services.memory._projection import (
    EpisodeFacts,
    entry_from_facts,
    episode_facts,
    extraction_input,
    reflection_recording,
)
from faultline.services.memory._prompts import PromptSettings, extractor_request
from faultline.services.memory._store import MemoryStore

log = logging.getLogger(__name__)


class MemoryServiceSettings(msgspec.Struct, frozen=True, kw_only=True):
    """Every limit of the service.

    `ack_wait_s` is how long NATS waits before redelivering an event in hand
    (the service signals progress while it retries); `read_timeout_s` bounds
    the read of one episode from the stream; a failed event is retried after
    `retry_delay_s`, doubling up to `retry_delay_max_s`.
    """

    consumer: str = "memory"
    ack_wait_s: float = 600.0
    read_timeout_s: float = 10.0
    retry_delay_s: float = 0.5
    retry_delay_max_s: float = 30.0
    drain_timeout_s: float = 8.0
    sync_timeout_s: float = 60.0
    request_concurrency: int = 16
    min_zero_ratings: int = MIN_ZERO_RATINGS
    """0 ratings by one user that hide a tool from that user (`[memory] zero_ratings`)."""
    prompt: PromptSettings = PromptSettings()


_SAME_USER_POOL = 4
"""On a preference task, how many times `max_similar` entries are searched before keeping the user's own."""

_request_decoder = msgspec.msgpack.Decoder(RetrievalRequest)
_sync_decoder = msgspec.msgpack.Decoder(SyncRequest)


class MemoryService:
    """Runs until `stop()`; see the module docstring for what it promises.

    `extractor` is the model that writes reflections on failures; None means
    the offline extractor. The service owns `store` while it runs.
    """

    def __init__(
        self,
        bus: Bus,
        store: MemoryStore,
        *,
        extractor: ModelBackend | None = None,
        settings: MemoryServiceSettings | None = None,
    ) -> None:
        self.bus = bus
        self.store = store
        self.extractor = extractor
        self.settings = settings or MemoryServiceSettings()
        self.handled = 0
        self.added = 0
        self.failures = 0
        self.last_error = ""
        self.last_seq = 0
        self._consumer: Consumer | None = None
        self._stuck = False
        self._ready = anyio.Event()
        self._stopping = anyio.Event()
        self._progress = anyio.Event()

    # -- lifecycle --------------------------------------------------------------------------

    async def wait_ready(self) -> None:
        await self._ready.wait()

    def stop(self) -> None:
        self._stopping.set()

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Return once `condition()` holds; it is checked after every event handled or failed."""
        while not condition():
            progress = self._progress
            await progress.wait()

    async def run(self) -> None:
        s = self.bus.subjects
        consumer = await resumed_consumer(
            self.bus, self.settings.consumer, s.event("completed", "*"), ack_wait_s=self.settings.ack_wait_s
        )
        self._consumer = consumer
        subscriptions: list[Subscription] = []
        try:
            requests = await self.bus.subscribe(s.svc(MEMORY_SERVICE), queue=MEMORY_SERVICE)
            subscriptions.append(requests)
            syncs = await self.bus.subscribe(s.svc(SYNC_SERVICE))
            subscriptions.append(syncs)
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._ingest, consumer)
                tg.start_soon(self._serve, requests, self._on_request)
                tg.start_soon(self._serve, syncs, self._on_sync)
                self._ready.set()
                await self._stopping.wait()
                with anyio.move_on_after(self.settings.drain_timeout_s):
                    await self._caught_up()
                tg.cancel_scope.cancel()
        finally:
            for sub in subscriptions:
                await sub.unsubscribe()
            await consumer.close()

    # -- ingestion --------------------------------------------------------------------------

    async def ingest(self, completed: Envelope) -> MemoryEntry | None:
        """Write the entry of `completed`'s episode unless the store holds it; the entry, or None."""
        if completed.episode in self.store:
            return None
        envelopes = await read_episode(self.bus, completed.episode, self.settings.read_timeout_s)
        facts = episode_facts(envelopes)
        if facts is None:
            return None
        if facts.reflects and facts.reflection is None and self.extractor is not None:
            facts = msgspec.structs.replace(facts, reflection=await self._reflect(facts, self.extractor))
        entry = entry_from_facts(facts)
        if await self.store.add(entry):
            self.added += 1
        return entry

    async def _reflect(self, facts: EpisodeFacts, extractor: ModelBackend) -> Recording:
        """Ask the extractor model once (a critique, or on a preference task the user's preferences)
        and journal the exchange before anything is stored."""
        prompt = self.settings.prompt
        found = await self.store.search(facts.query, prompt.max_similar * _SAME_USER_POOL, domain=facts.domain)
        # Preferences are one user's: the preference extractor sees only that user's past requests.
        similar = [s.entry for s in found if not facts.preference or s.entry.user == facts.user]
        data = extraction_input(facts, similar=similar[: prompt.max_similar], tools=_domain_tools(facts.domain))
        request = extractor_request(data, prompt)
        response = await extractor.complete(request)
        envelope = reflection_recording(facts, request, response)
        await self.bus.publish(envelope)
        assert isinstance(envelope.body, Recording)
        return envelope.body

    async def _ingest(self, consumer: Consumer) -> None:
        while True:
            for delivery in await consumer.batch():
                if self._stuck:
                    return
                await self._handle(consumer, delivery)

    async def _handle(self, consumer: Consumer, delivery: Delivery) -> None:
        completed = _completed_event(delivery)
        attempt = 0
        while completed is not None:
            try:
                await self.ingest(completed)
                break
            except FaultlineError as exc:
                attempt += 1
                self.failures += 1
                self.last_error = f"episode {completed.episode}: {exc}"
                log.warning(
                    "memory: the entry of episode %s is not written yet (attempt %d, will retry): %s",
                    completed.episode,
                    attempt,
                    exc,
                    extra={"episode": completed.episode},
                )
                if self._stopping.is_set():
                    self._stuck = True  # left unacknowledged: the next start retries it
                    self._notify()
                    return
                self._notify()
                await consumer.in_progress(delivery)
                delay = min(self.settings.retry_delay_s * 2 ** (attempt - 1), self.settings.retry_delay_max_s)
                with anyio.move_on_after(delay):
                    await self._stopping.wait()
        await consumer.ack(delivery)
        await self.bus.flush()
        self.handled += 1
        self.last_seq = delivery.stream_seq
        self._notify()

    def _notify(self) -> None:
        self._progress.set()
        self._progress = anyio.Event()

    async def _caught_up(self, until: int | None = None) -> bool:
        """Wait until every completed event the stream holds (or up to `until`) is handled.

        False when an event keeps failing while the service stops.
        """
        while not self._stuck:
            progress = self._progress
            if until is not None and self.last_seq >= until:
                return True
            if await self._drained():
                return True
            await progress.wait()
        return False

    async def _drained(self) -> bool:
        """True when the consumer has nothing left to deliver and nothing unacknowledged."""
        assert self._consumer is not None
        try:
            return await self._consumer.settled()
        except BusError:
            return False  # NATS is away; the next event handled or failed asks again

    # -- requests ---------------------------------------------------------------------------

    async def answer(self, payload: bytes) -> bytes:
        """The encoded reply to one retrieval request: a `RetrievalReply` or `{"error": ...}`."""
        try:
            request = _request_decoder.decode(payload)
        except (msgspec.ValidationError, msgspec.DecodeError, FaultlineError) as exc:
            return encode({"error": f"malformed memory request: {exc}"})
        try:
            reply = await self.retrieve(request)
        except FaultlineError as exc:
            return encode({"error": f"{type(exc).__name__}: {exc}"})
        return encode(reply)

    async def retrieve(self, request: RetrievalRequest) -> RetrievalReply:
        domain = request.domain or None
        found = await self.store.retrieve(request.query, request.mode, domain=domain)
        hidden: set[str] = set()
        if request.user:
            entries = self.store.entries(domain=domain, user=request.user)
            hidden = hidden_tools(entries, min_zero_ratings=self.settings.min_zero_ratings)
        return RetrievalReply(
            entries=found.entries,
            n=found.n,
            reason=found.reason,
            peaks=found.peaks,
            candidates=found.candidates,
            hidden_tools=sorted(hidden),
        )

    async def _serve(self, sub: Subscription, handler: Callable[[Message], Awaitable[None]]) -> None:
        slots = anyio.Semaphore(self.settings.request_concurrency)
        async with anyio.create_task_group() as tg:
            async for msg in sub:
                await slots.acquire()
                tg.start_soon(self._answer_one, handler, msg, slots)

    async def _answer_one(
        self, handler: Callable[[Message], Awaitable[None]], msg: Message, slots: anyio.Semaphore
    ) -> None:
        try:
            await handler(msg)
        except Exception as exc:  # noqa: BLE001 - one bad request must not take the service down
            log.exception("memory: request on %s failed", msg.subject)
            if msg.reply:
                await msg.respond(encode({"error": f"internal error: {type(exc).__name__}: {exc}"}))
        finally:
            slots.release()

    async def _on_request(self, msg: Message) -> None:
        if msg.reply:
            await msg.respond(await self.answer(msg.data))

    async def _on_sync(self, msg: Message) -> None:
        try:
            until = _sync_decoder.decode(msg.data).until if msg.data else 0
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            await msg.respond(encode({"error": f"malformed sync request: {exc}"}))
            return
        caught_up = False
        with anyio.move_on_after(self.settings.sync_timeout_s):
            caught_up = await self._caught_up(until)
        state = MemorySync(
            caught_up=caught_up,
            last_seq=self.last_seq,
            entries=len(self.store),
            failures=self.failures,
            last_error=self.last_error,
        )
        await msg.respond(encode(state))


async def read_episode(bus: Bus, episode: str, timeout_s: float) -> list[Envelope]:
    """Every envelope of `episode` the stream holds, in stream order (undecodable ones left out)."""
    s = bus.subjects
    subjects = [s.direct(episode, "*"), s.topic(episode, "*"), s.rec(episode, "*"), s.event("*", episode)]
    return [env for _, env in await bus.read_envelopes(subjects, timeout_s)]


async def serve_memory(
    config: Config,
    url: str,
    prefix: str,
    name: str,
    store: str | Path | None = None,
    login: Login | None = None,
) -> None:
    """The `faultline memory serve` process: serve until SIGTERM/SIGINT, announced ready as `name`."""
    async with (
        serving(await connect(config, url, prefix=prefix, name=name, login=login)) as bus,
        open_memory(config.memory, store) as memory,
    ):
        extractor = extractor_backend(config)
        try:
            settings = MemoryServiceSettings(min_zero_ratings=config.memory.zero_ratings)
            service = MemoryService(bus, memory, extractor=extractor, settings=settings)
            await serve_until_signal(bus, name, service)
        finally:
            if extractor is not None:
                await extractor.aclose()


def _completed_event(delivery: Delivery) -> Envelope | None:
    try:
        env = delivery.envelope()
    except DecodeError:
        return None  # the journal service dead-letters it
    return env if isinstance(env.body, EpisodeCompleted) else None


def _domain_tools(domain: str) -> list[dict[str, Any]]:
    """The domain's tool schemas for the extractor; none when the domain cannot be loaded here."""
    try:
        return [spec.openai() for spec in load_domain(domain).tools()]
    except FaultlineError:
        return []
