"""Runtime latency: one agent-to-agent hop through two worker processes, against raw NATS.

The system runs as in production: `Supervisor` starts nats-server, the journal
service and two worker processes (`faultline worker --agents bench.agents:...`).
Worker A holds `Ping`, `Ring0`, `Ring2`; worker B holds `Pong`, `Ring1`, `Ring3`,
so every hop crosses from one process to the other. Measured:

- per-hop latency of a long ping-pong episode (`--rounds` round trips). A hop
  is the time from the moment an agent creates a message (`ctx.send` stamps
  its `ts`) to the moment the receiving agent creates its answer: publish,
  store, delivery, dispatch and handling. Taken from the journal rows' `ts`
  deltas between each message and its cause; p50/p99. Cross-checked from
  outside as (episode wall time / rounds) / 2;
- raw nats-py core request/reply round trip to a responder in another
  process, same payload size, in the same run; p50/p99. For reference also a
  raw JetStream round trip to the same process (publish, push delivery,
  publish back, push delivery; acks awaited as the bus does): half of it is
  the least a hop through JetStream costs here;
- messages/s of a 4-agent ring passing a token, `--episodes` at once;
- resident memory (VmRSS) of each worker process, idle after start and idle
  again after the traffic.

Targets: p50 hop < 2x the raw round trip p50; an idle worker < 80 MB RSS.

    python -m bench.runtime_latency --json runtime_latency.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import msgspec
import nats
import nats.errors
from nats.aio.msg import Msg
from nats.js import api
from rich.console import Console
from rich.table import Table

from bench._common import cpu_seconds, machine
from faultline.bus import Bus
from faultline.core import Envelope, EpisodeStarted, Note, Start, derive_id, encode
from faultline.journal import JournalReader
from faultline.runtime import Completions, ProcessSpec, Supervisor, start_episode

ROOT = Path(__file__).resolve().parent.parent
ECHO_SUBJECT = "bench.echo"
JS_STREAM = "BENCH_ECHO"
JS_SUBJECTS = "bench.js.>"
JS_REQUEST = "bench.js.request"
JS_REPLY = "bench.js.reply"
REQUEST_TIMEOUT_S = 5.0
BLOCKS = 4
PING, PONG, RING_FIRST = "bench_ping", "bench_pong", "bench_ring0"
COMPLETERS = (PING, RING_FIRST, "bench_ring1", "bench_ring2", "bench_ring3")
"""The agents that complete episodes (`completes = True`): Ping and every ring member."""
"""Names of the agents in `bench/agents.py`, addressed over the bus like any client would."""
WORKER_A = ("bench.agents:Ping", "bench.agents:Ring0", "bench.agents:Ring2")
WORKER_B = ("bench.agents:Pong", "bench.agents:Ring1", "bench.agents:Ring3")
EPISODE_TIMEOUT_S = 120.0
SETTLE_S = 1.0
JOURNAL_REPLY_TIMEOUT_S = 60.0


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile, q in [0, 100]."""
    ranked = sorted(values)
    return ranked[min(len(ranked) - 1, max(0, round(q / 100 * len(ranked)) - 1))]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def hop_envelope(rounds: int) -> Envelope:
    """An envelope like those of the ping-pong episode, so raw round trips carry as many bytes."""
    return Envelope(
        id=derive_id("pingpong", 1),
        episode="pingpong",
        sender=PING,
        recipient=PONG,
        body=Note(data={"n": rounds, "rounds": rounds}),
        causation=derive_id("pingpong", 0),
        hops=2 * rounds,
        ts=time.time(),
    )


# -- raw request/reply ---------------------------------------------------------------------------


async def echo_server(url: str) -> None:
    """The raw responder, until killed: core requests are answered, JetStream requests published back."""
    nc = await nats.connect(url)
    js = nc.jetstream()

    async def publish_back(msg: Msg) -> None:
        await js.publish(JS_REPLY, msg.data)
        await msg.ack()

    async def answer(msg: Msg) -> None:
        await msg.respond(msg.data)

    # JetStream first: once the core echo answers, both are listening.
    await js.subscribe(JS_REQUEST, cb=publish_back, manual_ack=True, deliver_policy=api.DeliverPolicy.NEW)
    await nc.subscribe(ECHO_SUBJECT, cb=answer)
    await nc.flush()
    await anyio.sleep_forever()


async def timed(count: int, call: Callable[[], Awaitable[object]]) -> list[float]:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        await call()
        times.append(time.perf_counter() - start)
    return times


async def raw_round_trips(url: str, count: int, payload: bytes) -> tuple[list[float], list[float]]:
    """Sequential core request/reply and JetStream round trips to the responder process, in seconds."""
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(api.StreamConfig(name=JS_STREAM, subjects=[JS_SUBJECTS], storage=api.StorageType.FILE))
        send, receive = anyio.create_memory_object_stream[bytes](math.inf)

        async def on_reply(msg: Msg) -> None:
            await msg.ack()
            send.send_nowait(msg.data)

        await js.subscribe(JS_REPLY, cb=on_reply, manual_ack=True, deliver_policy=api.DeliverPolicy.NEW)

        async def core() -> None:
            await nc.request(ECHO_SUBJECT, payload, timeout=REQUEST_TIMEOUT_S)

        async def jetstream() -> None:
            await js.publish(JS_REQUEST, payload)
            with anyio.fail_after(REQUEST_TIMEOUT_S):
                await receive.receive()

        async with await anyio.open_process([sys.executable, __file__, "--echo-server", url]) as responder:
            try:
                with anyio.fail_after(30):
                    while True:
                        try:
                            await core()
                            break
                        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
                            await anyio.sleep(0.05)
                await timed(count // 10, core)  # warm up
                await timed(count // 10, jetstream)
                core_times: list[float] = []
                js_times: list[float] = []
                for _ in range(BLOCKS):  # interleaved, so both see the same machine
                    core_times += await timed(count // BLOCKS, core)
                    js_times += await timed(count // BLOCKS, jetstream)
                return core_times, js_times
            finally:
                responder.terminate()
    finally:
        await nc.close()


# -- episodes ------------------------------------------------------------------------------------


async def run_episodes(bus: Bus, first: str, episodes: dict[str, dict[str, int]]) -> float:
    """Start every episode at `first` with its Start data, wait until all completed; wall seconds."""
    async with Completions(bus, COMPLETERS) as completions:
        start = time.perf_counter()
        for episode, data in episodes.items():
            await start_episode(bus, episode, first, EpisodeStarted(task="bench"), Start(data=dict(data)))
        with anyio.fail_after(EPISODE_TIMEOUT_S):
            done = await completions.wait(episodes)
        elapsed = time.perf_counter() - start
    failed = [e for e, c in done.items() if c.outcome != "success"]
    if failed:
        raise RuntimeError(f"episodes did not succeed: {failed}")
    return elapsed


async def journal_caught_up(bus: Bus) -> None:
    """Return once the journal process holds everything the stream holds now."""
    until = (await bus.js.stream_info(bus.subjects.stream)).state.last_seq
    payload = msgspec.json.encode({"until": until})
    while True:
        reply = await bus.nc.request(bus.subjects.svc("journal"), payload, timeout=JOURNAL_REPLY_TIMEOUT_S)
        if int(msgspec.json.decode(reply.data)["last_seq"]) >= until:
            return


def hop_latencies(journal: Path, episode: str) -> list[float]:
    """ts(answer) - ts(cause) for every note whose cause is a note or the kickoff, in seconds."""
    with JournalReader(journal) as reader:
        rows = list(reader.episode_rows(episode))
    ts = {row.id: row.ts for row in rows if row.kind in ("note", "start")}
    return [row.ts - ts[row.causation] for row in rows if row.kind == "note" and row.causation in ts]


# -- the run -------------------------------------------------------------------------------------


async def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="faultline-bench-") as scratch:
        root = Path(scratch)
        journal = root / "journal.sqlite"
        supervisor = Supervisor(
            journal_path=journal,
            workers=[
                ProcessSpec("bench-a", ("worker", "--agents", ",".join(WORKER_A))),
                ProcessSpec("bench-b", ("worker", "--agents", ",".join(WORKER_B))),
            ],
            store_dir=root / "nats",
            log_dir=root / "logs",
        )
        async with supervisor.running():
            return await measure(args, console, supervisor, journal)


async def measure(args: argparse.Namespace, console: Console, supervisor: Supervisor, journal: Path) -> dict[str, Any]:
    bus = supervisor.bus
    assert bus is not None and supervisor.server is not None and supervisor.server.pid is not None
    workers = {name: supervisor.pid(name) for name in ("bench-a", "bench-b")}
    pids: dict[str, int] = {name: pid for name, pid in workers.items() if pid is not None}
    pids |= {"journal": supervisor.pid("journal") or 0, "nats-server": supervisor.server.pid}

    await anyio.sleep(SETTLE_S)
    rss_fresh = {name: rss_mib(pids[name]) for name in workers}

    payload = encode(hop_envelope(args.rounds))
    console.print(f"raw core request/reply and JetStream, {args.requests:,} sequential round trips each ...")
    raw, raw_js = await raw_round_trips(supervisor.url, args.requests, payload)

    console.print(f"ping-pong: {args.rounds:,} round trips in one episode ...")
    await run_episodes(bus, PING, {"warmup": {"rounds": 50}})
    elapsed = await run_episodes(bus, PING, {"pingpong": {"rounds": args.rounds}})
    await journal_caught_up(bus)
    hops = hop_latencies(journal, "pingpong")

    console.print(f"ring of 4: {args.episodes} episodes at once, {args.hops} hops each ...")
    ring = {f"ring{i:03d}": {"hops": args.hops} for i in range(args.episodes)}
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    ring_s = await run_episodes(bus, RING_FIRST, ring)
    total_hops = args.episodes * args.hops
    ring_cpu = {name: (cpu_seconds(pid) - before[name]) / total_hops * 1e6 for name, pid in pids.items()}

    await anyio.sleep(SETTLE_S)
    rss_after = {name: rss_mib(pids[name]) for name in workers}
    return {
        "raw_rtt_ms": {"p50": percentile(raw, 50) * 1e3, "p99": percentile(raw, 99) * 1e3, "count": len(raw)},
        "raw_jetstream_rtt_ms": {
            "p50": percentile(raw_js, 50) * 1e3,
            "p99": percentile(raw_js, 99) * 1e3,
            "count": len(raw_js),
        },
        "hop_ms": {
            "p50": percentile(hops, 50) * 1e3,
            "p99": percentile(hops, 99) * 1e3,
            "mean": statistics.fmean(hops) * 1e3,
            "count": len(hops),
        },
        "hop_from_outside_ms": elapsed / args.rounds / 2 * 1e3,
        "ring": {
            "episodes": args.episodes,
            "hops_per_episode": args.hops,
            "msgs_per_s": total_hops / ring_s,
            "cpu_us_per_hop": ring_cpu,
        },
        "worker_rss_mib": {"idle_fresh": rss_fresh, "idle_after_traffic": rss_after},
        "payload_bytes": len(payload),
    }


# -- report --------------------------------------------------------------------------------------


def report(r: dict[str, Any], title: str) -> Table:
    raw, raw_js, hop = r["raw_rtt_ms"], r["raw_jetstream_rtt_ms"], r["hop_ms"]
    ratio = hop["p50"] / raw["p50"]
    worst_rss = max(r["worker_rss_mib"]["idle_after_traffic"].values())
    fresh_rss = max(r["worker_rss_mib"]["idle_fresh"].values())
    r["hop_p50_vs_raw_rtt_p50"] = ratio
    rows: list[tuple[str, str, str, bool | None]] = [
        ("raw NATS request/reply round trip p50", f"{raw['p50']:.3f} ms", "", None),
        ("raw NATS request/reply round trip p99", f"{raw['p99']:.3f} ms", "", None),
        ("raw JetStream round trip p50 (two one-way trips)", f"{raw_js['p50']:.3f} ms", "", None),
        ("raw JetStream round trip p99", f"{raw_js['p99']:.3f} ms", "", None),
        ("hop between worker processes p50", f"{hop['p50']:.3f} ms", "", None),
        ("hop between worker processes p99", f"{hop['p99']:.3f} ms", "", None),
        ("hop, from outside (round trip / 2, mean)", f"{r['hop_from_outside_ms']:.3f} ms", "", None),
        ("hop p50 / raw round trip p50", f"{ratio:.2f}x", "< 2x", ratio < 2.0),
        ("hop p50 / (raw JetStream round trip p50 / 2)", f"{hop['p50'] / (raw_js['p50'] / 2):.2f}x", "", None),
        (
            f"ring of 4, {r['ring']['episodes']} episodes at once",
            f"{r['ring']['msgs_per_s']:,.0f} msg/s",
            "",
            None,
        ),
        ("worker RSS, idle after start (larger of 2)", f"{fresh_rss:.1f} MiB", "", None),
        ("worker RSS, idle after traffic (larger of 2)", f"{worst_rss:.1f} MiB", "< 80 MB", worst_rss * 2**20 < 80e6),
    ]
    table = Table(title=title)
    for column, justify in (("measure", "left"), ("value", "right"), ("target", "right"), ("result", "left")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for measure, value, target, passed in rows:
        table.add_row(measure, value, target, "" if passed is None else "[green]PASS" if passed else "[red]MISS")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=1_000, help="round trips of the ping-pong episode")
    parser.add_argument("--requests", type=int, default=2_000, help="raw request/reply round trips")
    parser.add_argument("--episodes", type=int, default=20, help="ring episodes running at once")
    parser.add_argument("--hops", type=int, default=400, help="hops per ring episode")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the numbers here")
    parser.add_argument("--echo-server", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.echo_server:
        anyio.run(echo_server, args.echo_server)
        return

    os.chdir(ROOT)  # worker processes import `bench.agents` from the working directory
    console = Console()
    info = machine()
    results = anyio.run(run, args, console)
    info["loadavg_1m_after"] = os.getloadavg()[0]
    console.print(report(results, f"runtime latency — {info['date']}, {info['cpus']} cores, Python {info['python']}"))
    cpu = results["ring"]["cpu_us_per_hop"]
    console.print("ring CPU µs per hop: " + ", ".join(f"{name} {us:.0f}" for name, us in cpu.items()))
    console.print(f"load average (1 min) before {info['loadavg_1m']:.2f}, after {info['loadavg_1m_after']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(results | {"machine": info}, indent=2) + "\n")


if __name__ == "__main__":
    main()
