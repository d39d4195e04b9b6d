"""The nemesis's proxy: a link passes bytes both ways, a cut drops live connections and refuses new ones until
healed, a delay holds chunks without ever reordering one connection's bytes, a one-way hold keeps the bytes
headed to one end, and only those, until healed, and a black hole keeps both ways silent."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
from anyio.abc import SocketAttribute, SocketStream

from bench._proxy import HOST, Link, Network, network

WAIT_S = 10.0
SILENT_S = 0.3
"""How long a test listens for what must not come (what must come, it waits WAIT_S for)."""


async def _echo(stream: SocketStream) -> None:
    async with stream:
        try:
            async for chunk in stream:
                await stream.send(chunk)
        except (anyio.BrokenResourceError, OSError):
            pass


@asynccontextmanager
async def echo_link() -> AsyncIterator[Link]:
    """A link from `client` to an echo server on a real loopback port (a block, not a fixture: its task groups
    are entered and left in the test's own task)."""
    listener = await anyio.create_tcp_listener(local_host=HOST)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, _echo)
        async with network(seed=3) as net:
            yield await net.link("client", "echo", listener.extra(SocketAttribute.local_port))
        tg.cancel_scope.cancel()


async def _roundtrip(stream: SocketStream, data: bytes) -> bytes:
    await stream.send(data)
    got = b""
    while len(got) < len(data):
        got += await stream.receive()
    return got


async def _refused(link: Link) -> bool:
    """Whether a connection through `link` is dropped before it carries a byte."""
    try:
        async with await anyio.connect_tcp(HOST, link.port) as stream:
            await stream.send(b"ping")
            await stream.receive()
    except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
        return True
    return False


async def test_a_link_passes_bytes_both_ways() -> None:
    async with echo_link() as link:
        await _a_link_passes_bytes_both_ways(link)


async def _a_link_passes_bytes_both_ways(link: Link) -> None:
    with anyio.fail_after(WAIT_S):
        async with await anyio.connect_tcp(HOST, link.port) as stream:
            assert await _roundtrip(stream, b"hello") == b"hello"
            assert link.live == 1 and link.connections == 1


async def test_a_cut_drops_live_connections_and_refuses_new_ones_until_healed() -> None:
    async with echo_link() as link:
        await _a_cut_drops_live_connections_and_refuses_new_ones_until_healed(link)


async def _a_cut_drops_live_connections_and_refuses_new_ones_until_healed(link: Link) -> None:
    with anyio.fail_after(WAIT_S):
        async with await anyio.connect_tcp(HOST, link.port) as stream:
            assert await _roundtrip(stream, b"before") == b"before"
            link.partition()
            with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError, ConnectionError)):
                await stream.receive()
        assert await _refused(link)
        assert link.live == 0 and link.connections == 1
        link.heal()
        async with await anyio.connect_tcp(HOST, link.port) as stream:
            assert await _roundtrip(stream, b"after") == b"after"
        assert link.connections == 2


async def test_a_link_to_a_target_that_is_down_refuses() -> None:
    """The target's port is bound and never listened on, so it refuses, and no other process can take it
    meanwhile (a port closed after use could be another test's server by the time the link connects)."""
    with socket.socket() as down:
        down.bind((HOST, 0))
        async with network() as net:
            with anyio.fail_after(WAIT_S):
                assert await _refused(await net.link("client", "gone", down.getsockname()[1]))


async def test_a_delay_holds_chunks_and_keeps_one_connections_order() -> None:
    async with echo_link() as link:
        await _a_delay_holds_chunks_and_keeps_one_connections_order(link)


async def _a_delay_holds_chunks_and_keeps_one_connections_order(link: Link) -> None:
    link.delay(0.02)
    writes = [f"{i:04d};".encode() for i in range(200)]
    with anyio.fail_after(WAIT_S):
        async with await anyio.connect_tcp(HOST, link.port) as stream:
            began = anyio.current_time()
            assert await _roundtrip(stream, b"first") == b"first"
            held = anyio.current_time() - began
            for data in writes:  # sent without waiting: each chunk drawn its own hold, none overtakes
                await stream.send(data)
            link.heal()  # chunks held still arrive after the ones before them
            got = b""
            while len(got) < len(b"".join(writes)):
                got += await stream.receive()
    assert got == b"".join(writes)
    assert held > 0.0 and link.latency_s == 0.0


async def test_a_one_way_hold_keeps_what_goes_to_one_end_until_healed_and_lets_the_other_way_pass() -> None:
    heard: list[bytes] = []
    arrived = anyio.Event()

    async def shout(stream: SocketStream) -> None:  # answers each chunk, in capitals, and says it heard it
        nonlocal arrived
        async with stream:
            async for chunk in stream:
                heard.append(chunk)
                await stream.send(chunk.upper())
                arrived.set()

    listener = await anyio.create_tcp_listener(local_host=HOST)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, shout)
        async with network(seed=3) as net:
            link = await net.link("client", "server", listener.extra(SocketAttribute.local_port))
            with pytest.raises(ValueError, match="neither end"):
                link.hold("n9")
            link.hold("client")
            # a plain socket, read without waiting: an event loop's would take in what arrives unseen
            with socket.create_connection((HOST, link.port), timeout=WAIT_S) as client, anyio.fail_after(WAIT_S):
                for word in (b"one;", b"two;"):
                    arrived = anyio.Event()
                    client.sendall(word)
                    await arrived.wait()  # the way to the server passes, and it has answered
                client.setblocking(False)
                with pytest.raises(BlockingIOError):  # the answers wait in the proxy, not on the way
                    client.recv(64)
                client.settimeout(WAIT_S)
                link.heal()
                got = b""
                while len(got) < len(b"ONE;TWO;"):
                    got += await anyio.to_thread.run_sync(client.recv, 64)
        tg.cancel_scope.cancel()
    assert heard and b"".join(heard) == b"one;two;"
    assert got == b"ONE;TWO;" and link.connections == 1 and not link.held


async def test_a_black_hole_takes_connections_and_passes_nothing_either_way_until_healed() -> None:
    heard = anyio.Event()

    async def shout(stream: SocketStream) -> None:
        async with stream:
            async for chunk in stream:
                heard.set()
                await stream.send(chunk.upper())

    listener = await anyio.create_tcp_listener(local_host=HOST)
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, shout)
        async with network(seed=3) as net:
            link = await net.link("client", "server", listener.extra(SocketAttribute.local_port))
            link.hold("client", "server")
            with anyio.fail_after(WAIT_S):
                async with await anyio.connect_tcp(HOST, link.port) as client:  # taken, though nothing passes
                    await client.send(b"one;")
                    with anyio.move_on_after(SILENT_S):
                        await heard.wait()
                    assert not heard.is_set() and link.live == 1
                    link.heal()
                    assert await client.receive() == b"ONE;"
        tg.cancel_scope.cancel()
    assert heard.is_set() and link.connections == 1 and not link.held


async def test_links_are_found_by_the_name_at_either_end() -> None:
    async with network() as net:
        a = await net.link("w", "n1", 1)
        b = await net.link("n2", "n1", 1)
        c = await net.link("n2", "n3", 1)
        assert net.touching("n1") == [a, b] and net.touching("n3") == [c]
        assert net.urls("n2", ["n1", "n3"]) == f"{b.url},{c.url}"
        assert isinstance(net, Network)
