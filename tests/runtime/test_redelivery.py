"""Inputs handled and acknowledged, whose acknowledgements nats-server had not written down when it was killed.

nats-server writes a durable consumer's state (delivered, acknowledged) to its store lazily, a fraction of a second
after it changes: a kill -9 in between leaves a state on disk older than what was acknowledged, and the restarted
server delivers those inputs again (docs/reliability.md). Found by an operator: after a kill -9 of the embedded
server of a `faultline up`, the next `up` handled about 1,000 inputs again, and the environment left `no_output`
markers after its episodes' completions. Past the stream's duplicate window an input handled again stores its
outputs a second time. These tests make that state with the real server (its consumer's state file put back as a
kill leaves it) and a short duplicate window, so that nothing is dropped as a duplicate that the runtime did not
keep from being sent.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from faultline._errors import BusError
from faultline.bus import Bus, BusSettings, EmbeddedServer
from faultline.core import (
    Agent,
    ChatMessage,
    Context,
    Envelope,
    EpisodeCompleted,
    LlmRequest,
    Note,
)
from faultline.runtime import Worker, WorkerSettings
from faultline.runtime._worker import consumer_name
from tests.runtime.toy import EchoBackend

pytestmark = pytest.mark.slow

WINDOW = BusSettings(duplicate_window_s=1.0, publish_retry_s=0.5)
"""A duplicate window short enough to wait out: the inputs come again past it, as after any stop longer than 120 s."""
WAIT_S = 30.0
NAME = consumer_name("tallier", 0, 1)


class Tallier(Agent):
    """An environment in small: asks its model and answers, takes a tally quietly, and completes at the end."""

    name = "tallier"
    completes = True

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        assert isinstance(msg.body, Note)
        if msg.body.text == "ask":
            reply = await ctx.llm(LlmRequest(role="tallier", messages=[ChatMessage(role="user", content="how many")]))
            ctx.send(msg.sender, Note(text=reply.content))
        elif msg.body.text == "end":
            ctx.emit(EpisodeCompleted(outcome="success", reward=1.0))


def inputs(episode: str) -> list[Envelope]:
    return [
        Envelope(id=f"{episode}-{text}", episode=episode, sender="feeder", recipient=Tallier.name, body=Note(text=text))
        for text in ("ask", "tally", "end")
    ]


def state_file(server: EmbeddedServer, bus: Bus) -> Path:
    """Where nats-server keeps the worker's consumer's state (delivered, acknowledged)."""
    assert server.store_dir is not None
    return server.store_dir / "jetstream" / "$G" / "streams" / bus.subjects.stream / "obs" / NAME / "o.dat"


@asynccontextmanager
async def connected(server: EmbeddedServer) -> AsyncIterator[Bus]:
    bus = await Bus.connect(server.url, settings=WINDOW)
    await bus.ensure_stream()
    try:
        yield bus
    finally:
        await bus.close()


async def settled(bus: Bus) -> None:
    """Until the worker's consumer has nothing left to deliver and nothing unacknowledged. A question the server does
    not answer in time, while it recovers its streams after a restart, is asked again."""
    with anyio.fail_after(WAIT_S):
        while True:
            try:
                if not await bus.unacknowledged(NAME):
                    return
            except BusError:
                pass
            await anyio.sleep(0.05)


async def serve_until_settled(bus: Bus, episodes: list[str], worker: Worker) -> None:
    """Serve until `episodes`' inputs, sent first, are handled and acknowledged."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        await worker.wait_ready()
        for episode in episodes:
            await bus.publish_all(inputs(episode))
        await settled(bus)
        worker.stop()


async def past_the_window(bus: Bus) -> None:
    """Until the stream takes a probe it took before for a new message: what was sent before is past the
    duplicate window, and would be stored again."""
    subject = bus.subjects.event("probe", "window")
    first = await bus.publish_raw(subject, b"probe", msg_id="probe")
    with anyio.fail_after(WAIT_S):
        while await bus.publish_raw(subject, b"probe", msg_id="probe") == first:
            await anyio.sleep(0.1)


async def stored(bus: Bus, episode: str) -> list[Envelope]:
    """What the stream holds of `episode`, in stream order."""
    s = bus.subjects
    subjects = [s.direct(episode, "*"), s.topic(episode, "*"), s.rec(episode, "*"), s.event("*", episode)]
    return [env for _, env in await bus.read_envelopes(subjects, 5.0)]


async def older_state(server: EmbeddedServer) -> tuple[Path, bytes]:
    """The worker's consumer's state file, and its content once an episode before is handled: its acknowledgements
    written down, those of what comes after not."""
    async with connected(server) as bus:
        await serve_until_settled(bus, ["before"], Worker(bus, [Tallier], backends=lambda role: EchoBackend()))
        state = state_file(server, bus)
    server.stop()  # written down, as nats-server does within a fraction of a second (docs/reliability.md)
    older = state.read_bytes()
    server.restart()
    return state, older


async def killed_with(server: EmbeddedServer, state: Path, older: bytes) -> None:
    """Kill -9 the server, leaving its consumer's state as it was before the last episode, and restart it."""
    assert server.pid is not None
    os.kill(server.pid, signal.SIGKILL)
    await anyio.to_thread.run_sync(server.wait)
    state.write_bytes(older)
    server.restart()


async def test_a_restarted_worker_takes_inputs_whose_acknowledgements_a_killed_server_lost_as_handled(
    nats_server: EmbeddedServer,
) -> None:
    """The next `faultline up` after a kill -9 of its server: a worker process started afresh."""
    state, older = await older_state(nats_server)
    async with connected(nats_server) as bus:
        await serve_until_settled(bus, ["ep"], Worker(bus, [Tallier], backends=lambda role: EchoBackend()))
        calls, floor, before = EchoBackend.calls, await bus.ack_floor(NAME), await stored(bus, "ep")
        await past_the_window(bus)
    await killed_with(nats_server, state, older)
    async with connected(nats_server) as bus:
        older_floor = await bus.ack_floor(NAME)
        assert older_floor is not None and floor is not None and older_floor < floor  # the server lost them
        worker = Worker(bus, [Tallier], backends=lambda role: EchoBackend())
        await serve_until_settled(bus, [], worker)
        after = await stored(bus, "ep")
    assert [(env.kind, env.id) for env in after] == [(env.kind, env.id) for env in before]  # nothing twice
    assert EchoBackend.calls == calls  # no model asked again
    # The last input that left evidence may have been cut off by a crash: it alone is handled again, and sends
    # only what the stream lacks (here nothing).
    assert worker.handled <= 1


async def test_a_worker_that_lived_on_takes_inputs_whose_acknowledgements_a_killed_server_lost_as_handled(
    nats_server: EmbeddedServer,
) -> None:
    """The supervisor restarted the server under a running worker, which had forgotten the episode (its
    instances linger `linger_s` after its completion)."""
    state, older = await older_state(nats_server)
    async with connected(nats_server) as bus:
        worker = Worker(bus, [Tallier], backends=lambda role: EchoBackend(), settings=WorkerSettings(linger_s=0))
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.run)
            await worker.wait_ready()
            await bus.publish_all(inputs("ep"))
            await settled(bus)
            with anyio.fail_after(WAIT_S):
                while "ep" in worker._instances:  # forgotten, as every episode is soon after its completion
                    await anyio.sleep(0.05)
            calls, handled, before = EchoBackend.calls, worker.handled, await stored(bus, "ep")
            await past_the_window(bus)
            await killed_with(nats_server, state, older)
            await settled(bus)  # the restarted server holds the inputs of "ep" as not delivered yet
            after = await stored(bus, "ep")
            worker.stop()
    assert [(env.kind, env.id) for env in after] == [(env.kind, env.id) for env in before]  # nothing twice
    assert EchoBackend.calls == calls  # no model asked again
    assert worker.handled - handled <= 1
