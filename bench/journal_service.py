"""CPU the journal service spends per row: one journal against a set of shards, at a steady message rate.

For each `--shards` and `--rate`, starts a nats-server of its own and `faultline journal serve` processes (one
journal, or a set of that many shards, each filtered to its partitions as `faultline run` sets them up), then
publishes `--rate` messages a second for `--seconds` (assistant turns of about `--body-bytes` bytes, spread over
`--episodes` episodes) and waits until the journal holds them all. Reports the CPU all journal processes used from
their first answer (their start-up left out) to the last row, per row journaled and as cores while publishing.

This is the journal alone, with no workers beside it: what a shard costs per row against one journal, and how that
changes with the rate each shard is delivered. Not a test: run it by hand.

    python -m bench.journal_service [--shards 1,4] [--rate 2000,8000] [--seconds 10] [--trim-after-s S]
                                    [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.table import Table

from bench._common import cpu_seconds, int_list, machine
from bench.journal_append import make_batch
from faultline import BusError
from faultline.bus import Bus, BusSettings, EmbeddedServer
from faultline.runtime import ask_journal

TICK_S = 0.01
"""How often the publisher sends the messages due: `rate * TICK_S` at a time."""


def _serve(url: str, folder: Path, shard: int, shards: int, trim_after_s: float | None) -> subprocess.Popen[bytes]:
    target = folder / "journal.sqlite" if shards == 1 else folder / "journal"
    layout = [] if shards == 1 else ["--shards", str(shards), "--shard", str(shard), "--partitions", str(shards)]
    trim = [] if trim_after_s is None else ["--trim-after-s", f"{trim_after_s:g}"]
    return subprocess.Popen(
        [sys.executable, "-m", "faultline.cli", "journal", "serve", str(target), "--nats", url, *layout, *trim],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def _answering(bus: Bus, shards: int) -> None:
    """Wait until every shard answers: it is subscribed, and its consumer is open."""
    with anyio.fail_after(60):
        while True:
            try:
                state = await ask_journal(bus, 2.0)
            except BusError:  # no journal answers yet, or not every shard
                await anyio.sleep(0.1)
                continue
            if state.shards == shards:
                return


async def measure(
    shards: int, rate: int, seconds: float, body_bytes: int, episodes: int, trim_after_s: float | None = None
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        server = EmbeddedServer(store_dir=folder / "nats").start()
        services: list[subprocess.Popen[bytes]] = []
        try:
            settings = BusSettings(partitions=shards)
            bus = await Bus.connect(server.url, settings=settings, name="bench")
            try:
                await bus.ensure_stream()
                services = [_serve(server.url, folder, shard, shards, trim_after_s) for shard in range(shards)]
                await _answering(bus, shards)
                before = sum(cpu_seconds(p.pid) for p in services)
                per_tick = max(1, round(rate * TICK_S))
                ticks = math.ceil(seconds / TICK_S)
                envelopes = [row.envelope for row in make_batch(1, per_tick * ticks, body_bytes, episodes)]
                started = time.perf_counter()
                for tick in range(ticks):
                    await bus.publish_all(envelopes[tick * per_tick : (tick + 1) * per_tick])
                    await anyio.sleep(max(0.0, started + (tick + 1) * TICK_S - time.perf_counter()))
                published_s = time.perf_counter() - started
                last = (await bus.stream_state()).last_seq
                state = await ask_journal(bus, 120.0, until=last)
                lag_s = time.perf_counter() - started - published_s
                cpu = sum(cpu_seconds(p.pid) for p in services) - before
            finally:
                await bus.close()
        finally:
            for process in services:
                process.terminate()
            for process in services:
                process.wait(timeout=60)
            server.stop()
    return {
        "shards": shards,
        "rate": rate,
        "rows": state.rows,
        "published_per_s": len(envelopes) / published_s,
        "lag_s": lag_s,
        "cpu_s": cpu,
        "us_per_row": 1e6 * cpu / max(state.rows, 1),
        "cores": cpu / (published_s + lag_s),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shards", type=int_list, default=[1, 4], help="journal shards, comma-separated")
    parser.add_argument("--rate", type=int_list, default=[2000, 8000], help="messages a second, comma-separated")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--body-bytes", type=int, default=300)
    parser.add_argument("--episodes", type=int, default=512)
    parser.add_argument(
        "--trim-after-s",
        type=float,
        default=None,
        help="passed to `journal serve` (default: its own, [journal] trim_after_s; 0 leaves the stream untrimmed)",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    console = Console()
    rows = []
    for rate in args.rate:
        for shards in args.shards:
            with console.status(f"{shards} shard(s) at {rate:,} messages/s"):
                row = anyio.run(measure, shards, rate, args.seconds, args.body_bytes, args.episodes, args.trim_after_s)
                rows.append(row)
    table = Table(title="journal CPU per row (the journal alone, no workers)")
    for column in ("shards", "messages/s", "rows", "lag (s)", "CPU (s)", "us per row", "cores"):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            str(row["shards"]),
            f"{row['published_per_s']:,.0f}",
            f"{row['rows']:,}",
            f"{row['lag_s']:.2f}",
            f"{row['cpu_s']:.2f}",
            f"{row['us_per_row']:.0f}",
            f"{row['cores']:.2f}",
        )
    console.print(table)
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
