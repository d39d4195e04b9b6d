"""One JetStream stream against several: what dividing Faultline's one stream would give nats-server.

Every message of a Faultline system is stored in one stream, by one nats-server (docs/scale.md). On 16 cores
that server was the one process above a core while the rest waited. This measures the stream alone, with no
Faultline process: `--publishers` processes publish `--messages` in all (each with a `Nats-Msg-Id`, as the bus
sends them, to subjects that name one of `--episodes` episodes and one of `--readers` partitions, as Faultline's
do). The partitions are spread over `--streams` streams; one reading process per partition reads it whole from
the stream that holds it and acknowledges, as a journal shard does. With `--nodes` above 1 the streams are kept
by that many nats-server processes, routed into a cluster (stream k on node k mod nodes).
For each count of nodes and streams: the rate from the first publish to the last message read, the CPU the
nats-servers and the publishers spent per message (utime + stime from /proc), and the busiest nats-server's share
of a core. Not a test; on 2 cores only the CPU per message says anything, on many cores the rate does too.

    python -m bench.streams [--streams 1,4] [--nodes 1,3] [--publishers 4] [--readers 4] [--messages 200000]
                            [--server-cores 0] [--json out.json]

Linux only (it reads /proc).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import nats
import nats.errors
import nats.js.errors
from nats.js import api
from rich.console import Console
from rich.table import Table

from bench._common import cpu_seconds, fail_after, int_list, machine
from faultline.bus import EmbeddedServer, free_port

BODY = b"x" * 300
"""About a message of a retail episode."""
WINDOW = 512
"""Publishes a publisher has unconfirmed at most, as a worker's outbox has a round of them."""
ACK_EVERY = 100
"""Deliveries a consumer acknowledges at once (its policy acknowledges all before the one it names)."""
CLUSTER_READY_S = 30.0
"""Longest a cluster may take to elect its JetStream leader and make a stream."""
READ_TIMEOUT_S = 120.0
"""Longest a partition may take to arrive whole before the measurement is given up."""
MAX_ACK_PENDING = 10_000
"""Deliveries a consumer has unacknowledged at most, as a journal shard's consumer does by default."""


def _subject(episode: int, readers: int) -> str:
    return f"bench.{episode % readers}.ep.e{episode}.agent"


def _stream_subjects(stream: int, streams: int, readers: int) -> list[str]:
    """The partitions a stream holds: those whose number leaves `stream` over the stream count."""
    return [f"bench.{k}.>" for k in range(readers) if k % streams == stream]


async def _publish(url: str, first: int, count: int, readers: int, episodes: int) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream(publish_async_max_pending=WINDOW)
    for n in range(first, first + count):
        await js.publish_async(_subject(n % episodes, readers), BODY, headers={"Nats-Msg-Id": f"m{n}"})
    await js.publish_async_completed()
    await nc.close()


def _publisher(url: str, first: int, count: int, readers: int, episodes: int, cpu: Any) -> None:
    """Publish its share, and tell the CPU that took (its start-up left out)."""
    started = time.process_time()
    anyio.run(_publish, url, first, count, readers, episodes)
    cpu.value = time.process_time() - started


async def _consume(url: str, partition: int, streams: int, expected: int) -> None:
    """Read one partition whole from the stream that holds it, with a consumer set as a journal shard's is."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    read = 0
    done = anyio.Event()

    async def take(msg: Any) -> None:
        nonlocal read
        read += 1
        if read % ACK_EVERY == 0 or read == expected:
            await msg.ack()
        if read == expected:
            done.set()

    config = api.ConsumerConfig(ack_policy=api.AckPolicy.ALL, max_ack_pending=MAX_ACK_PENDING)
    await js.subscribe(
        f"bench.{partition}.>",
        stream=f"BENCH_{partition % streams}",
        cb=take,
        manual_ack=True,
        config=config,
        pending_msgs_limit=1_000_000,
        pending_bytes_limit=-1,
    )
    with fail_after(READ_TIMEOUT_S, f"partition {partition} read whole", lambda: f"{read} of {expected}"):
        await done.wait()
    await nc.close()


def _reader(url: str, partition: int, streams: int, expected: int, finished: Any) -> None:
    anyio.run(_consume, url, partition, streams, expected)
    finished.value = time.time()


@contextlib.contextmanager
def _servers(nodes: int, cores: int, folder: Path) -> Iterator[list[EmbeddedServer]]:
    """One nats-server, or `nodes` routed into a cluster, each tagged with its name for stream placement."""
    if nodes == 1:
        with EmbeddedServer(cores=cores) as server:
            yield [server]
        return
    ports = [free_port("127.0.0.1") for _ in range(nodes)]
    routes = ",".join(f"nats://127.0.0.1:{port}" for port in ports)
    with contextlib.ExitStack() as stack:
        servers = []
        for i, port in enumerate(ports):
            config = folder / f"node{i}.conf"
            config.write_text(f'server_tags: ["node{i}"]\n')
            args = ("--server_name", f"node{i}", "--cluster_name", "bench", "--cluster", f"nats://127.0.0.1:{port}")
            node = EmbeddedServer(
                store_dir=folder / f"node{i}", config_file=config, cores=cores, extra_args=(*args, "--routes", routes)
            )
            servers.append(stack.enter_context(node))
        yield servers


async def _streams(url: str, streams: int, readers: int, nodes: int) -> None:
    """Make the streams, stream k on node k mod `nodes`; in a cluster, once it has elected its JetStream leader."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    for k in range(streams):
        config = api.StreamConfig(
            name=f"BENCH_{k}",
            subjects=_stream_subjects(k, streams, readers),
            storage=api.StorageType.FILE,
            duplicate_window=120.0,
            placement=api.Placement(tags=[f"node{k % nodes}"]) if nodes > 1 else None,
        )
        with fail_after(CLUSTER_READY_S, f"stream BENCH_{k} made"):
            while True:
                try:
                    await js.add_stream(config)
                    break
                except (nats.errors.Error, nats.js.errors.Error):
                    await anyio.sleep(0.2)  # no JetStream leader yet
    await nc.close()


def measure(
    streams: int, publishers: int, readers: int, messages: int, episodes: int, server_cores: int, nodes: int = 1
) -> dict[str, Any]:
    if readers % streams:
        raise SystemExit(f"--readers {readers} does not divide into {streams} streams")
    share = messages // publishers
    total = share * publishers
    numbers = [n % episodes for n in range(total)]
    expected = [sum(1 for e in numbers if e % readers == k) for k in range(readers)]
    with (
        tempfile.TemporaryDirectory(prefix="bench-streams-") as folder,
        _servers(nodes, server_cores, Path(folder)) as servers,
    ):
        urls = [server.url for server in servers]
        anyio.run(_streams, urls[0], streams, readers, nodes)
        context = multiprocessing.get_context("spawn")
        cpus = [context.Value("d", 0.0) for _ in range(publishers)]
        finished = [context.Value("d", 0.0) for _ in range(readers)]
        readers_ = [  # each on the node of its stream
            context.Process(target=_reader, args=(urls[k % streams % nodes], k, streams, expected[k], finished[k]))
            for k in range(readers)
        ]
        publishers_ = [
            context.Process(target=_publisher, args=(urls[i % nodes], i * share, share, readers, episodes, cpus[i]))
            for i in range(publishers)
        ]
        for proc in readers_:
            proc.start()
        pids = [server.pid for server in servers if server.pid is not None]
        before = [cpu_seconds(pid) for pid in pids]
        started = time.time()
        for proc in publishers_:
            proc.start()
        for proc in [*publishers_, *readers_]:
            proc.join()
        server_cpus = [cpu_seconds(pid) - was for pid, was in zip(pids, before, strict=True)]
    if any(proc.exitcode for proc in readers_):
        raise SystemExit(f"{streams} stream(s): a reader failed (its traceback is above)")
    seconds = max(value.value for value in finished) - started
    return {
        "streams": streams,
        "nodes": nodes,
        "readers": readers,
        "messages": total,
        "seconds": seconds,
        "messages_per_s": total / seconds,
        "server_us_per_message": sum(server_cpus) / total * 1e6,
        "busiest_server_pct": max(server_cpus) / seconds * 100,
        "publishers_us_per_message": sum(cpu.value for cpu in cpus) / total * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int_list, default=[1, 4], help="stream counts, comma-separated")
    parser.add_argument("--publishers", type=int, default=4, help="publishing processes")
    parser.add_argument("--readers", type=int, default=4, help="reading processes, one per partition (as shards)")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--episodes", type=int, default=5_000, help="episodes the subjects name")
    parser.add_argument("--server-cores", type=int, default=0, help="nats-server's cores (0: faultline's default)")
    parser.add_argument(
        "--nodes",
        type=int_list,
        default=[1],
        help="nats-server processes, comma-separated counts: more than 1 are routed into a cluster, stream k kept on"
        " node k mod NODES (each with --server-cores), so that no one server process does the work of every stream",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    console = Console()
    host = machine()
    console.print(f"[bold]machine[/]: {host['cpus']} CPUs, {host['platform']}, Python {host['python']}")
    rows = []
    for nodes in args.nodes:
        for streams in args.streams:
            row = measure(
                streams, args.publishers, args.readers, args.messages, args.episodes, args.server_cores, nodes
            )
            rows.append(row)
            console.print(
                f"{streams} stream(s) on {nodes} node(s): {row['messages_per_s']:,.0f} messages/s, nats-server"
                f" {row['server_us_per_message']:.1f} us and publishers {row['publishers_us_per_message']:.1f} us"
                f" of CPU per message; busiest nats-server {row['busiest_server_pct']:.0f}% of a core"
            )
    table = Table(
        title=f"{args.messages:,} messages from {args.publishers} publishers, read back whole by {args.readers}"
    )
    columns = ("nodes", "streams", "messages/s", "nats-server, us CPU/message", "busiest nats-server, % of a core")
    for column in (*columns, "publishers, us CPU/message"):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            str(row["nodes"]),
            str(row["streams"]),
            f"{row['messages_per_s']:,.0f}",
            f"{row['server_us_per_message']:.1f}",
            f"{row['busiest_server_pct']:.0f}",
            f"{row['publishers_us_per_message']:.1f}",
        )
    console.print(table)
    if args.json:
        args.json.write_text(json.dumps({"machine": host, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
