"""A handler that does its own network I/O breaks the determinism contract: replay must name it, never do it again."""

from __future__ import annotations

import asyncio
import socket
import socketserver
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from faultline.agent import Agent, Context, Envelope, Grade, InputRecord, Start, System
from faultline.bus import EmbeddedServer
from faultline.testing import run_system
from tests.replay.test_concurrent_calls import Unasked


class Fetcher(Agent):
    """Asks a server on the loopback for a word by itself, not through ctx, in the way its input's `how` names."""

    name = "fetcher"

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        if not isinstance(msg.body, Start):
            return
        port, how = msg.body.data["port"], msg.body.data["how"]
        if how == "asyncio":
            ctx.finish(await asyncio_fetch(port))
        elif how == "anyio":
            async with await anyio.connect_tcp("127.0.0.1", port) as stream:
                await stream.send(b"hello\n")
                ctx.finish((await stream.receive()).decode())
        else:  # "caught": the handler takes the refusal for a network that is down, and goes on
            try:
                word = await asyncio_fetch(port)
            except Exception:  # noqa: BLE001
                word = "offline"
            ctx.finish(word)


async def asyncio_fetch(port: int) -> str:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"hello\n")
    await writer.drain()
    word = await reader.readline()
    writer.close()
    await writer.wait_closed()
    return word.decode()


class Fetching(System):
    name = "fetching"
    agents = (Fetcher,)
    entry = "fetcher"
    finishers = ("fetcher",)
    needs = ("port", "how")

    def score(self, record: InputRecord, output: Any) -> Grade:
        return Grade(1.0)


class Server(socketserver.ThreadingTCPServer):
    """Answers each connection's line with a word, keeping the lines in the order connections came."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Answer)
        self.lines: list[str] = []
        self.heard = threading.Event()

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class _Answer(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        assert isinstance(self.server, Server)
        line = self.rfile.readline().decode().strip()
        self.server.lines.append(line)
        self.wfile.write(b"word\n")
        if line == "last":
            self.server.heard.set()


@pytest.fixture
def server() -> Iterator[Server]:
    with Server() as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield server
        server.shutdown()


def connections(server: Server) -> list[str]:
    """Every line the server was sent, a last connection's included: connections are accepted in the order they
    came, so once it has been heard every earlier one has been."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as last:
        last.sendall(b"last\n")
        last.recv(16)
    assert server.heard.wait(10)
    return server.lines


@pytest.mark.parametrize("how", ["asyncio", "anyio", "caught"])
async def test_a_handler_that_does_network_io_itself_diverges_in_replay_without_doing_it_again(
    how: str, server: Server, nats_server: EmbeddedServer, tmp_path: Path
) -> None:
    """Replay ran a handler that reached for the loop on one, where its connection ran again: the server was
    asked twice, and replay reported the episode identical."""
    run = await run_system(
        Fetching,
        [{"id": how, "port": server.port, "how": how}],
        nats_url=nats_server.url,
        journal=tmp_path / "j.sqlite",
        models=Unasked(),
    )
    assert run.outcome(how).outcome == "success"
    report = await anyio.to_thread.run_sync(run.replay)
    [divergence] = report.divergences
    assert (divergence.agent, divergence.input_kind) == ("fetcher", "start")
    start = next(m for m in run.messages(how) if isinstance(m.body, Start) and m.recipient == "fetcher")
    assert divergence.input_id == start.id
    assert divergence.what.startswith(
        f"agent 'fetcher' handling start {start.id} did I/O outside ctx (a connection to ('127.0.0.1', {server.port}))"
    )
    assert connections(server) == ["hello", "last"], "replay connected to the server again"
