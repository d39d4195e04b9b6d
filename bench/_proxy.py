"""A TCP proxy on loopback that the nemesis steers: one listening port per link, source to target.

A link passes bytes both ways between whoever connects to it and its target port. The nemesis can
cut it (a partition: live connections are closed and new ones refused, until it is healed), delay
it (each chunk read is held a time drawn uniformly in [0, latency_s] before it is written on), or
hold one direction (a one-way partition: the bytes headed to one end wait, every connection stays
open and the other direction flows, until it is healed and they are written on in order, as TCP
would deliver them once its path returned; a side that gives up on its connection first ends it, and
what was held for it is lost with it), or hold both (a black hole: nothing passes and nothing says so,
new connections are taken and stay silent). Delays
never reorder bytes within one connection: a chunk is written no sooner than the one before it, as
TCP would. Across connections they may: data sent later on one connection can arrive before data sent
earlier on another. So a delay reorders messages only where the system has two paths (two route
connections of a pool, a reconnect, a redelivery), never by rewriting a stream.
"""

from __future__ import annotations

import math
import random
import socket
import struct
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
from anyio.abc import SocketAttribute, SocketStream, TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream

HOST = "127.0.0.1"


@dataclass(eq=False)
class Link:
    """One link of the network: connections to `port` are carried to `target_port`, as the link's state says."""

    source: str
    target: str
    target_port: int
    port: int = 0
    seed: int = 0
    cut: bool = False
    """Partitioned: no connection passes."""
    latency_s: float = 0.0
    """The most each chunk is held while the link is delayed; 0 passes chunks on at once."""
    held: frozenset[str] = frozenset()
    """The ends (`source`, `target` or both) whose incoming bytes wait until `heal()`."""
    connections: int = 0
    """Connections carried since the link was made (refused ones are not counted)."""
    _live: set[anyio.CancelScope] = field(default_factory=set)
    _dropped: set[anyio.CancelScope] = field(default_factory=set)
    _rng: random.Random = field(init=False)
    _released: anyio.Event = field(default_factory=anyio.Event)

    def __post_init__(self) -> None:
        self._rng = random.Random(f"{self.seed}:{self.source}>{self.target}")
        self._released.set()

    @property
    def name(self) -> str:
        return f"{self.source}>{self.target}"

    @property
    def url(self) -> str:
        return f"nats://{HOST}:{self.port}"

    @property
    def live(self) -> int:
        """Connections open through the link now."""
        return len(self._live)

    def partition(self) -> None:
        """Close every connection through the link and refuse new ones until `heal()`."""
        self.cut = True
        for scope in list(self._live):
            self._dropped.add(scope)
            scope.cancel()

    def delay(self, latency_s: float) -> None:
        self.latency_s = latency_s

    def hold(self, *towards: str) -> None:
        """Hold the bytes headed to `towards` (this link's source, target, or both: a black hole) until
        `heal()`, connections open."""
        for end in towards:
            if end not in (self.source, self.target):
                raise ValueError(f"{end!r} is neither end of the link {self.name}")
        self.held = frozenset(towards)
        if self._released.is_set():  # those waiting on an earlier hold wait on with the new one
            self._released = anyio.Event()

    def heal(self) -> None:
        """Pass again, at once: chunks already held are still written in their order."""
        self.cut, self.latency_s, self.held = False, 0.0, frozenset()
        self._released.set()

    def _refusing(self) -> bool:
        return self.cut

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        listener = await anyio.create_tcp_listener(local_host=HOST, local_port=self.port)
        self.port = listener.extra(SocketAttribute.local_port)
        task_status.started()
        async with listener:
            await listener.serve(self._carry)

    async def _carry(self, client: SocketStream) -> None:
        async with client:
            if self.cut:
                _reset(client)
                return
            try:
                server = await anyio.connect_tcp(HOST, self.target_port)
            except OSError:  # the target is down: refused, as it would be without the proxy
                _reset(client)
                return
            if self._refusing():  # cut while it connected
                _reset(server)
                await server.aclose()
                _reset(client)
                return
            scope = anyio.CancelScope()
            self._live.add(scope)
            self.connections += 1
            try:
                async with server:
                    with scope:
                        async with anyio.create_task_group() as tg:
                            tg.start_soon(self._pipe, client, server, scope, self.target)
                            tg.start_soon(self._pipe, server, client, scope, self.source)
                    if scope in self._dropped:  # not ended by either side: no goodbye
                        _reset(client)
                        _reset(server)
            finally:
                self._live.discard(scope)
                self._dropped.discard(scope)

    async def _pipe(
        self, source: SocketStream, sink: SocketStream, connection: anyio.CancelScope, towards: str
    ) -> None:
        """Carry `source`'s bytes to `sink` (the end `towards`), each chunk no sooner than its drawn time nor the
        chunk before it, nor while that end's bytes are held; when either side ends, the connection ends."""
        send, receive = anyio.create_memory_object_stream[tuple[float, bytes]](math.inf)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._deliver, receive, sink, towards)
                async with send:
                    due = 0.0
                    async for chunk in source:
                        held = self._rng.uniform(0.0, self.latency_s) if self.latency_s else 0.0
                        due = max(due, anyio.current_time() + held)
                        await send.send((due, chunk))
        except* (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass  # either side went away: the connection ends
        finally:
            connection.cancel()

    async def _deliver(
        self, receive: MemoryObjectReceiveStream[tuple[float, bytes]], sink: SocketStream, towards: str
    ) -> None:
        async with receive:
            async for due, chunk in receive:
                await anyio.sleep_until(due)
                while towards in self.held:
                    await self._released.wait()
                await sink.send(chunk)


def _reset(stream: SocketStream) -> None:
    """Close with a reset (SO_LINGER 0) when the stream is closed: a peer sees its connection refused or
    dropped, not ended."""
    sock = stream.extra(SocketAttribute.raw_socket)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass


@dataclass
class Network:
    """The links of a system, by source and target, served by one task group."""

    seed: int
    tg: TaskGroup
    links: dict[tuple[str, str], Link] = field(default_factory=dict)
    _serving: list[anyio.CancelScope] = field(default_factory=list)

    async def link(self, source: str, target: str, target_port: int, port: int = 0) -> Link:
        """A link from `source` to `target`, listening on `port` (0: any free port) and serving now."""
        made = Link(source, target, target_port, port=port, seed=self.seed)
        await self.tg.start(self._serve, made)
        self.links[source, target] = made
        return made

    async def _serve(self, link: Link, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve `link` until `close`, shielded from the cancelling of the block that uses the network (a stop
        signal): what runs over the links still stops in that block's `finally` clauses, and needs them then."""
        with anyio.CancelScope(shield=True) as scope:
            self._serving.append(scope)
            await link.serve(task_status=task_status)

    def close(self) -> None:
        for scope in self._serving:
            scope.cancel()

    def touching(self, name: str) -> list[Link]:
        """Every link from or to `name`."""
        return [link for (source, target), link in self.links.items() if name in (source, target)]

    def urls(self, source: str, targets: Iterable[str]) -> str:
        """The comma-separated URLs by which `source` reaches `targets`."""
        return ",".join(self.links[source, target].url for target in targets)


@asynccontextmanager
async def network(seed: int = 0) -> AsyncIterator[Network]:
    """A network whose links serve until the block ends, however it ends."""
    async with anyio.create_task_group() as tg:
        made = Network(seed, tg)
        try:
            yield made
        finally:
            made.close()
