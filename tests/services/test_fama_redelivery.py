"""A failed episode's completion delivered again to the FAMA service past the duplicate window.

nats-server writes a durable consumer's state lazily, so a kill -9 loses the last fraction of a second of its
acknowledgements and the restarted server delivers those completions again (docs/reliability.md). The case of
each was sent before; past the duplicate window the stream would store it again, and the controller would
analyse it again and count it twice. The test recreates the service's consumer at the floor a kill leaves.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from faultline.bus import Bus, EmbeddedServer
from faultline.core import RUNNER, Envelope, EpisodeCompleted, EpisodeStarted, LlmRequest, LlmResponse
from faultline.runtime import FamaConfig, Worker
from faultline.runtime._worker import consumer_name
from faultline.runtime.models import SimBackend
from faultline.services.fama import CONTROLLER, FamaController, FamaService
from faultline.services.fama import _service as fama_service_module
from faultline.services.fama._service import CASES_CONSUMER
from tests.runtime.test_redelivery import WAIT_S, WINDOW, killed_with, past_the_window

pytestmark = pytest.mark.slow

EPISODE = "r1-cancel-00-t0"


class CountedBackend(SimBackend):
    """The sim judge, counting the controller's model calls."""

    calls = 0

    def respond(self, request: LlmRequest) -> LlmResponse:
        type(self).calls += 1
        return super().respond(request)


async def settled(bus: Bus) -> None:
    """Until the service has acknowledged every completion and the controller every case."""
    with anyio.fail_after(WAIT_S):
        while await bus.unacknowledged(CASES_CONSUMER) or await bus.unacknowledged(consumer_name(CONTROLLER, 0, 1)):
            await anyio.sleep(0.05)


def fama_service(bus: Bus) -> FamaService:
    return FamaService(bus, settings=FamaConfig(), worker=Worker(bus, [FamaController], lambda _: CountedBackend()))


@asynccontextmanager
async def serving(bus: Bus) -> AsyncIterator[FamaService]:
    """A FAMA service with its controller, once both have taken in what the stream holds; stopped after."""
    service = fama_service(bus)
    async with anyio.create_task_group() as tg:
        tg.start_soon(service.run)
        with anyio.fail_after(WAIT_S):
            await service.wait_ready()
        await settled(bus)
        yield service
        service.stop()


async def serve_until_settled(bus: Bus) -> FamaService:
    async with serving(bus) as service:
        return service


async def publish_failure(bus: Bus) -> int:
    """A failed episode; the stream sequence of its completion."""
    now = time.time()
    started = EpisodeStarted(domain="retail", task="cancel-00")
    await bus.publish(Envelope(id="started", episode=EPISODE, sender=RUNNER, body=started, ts=now))
    completed = EpisodeCompleted(outcome="failure", reward=0.0)
    await bus.publish(Envelope(id="completed", episode=EPISODE, sender="env", body=completed, ts=now))
    [completion] = await bus.read_stored([bus.subjects.event("completed", EPISODE)], 5.0)
    return completion.stream_seq


async def cases(bus: Bus) -> list[str]:
    """The ids of the cases the stream holds, in stream order."""
    return [env.id for _, env in await bus.read_envelopes([bus.subjects.direct("*", CONTROLLER, RUNNER)], 5.0)]


async def test_a_completion_delivered_again_past_the_duplicate_window_to_a_new_service_sends_its_case_once(
    nats_server: EmbeddedServer,
) -> None:
    bus = await Bus.connect(nats_server.url, settings=WINDOW)
    try:
        await bus.ensure_stream()
        s = bus.subjects
        seq = await publish_failure(bus)

        first = await serve_until_settled(bus)
        sent, calls = await cases(bus), CountedBackend.calls
        assert first.cases == 1 and len(sent) == 1 and calls > 0
        await past_the_window(bus)
        # The consumer's state as a kill -9 right after the acknowledgement leaves it: the completion unacknowledged.
        lost = await bus.consumer(
            CASES_CONSUMER, [s.event("completed", "*")], start=seq, max_ack_pending=1, replace=True
        )
        await lost.close()
        assert await bus.ack_floor(CASES_CONSUMER) == seq - 1

        again = await serve_until_settled(bus)
        assert await bus.ack_floor(CASES_CONSUMER) == seq  # delivered again, and acknowledged
        assert again.cases == 0
        assert await cases(bus) == sent  # stored once
        assert CountedBackend.calls == calls  # the controller asked its model once for it
    finally:
        await bus.close()


async def test_a_completion_delivered_again_past_the_duplicate_window_to_a_service_that_lived_on_sends_its_case_once(
    nats_server: EmbeddedServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The supervisor restarted the killed server under the running service, which had sent the case."""
    caplog.set_level(logging.INFO, logger=fama_service_module.__name__)
    async with await Bus.connect(nats_server.url, settings=WINDOW) as bus:
        await bus.ensure_stream()
        await serve_until_settled(bus)  # the service's consumer, nothing acknowledged yet
    assert nats_server.store_dir is not None
    state = nats_server.store_dir / "jetstream" / "$G" / "streams" / bus.subjects.stream / "obs" / CASES_CONSUMER
    nats_server.stop()  # its state written down, as nats-server does within a fraction of a second
    older = (state / "o.dat").read_bytes()
    nats_server.restart()
    bus = await Bus.connect(nats_server.url, settings=WINDOW)
    try:
        seq = await publish_failure(bus)
        async with serving(bus) as service:
            sent, calls = await cases(bus), CountedBackend.calls
            assert service.cases == 1 and len(sent) == 1 and calls > 0
            await past_the_window(bus)
            await killed_with(nats_server, state / "o.dat", older)
            with anyio.fail_after(WAIT_S):  # the server lost the acknowledgement, and delivers the completion again
                while "is in the stream already" not in caplog.text:
                    await anyio.sleep(0.01)
            await settled(bus)
        assert await bus.ack_floor(CASES_CONSUMER) == seq
        assert service.cases == 1
        assert await cases(bus) == sent
        assert CountedBackend.calls == calls
    finally:
        await bus.close()
