"""A three-node NATS cluster on loopback loses its stream leader mid-run, and no episode.

The stream is kept on all three nodes (R3). The leader is killed (SIGKILL), or
paused (SIGSTOP) past the election timeout and resumed; the other two elect a
new one, publishes that were not confirmed meanwhile are sent again with the
same message ids, and clients of the lost node move to another. Every episode
must complete as it would have, the journal must hold each stored message once,
verify, and replay identically.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import nats.errors
import pytest

from faultline._errors import BusError
from faultline.api import RunPlan, RunResult, plan_episodes, run_plan, wait_for_journal
from faultline.bus import OPERATOR, Access, Bus, BusSettings, EmbeddedServer, Login, free_port
from faultline.cli import main
from faultline.journal import JournalReader, verify
from faultline.runtime import ProcessSpec, Supervisor, bus_settings, load_config, system_access, worker_identity
from tests.runtime.live import WORKER_AGENTS, retail

pytestmark = pytest.mark.slow

NODES = ("n1", "n2", "n3")
TASKS = 16
LOSE_AFTER = 4
"""Episodes completed before the leader is lost: the rest run through the loss."""
CLUSTER_READY_TIMEOUT_S = 30.0
ELECTION_TIMEOUT_S = 30.0

CONFIG = """
[nats]
replicas = 3
publish_timeout_s = 2.0
ping_interval_s = 1.0

[runtime]
ack_wait_s = 5.0
"""


@dataclass
class Cluster:
    nodes: dict[str, EmbeddedServer]

    @property
    def url(self) -> str:
        return ",".join(node.url for node in self.nodes.values())

    def pid(self, name: str) -> int:
        pid = self.nodes[name].pid
        assert pid is not None
        return pid


@asynccontextmanager
async def cluster(tmp_path: Path, access: Access) -> AsyncIterator[Cluster]:
    """Three nats-server processes routed to each other, with JetStream and the system's users."""
    routes = [f"nats://127.0.0.1:{free_port()}" for _ in NODES]
    with ExitStack() as stack:
        nodes = {}
        for name, route in zip(NODES, routes, strict=True):
            args = (
                "--server_name",
                name,
                "--cluster_name",
                "faultline",
                "--cluster",
                route,
                "--routes",
                ",".join(routes),
            )
            node = EmbeddedServer(store_dir=tmp_path / name, config_file=access.server_config, extra_args=args)
            nodes[name] = stack.enter_context(node)
        yield Cluster(nodes)


async def stream_ready(url: str, access: Access) -> None:
    """Wait until the cluster has a JetStream leader and the journal stream exists on three nodes."""
    bus = await Bus.connect(url, settings=BusSettings(replicas=3), login=Login(access.credential(OPERATOR)))
    try:
        with anyio.fail_after(CLUSTER_READY_TIMEOUT_S):
            while True:
                try:
                    await bus.ensure_stream()
                    return
                except BusError:
                    await anyio.sleep(0.2)  # no meta leader yet: asked again until the deadline
    finally:
        await bus.close()


async def stream_leader(bus: Bus, other_than: str = "") -> str:
    """The node leading the stream now; with `other_than`, wait until it is another node."""
    with anyio.fail_after(ELECTION_TIMEOUT_S):
        while True:
            try:
                info = await bus.js.stream_info(bus.subjects.stream)
            except (TimeoutError, nats.errors.Error):  # no leader yet, or our node is the lost one
                info = None
            if info is not None and info.cluster and info.cluster.leader not in (None, other_than):
                return str(info.cluster.leader)
            await anyio.sleep(0.2)


# After a pause, nats-py drops its socket to the stale node without closing it; the warning of that
# socket's collection is the client library's, and says nothing about the system.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("loss", ["SIGKILL", "SIGSTOP"])
async def test_losing_the_stream_leader_loses_no_episode(tmp_path: Path, loss: str) -> None:
    config = tmp_path / "faultline.toml"
    config.write_text(CONFIG)
    access = system_access(tmp_path / "credentials", load_config(config), {"main": WORKER_AGENTS}, "fl").prepare()
    journal = tmp_path / "journal.sqlite"
    plan = RunPlan(tasks=TASKS, run_id=f"lose-{loss}", concurrency=4)
    result = RunResult(plan_episodes(plan, retail()))
    lose = anyio.Event()

    def on_done(_episode: str, _done: object) -> None:
        if len(result.completed) + 1 >= LOSE_AFTER:
            lose.set()

    async with cluster(tmp_path, access) as nodes:
        await stream_ready(nodes.url, access)
        supervisor = Supervisor(
            journal_path=journal,
            workers=[ProcessSpec("worker", ("worker", "--agents", ",".join(WORKER_AGENTS)), worker_identity("main"))],
            nats_url=nodes.url,
            log_dir=tmp_path / "logs",
            extra_args=("--config", str(config)),
            access=access,
            bus_settings=bus_settings(load_config(config)),
        )
        async with supervisor.running():
            bus = supervisor.bus
            assert bus is not None
            async with anyio.create_task_group() as tg:

                async def lose_the_leader() -> None:
                    await lose.wait()
                    leader = await stream_leader(bus)
                    if loss == "SIGKILL":
                        os.kill(nodes.pid(leader), signal.SIGKILL)
                        await stream_leader(bus, other_than=leader)
                        return
                    os.kill(nodes.pid(leader), signal.SIGSTOP)
                    try:  # paused until the others elect a leader: longer than the election timeout
                        await stream_leader(bus, other_than=leader)
                    finally:
                        os.kill(nodes.pid(leader), signal.SIGCONT)

                tg.start_soon(lose_the_leader)
                await run_plan(bus, plan, result, on_done)
            assert lose.is_set()
            last_seq = await wait_for_journal(bus, timeout_s=60.0)
            stored = await bus.stream_state()

    assert {done.outcome for done in result.completed.values()} == {"success"}, result.completed
    assert len(result.completed) == TASKS
    with JournalReader(journal) as reader:
        rows = list(reader.rows())
    # None missing, none twice: the stream's sequences, in order. Messages still published while the system
    # stopped (after the journal had caught up) are journaled too, so the journal may go past `last_seq`.
    assert [r.stream_seq for r in rows] == list(range(1, len(rows) + 1))
    assert len(rows) >= stored.last_seq == stored.messages >= last_seq
    assert len({r.id for r in rows}) == len(rows)  # none stored twice
    assert verify(journal).ok
    assert main(["replay", str(journal)]) == 0
