"""One JetStream stream against several: what dividing Faultline's one stream would give nats-server.

Every message of a Faultline system is stored in one stream, by one nats-server (docs/scale.md). On 16 cores
that server was the one process above a core while the rest waited. This measures the stream alone, with no
Faultline process: `--publishers` processes publish `--messages` in all (each with a `Nats-Msg-Id`, as the bus
sends them, to subjects that name one of `--episodes` episodes, as Faultline's do), spread over `--streams`
streams by episode; one consumer per stream reads its stream whole and acknowledges, as a journal shard does.
For each stream count: the rate from the first publish to the last message read, and the CPU nats-server and
the publishers spent per message (utime + stime from /proc). Not a test; on 2 cores only the CPU per message
says anything, on many cores the rate does too.

    python -m bench.streams [--streams 1,4] [--publishers 4] [--messages 200000] [--server-cores 0] [--json out.json]

Linux only (it reads /proc).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import time
from pathlib import Path
from typing import Any

import anyio
import nats
from nats.js import api
from rich.console import Console
from rich.table import Table

from bench._common import cpu_seconds, machine
from faultline.bus import EmbeddedServer

BODY = b"x" * 300
"""About a message of a retail episode."""
WINDOW = 512
"""Publishes a publisher has unconfirmed at most, as a worker's outbox has a round of them."""
ACK_EVERY = 100
"""Deliveries a consumer acknowledges at once (its policy acknowledges all before the one it names)."""


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",")]


def _subject(episode: int, streams: int) -> str:
    return f"bench.{episode % streams}.ep.e{episode}.agent"


async def _publish(url: str, first: int, count: int, streams: int, episodes: int) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream(publish_async_max_pending=WINDOW)
    for n in range(first, first + count):
        await js.publish_async(_subject(n % episodes, streams), BODY, headers={"Nats-Msg-Id": f"m{n}"})
    await js.publish_async_completed()
    await nc.close()


def _publisher(url: str, first: int, count: int, streams: int, episodes: int, cpu: Any) -> None:
    """Publish its share, and tell the CPU that took (its start-up left out)."""
    started = time.process_time()
    anyio.run(_publish, url, first, count, streams, episodes)
    cpu.value = time.process_time() - started


async def _consume(url: str, streams: int, total: int) -> float:
    """Read every stream whole; the time the last message was read."""
    nc = await nats.connect(url)
    js = nc.jetstream()
    read = 0
    done = anyio.Event()

    async def take(msg: Any) -> None:
        nonlocal read
        read += 1
        if read % ACK_EVERY == 0 or read == total:
            await msg.ack()
        if read == total:
            done.set()

    for k in range(streams):
        config = api.ConsumerConfig(ack_policy=api.AckPolicy.ALL, max_ack_pending=100_000)
        await js.subscribe(f"bench.{k}.>", stream=f"BENCH_{k}", cb=take, manual_ack=True, config=config)
    await done.wait()
    finished = time.perf_counter()
    await nc.close()
    return finished


async def _streams(url: str, streams: int) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    for k in range(streams):
        await js.add_stream(
            api.StreamConfig(
                name=f"BENCH_{k}",
                subjects=[f"bench.{k}.>"],
                storage=api.StorageType.FILE,
                duplicate_window=120.0,
            )
        )
    await nc.close()


def measure(streams: int, publishers: int, messages: int, episodes: int, server_cores: int) -> dict[str, Any]:
    with EmbeddedServer(cores=server_cores) as server:
        assert server.pid is not None
        anyio.run(_streams, server.url, streams)
        context = multiprocessing.get_context("spawn")
        share = messages // publishers
        cpus = [context.Value("d", 0.0) for _ in range(publishers)]
        procs = [
            context.Process(target=_publisher, args=(server.url, i * share, share, streams, episodes, cpus[i]))
            for i in range(publishers)
        ]
        server_before = cpu_seconds(server.pid)
        started = time.perf_counter()
        for proc in procs:
            proc.start()
        finished = anyio.run(_consume, server.url, streams, share * publishers)
        for proc in procs:
            proc.join()
        server_cpu = cpu_seconds(server.pid) - server_before
    total = share * publishers
    seconds = finished - started
    return {
        "streams": streams,
        "messages": total,
        "seconds": seconds,
        "messages_per_s": total / seconds,
        "server_us_per_message": server_cpu / total * 1e6,
        "publishers_us_per_message": sum(cpu.value for cpu in cpus) / total * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=_ints, default=[1, 4], help="stream counts, comma-separated")
    parser.add_argument("--publishers", type=int, default=4, help="publishing processes")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--episodes", type=int, default=5_000, help="episodes the subjects name")
    parser.add_argument("--server-cores", type=int, default=0, help="nats-server's cores (0: faultline's default)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    console = Console()
    host = machine()
    console.print(f"[bold]machine[/]: {host['cpus']} CPUs, {host['platform']}, Python {host['python']}")
    rows = []
    for streams in args.streams:
        row = measure(streams, args.publishers, args.messages, args.episodes, args.server_cores)
        rows.append(row)
        console.print(
            f"{streams} stream(s): {row['messages_per_s']:,.0f} messages/s, nats-server"
            f" {row['server_us_per_message']:.1f} us and publishers {row['publishers_us_per_message']:.1f} us"
            " of CPU per message"
        )
    table = Table(title=f"{args.messages:,} messages from {args.publishers} publishers, read back whole")
    for column in ("streams", "messages/s", "nats-server, us CPU/message", "publishers, us CPU/message"):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            str(row["streams"]),
            f"{row['messages_per_s']:,.0f}",
            f"{row['server_us_per_message']:.1f}",
            f"{row['publishers_us_per_message']:.1f}",
        )
    console.print(table)
    if args.json:
        args.json.write_text(json.dumps({"machine": host, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
