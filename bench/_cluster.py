"""A three-node JetStream cluster on loopback, as the cluster test and the chaos benchmark start it.

Each node is a real nats-server process with its own store, routed to the other two; the
journal stream is kept on all three (R3). A node can be restarted on its port and store.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import nats.errors

from bench._common import fail_after
from bench._proxy import Network
from faultline._errors import BusError
from faultline.bus import OPERATOR, Access, Bus, BusSettings, EmbeddedServer, Login

NODES = ("n1", "n2", "n3")
CLUSTER_READY_TIMEOUT_S = 30.0
ELECTION_TIMEOUT_S = 30.0
CATCH_UP_TIMEOUT_S = 60.0
"""How long a node back from a fault may take to catch up with the stream's leader: on a host loaded by the whole
test suite, one partitioned for 5.8 s was still behind after 30 s."""
POLL_S = 0.2
CLUSTER_CONFIG = """
[nats]
replicas = 3
publish_timeout_s = 2.0
ping_interval_s = 1.0
idle_heartbeat_s = 1.0

[runtime]
ack_wait_s = 5.0
"""
"""faultline.toml for a system on the cluster: the stream on all three nodes, short timeouts so a lost
leader is noticed within seconds."""
"""How often the cluster's state is asked again while waiting for it to change."""


ADVERTISED_ROUTE = "127.0.0.1:1"
"""What a node behind proxies tells the others its cluster address is: a port nothing listens on, so a node
that learns of a third one from a second never routes to it around the proxy (routes it has not been given
are tried once, and this one is refused)."""


@dataclass
class Cluster:
    nodes: dict[str, EmbeddedServer]
    network: Network | None = None
    """The links every route goes through, when the cluster was made with one."""

    @property
    def url(self) -> str:
        return ",".join(node.url for node in self.nodes.values())

    def pid(self, name: str) -> int:
        pid = self.nodes[name].pid
        assert pid is not None, f"node {name} is not running"
        return pid

    async def client_url(self, process: str) -> str:
        """The URLs by which `process` reaches the nodes: through a link of its own to each, when the cluster
        has a network (made on first asking), else straight to them."""
        if self.network is None:
            return self.url
        for name, node in self.nodes.items():
            if (process, name) not in self.network.links:
                await self.network.link(process, name, node.port)
        return self.network.urls(process, self.nodes)


@asynccontextmanager
async def cluster(tmp_path: Path, access: Access, network: Network | None = None) -> AsyncIterator[Cluster]:
    """Three nats-server processes routed to each other, with JetStream and the system's users.

    With `network`, node i reaches node j's cluster port only through the link i>j, and no node advertises
    an address that goes around the links, to the other nodes or to clients."""
    with ExitStack() as stack:
        held = {name: stack.enter_context(_held_port()) for name in NODES}
        ports = {name: int(sock.getsockname()[1]) for name, sock in held.items()}
        routes = {name: [f"nats://127.0.0.1:{ports[other]}" for other in NODES] for name in NODES}
        around: tuple[str, ...] = ()
        if network is not None:
            for name in NODES:
                links = [await network.link(name, other, ports[other]) for other in NODES if other != name]
                routes[name] = [link.url for link in links]
            around = ("--cluster_advertise", ADVERTISED_ROUTE, "--no_advertise=true")
        nodes = {}
        for name in NODES:
            args = (
                "--server_name",
                name,
                "--cluster_name",
                "faultline",
                "--cluster",
                f"nats://127.0.0.1:{ports[name]}",
                "--routes",
                ",".join(routes[name]),
                *around,
            )
            node = EmbeddedServer(store_dir=tmp_path / name, config_file=access.server_config, extra_args=args)
            held[name].close()
            nodes[name] = stack.enter_context(node)
        yield Cluster(nodes, network)


def _held_port() -> socket.socket:
    """A socket bound to a free loopback port, held until its node is started on the port: a port only chosen,
    not held, was taken meanwhile by whatever else asked the system for one (the links, the other nodes, other
    tests), and the node could not listen on it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    return sock


async def stream_ready(url: str, access: Access) -> None:
    """Wait until the cluster has a JetStream leader and the journal stream exists on three nodes."""
    bus = await Bus.connect(url, settings=BusSettings(replicas=3), login=Login(access.credential(OPERATOR)))
    try:
        with fail_after(CLUSTER_READY_TIMEOUT_S, "the cluster made no stream on three nodes"):
            while True:
                try:
                    await bus.ensure_stream()
                    return
                except BusError:
                    await anyio.sleep(POLL_S)  # no meta leader yet: asked again until the deadline
    finally:
        await bus.close()


async def stream_leader(bus: Bus, other_than: str = "") -> str:
    """The node leading the stream now; with `other_than`, wait until it is another node."""
    what = f"the stream had no leader{f' other than {other_than}' if other_than else ''}"
    with fail_after(ELECTION_TIMEOUT_S, what):
        while True:
            try:
                info = await bus.js.stream_info(bus.subjects.stream)
            except (TimeoutError, nats.errors.Error):  # no leader yet, or our node is the lost one
                info = None
            if info is not None and info.cluster and info.cluster.leader not in (None, other_than):
                return str(info.cluster.leader)
            await anyio.sleep(POLL_S)


async def replicas_current(bus: Bus, timeout_s: float = CATCH_UP_TIMEOUT_S) -> str:
    """Wait until the stream has a leader and both its followers are online and current; return the leader.

    A node back from a kill or a pause catches up with the leader first: until then a second loss
    would leave the stream without a majority.
    """
    seen = "no answer"
    with fail_after(timeout_s, "the stream's replicas were not current", lambda: seen):
        while True:
            try:
                info = await bus.js.stream_info(bus.subjects.stream)
            except (TimeoutError, nats.errors.Error) as exc:
                info, seen = None, f"no answer ({type(exc).__name__})"
            cluster = info.cluster if info is not None else None
            if cluster is not None:
                replicas = ", ".join(
                    f"{r.name} {'offline' if r.offline else 'current' if r.current else 'behind'}"
                    for r in cluster.replicas or []
                )
                seen = f"leader {cluster.leader or 'none'}; {replicas or 'no followers'}"
            if cluster is not None and cluster.leader:
                followers = cluster.replicas or []
                if len(followers) == len(NODES) - 1 and all(r.current and not r.offline for r in followers):
                    return str(cluster.leader)
            await anyio.sleep(POLL_S)
