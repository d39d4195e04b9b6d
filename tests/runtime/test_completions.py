"""A run's completions are followed from where the stream stands when it begins: a run begun while the stream
cannot say (a cluster choosing its leaders) waits for it as a publish would, and says so when it gives up."""

from __future__ import annotations

import anyio
import pytest

from faultline._errors import BusError
from faultline.bus import Bus, BusSettings, EmbeddedServer, StreamState
from faultline.runtime import Completions

WAIT_S = 20.0


async def test_a_run_begun_while_the_stream_cannot_answer_waits_for_it(nats_server: EmbeddedServer) -> None:
    bus = await Bus.connect(nats_server.url)  # no stream yet: every question for its state fails, as with no leader
    failed = anyio.Event()
    asked = bus.stream_state

    async def stream_state() -> StreamState:
        try:
            return await asked()
        except BusError:
            failed.set()
            raise

    entered = anyio.Event()

    async def begin() -> None:
        async with Completions(bus):
            entered.set()

    try:
        with pytest.MonkeyPatch.context() as patch, anyio.fail_after(WAIT_S):
            patch.setattr(bus, "stream_state", stream_state)
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(begin)
                await failed.wait()
                assert not entered.is_set()
                await bus.ensure_stream()
                await entered.wait()
    finally:
        await bus.close()


async def test_a_run_gives_up_on_a_stream_that_never_answers_saying_which(nats_server: EmbeddedServer) -> None:
    bus = await Bus.connect(nats_server.url, settings=BusSettings(publish_retry_s=0.5))
    try:
        with anyio.fail_after(WAIT_S), pytest.raises(BusError, match=r"stream \S+ answered no request .* in 0.5s"):
            async with Completions(bus):
                pass
    finally:
        await bus.close()
