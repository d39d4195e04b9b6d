"""Episodes streamed live over OTLP/HTTP by the journal service, to a receiver the test runs."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from faultline.bus import Bus, EmbeddedServer
from faultline.cli._system import OTEL_HEADERS_ENV
from faultline.journal import JournalReader
from faultline.journal.otel import episode_spans
from faultline.runtime import OtelStream
from faultline.runtime._journal_service import JournalService
from tests.journal.conftest import episode_envelopes
from tests.journal.test_otel import Receiver


class Counting(Receiver):
    """A receiver that says when it has taken `wanted` requests."""

    def __init__(self, wanted: int) -> None:
        super().__init__()
        self.wanted = wanted
        self.done = threading.Event()

    def finish_request(self, request: Any, client_address: Any) -> None:
        super().finish_request(request, client_address)
        if len(self.headers) >= self.wanted:
            self.done.set()


@pytest.fixture
def receiver() -> Iterator[Counting]:
    server = Counting(wanted=2)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.slow
async def test_journal_serve_with_otel_sends_each_episode_once_it_completes(
    nats_server: EmbeddedServer, bus: Bus, receiver: Counting, tmp_path: Path
) -> None:
    path = tmp_path / "j.sqlite"
    command = [sys.executable, "-m", "faultline.cli", "journal", "serve", str(path), "--nats", nats_server.url]
    # Headers as `up --otel-header` hands them to its journal service: in the environment, not on a command line.
    env = {**os.environ, OTEL_HEADERS_ENV: "x-team=faults,authorization=Basic%20a2V5OnNlY3JldA%3D%3D"}
    process = subprocess.Popen([*command, "--otel", receiver.url], env=env)
    try:
        await bus.publish_all(episode_envelopes("ep-a") + episode_envelopes("ep-b", t0=1_767_226_000.0))
        assert await anyio.to_thread.run_sync(receiver.done.wait, 60), "both episodes arrive"
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    assert process.returncode == 0
    with JournalReader(path) as reader:
        expected = {
            span.context.span_id: span.name
            for episode, rows in reader.by_episode(["ep-a", "ep-b"])
            for span in episode_spans(episode, rows, str(path))
        }
    assert {int.from_bytes(s.span_id, "big"): s.name for s in receiver.spans} == expected
    assert all(h.get("x-team") == "faults" for h in receiver.headers)
    assert all(h.get("authorization") == "Basic a2V5OnNlY3JldA==" for h in receiver.headers)


async def test_an_endpoint_that_cannot_be_reached_is_logged_and_never_holds_the_journal_up(
    bus: Bus, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "j.sqlite"
    otel = OtelStream(path, "http://127.0.0.1:9/v1/traces", timeout_s=0.5)
    service = JournalService(bus, path, on_completed=otel.completed)
    envelopes = episode_envelopes("ep-a") + episode_envelopes("ep-b", t0=1_767_226_000.0)
    with caplog.at_level(logging.WARNING, logger="faultline.runtime._otel_stream"):
        async with anyio.create_task_group() as tg:
            tg.start_soon(otel.run)
            tg.start_soon(service.run)
            await service.wait_ready()
            await bus.publish_all(envelopes)
            with anyio.fail_after(20):
                await service.wait_for(len(envelopes))
            service.stop()
            await otel.close(drain_s=20)
    assert (otel.sent, otel.failed) == (0, 2)
    ours = [r.getMessage() for r in caplog.records if r.name == "faultline.runtime._otel_stream"]
    assert [m.split(": http")[0] for m in ours] == ["OTLP: episode ep-a not sent", "OTLP: episode ep-b not sent"]
    with JournalReader(path) as reader:
        assert reader.last_pos == len(envelopes)
