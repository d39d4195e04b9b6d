"""Finished episodes sent live to an OTLP/HTTP endpoint, as `faultline journal otel` would send them.

The journal service hands over the episodes whose completion it has just committed;
a task of their own reads each one back from the file and sends it from a worker
thread. The journal never waits for the endpoint: the queue is bounded, an episode
that finds it full is skipped with a warning, and a failed send is one warning.
`faultline journal otel` sends any episode again later (the ids are the same).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from faultline._errors import FaultlineError

QUEUE_LIMIT = 1_000
"""Finished episodes waiting to be sent; past this, new ones are skipped (and logged)."""
TIMEOUT_S = 10.0
"""How long one episode's send may take before it counts as failed."""
DRAIN_S = 10.0
"""On stop, how long the episodes still queued may take to go out."""

log = logging.getLogger(__name__)


class OtelStream:
    """Sends each episode named to `completed` to `endpoint`, in order, until closed."""

    def __init__(
        self, journal: str | Path, endpoint: str, headers: Mapping[str, str] | None = None, timeout_s: float = TIMEOUT_S
    ) -> None:
        self.journal = Path(journal)
        self.endpoint = endpoint
        self.headers = dict(headers or {})
        self.timeout_s = timeout_s
        self.sent = 0
        self.failed = 0
        self._send: MemoryObjectSendStream[str]
        self._receive: MemoryObjectReceiveStream[str]
        self._send, self._receive = anyio.create_memory_object_stream[str](QUEUE_LIMIT)
        self._done = anyio.Event()

    def completed(self, episodes: list[str]) -> None:
        """Queue these episodes (their completion is in the file); never blocks."""
        for episode in episodes:
            try:
                self._send.send_nowait(episode)
            except anyio.WouldBlock:
                log.warning("OTLP %s: %d episodes waiting already, %s not sent", self.endpoint, QUEUE_LIMIT, episode)
            except anyio.ClosedResourceError:
                return

    async def run(self) -> None:
        """Send the queued episodes until `close()` and the queue is empty."""
        try:
            async with self._receive:
                async for episode in self._receive:
                    try:
                        await anyio.to_thread.run_sync(self._export, episode, abandon_on_cancel=True)
                        self.sent += 1
                    except FaultlineError as exc:
                        self.failed += 1
                        log.warning("OTLP: episode %s not sent: %s", episode, exc)
        finally:
            self._done.set()

    async def close(self, drain_s: float = DRAIN_S) -> None:
        """No more episodes; wait up to `drain_s` for the queued ones to go out."""
        self._send.close()
        with anyio.move_on_after(drain_s):
            await self._done.wait()

    def _export(self, episode: str) -> None:
        from faultline.journal.otel import export_otel  # OpenTelemetry loads only when streaming

        export_otel(self.journal, self.endpoint, episodes=[episode], headers=self.headers, timeout_s=self.timeout_s)
