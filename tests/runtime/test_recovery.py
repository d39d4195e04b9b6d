"""A restarted worker rebuilds an instance from the stream; a stream that does not answer for a while delays that.

Found by the chaos benchmark (seed 503 of `python -m bench.chaos --episodes 40`): a worker restarted
after a kill met a new instance while the stream's leader was lost; reading its history timed out and
the worker exited, and its restarts failed while the cluster elected, so its episodes stood still for
18 s. The read is asked for again until the stream answers.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager

import anyio

from faultline.bus import Bus, EmbeddedServer
from faultline.core import Envelope, Note
from faultline.runtime._recovery import load_history

PAUSED_WAIT_S = 30.0


class Warned(logging.Handler):
    """Set once the recovery module warns that it asks again."""

    def __init__(self) -> None:
        super().__init__()
        self.event = anyio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "asking again" in record.getMessage():
            self.event.set()


@contextmanager
def warned() -> Iterator[Warned]:
    handler = Warned()
    logger = logging.getLogger("faultline.bus._retry")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


async def test_a_history_the_stream_does_not_answer_for_is_asked_for_again(
    nats_server: EmbeddedServer, bus: Bus
) -> None:
    earlier = Envelope(id="in-1", episode="e1", sender="user", recipient="tool", body=Note(text="before the crash"))
    await bus.publish(earlier)
    pid = nats_server.pid
    assert pid is not None
    with warned() as handler:
        os.kill(pid, signal.SIGSTOP)  # answers nothing, as a cluster electing a leader
        try:
            async with anyio.create_task_group() as tg:

                async def resume() -> None:
                    with anyio.fail_after(PAUSED_WAIT_S):
                        await handler.event.wait()
                    os.kill(pid, signal.SIGCONT)

                tg.start_soon(resume)
                with anyio.fail_after(PAUSED_WAIT_S * 2):
                    history = await load_history(bus, "e1", "tool", (), outputs=True)
        finally:
            os.kill(pid, signal.SIGCONT)
    assert [env.id for _, env in history.inputs] == [earlier.id]
