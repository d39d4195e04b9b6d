"""Bus throughput: how fast messages go from `publish` to a committed journal row.

One run on loopback. Every message is an envelope whose `Note` body encodes to
`--body-bytes` (200: 176 characters of text; the envelope is then ~335 bytes,
and the raw publisher sends those same bytes). Measured:

(a) raw nats-py JetStream `publish_async`, N messages then every ack awaited:
    the ceiling of this machine, no faultline code (with a `Nats-Msg-Id`
    header, as the bus always sends one; also without, for reference). Also
    `Bus.publish_all` the same way on a stream nobody consumes, which isolates
    the bus's own cost from the journal's;
(b) `Bus.publish_all` in batches until the journal service has committed the
    last row: the service in its own process as in production (timed until its
    `fl.svc.journal` reply), and on the publisher's event loop (`wait_for`);
(c) autogen-core's `SingleThreadedAgentRuntime`: one agent sending to another
    with `send_message`, awaited one by one and in gathered batches;
(d) journal lag at a paced rate: lag = commit time minus the envelope's `ts`.
    The commit time of a row is when the service answers `{"until": seq}` for
    the tick that published it: an upper bound, too high by at most the tick's
    publishing time and one reply;
(e) the cost of three no-op interceptors on (b)'s pipeline, as a rate ratio,
    and as the publisher's CPU time per message (robust to a busy machine). Their
    outbound hooks are written out, so they run: a chain skips inherited ones.

Every rate comes with the CPU time each process spent per message (from
/proc/<pid>/stat), which says where the time goes. Each of `--reps`
repetitions runs every configuration once; rates are medians, and ratios are
medians of per-repetition ratios, so they compare runs that saw the same
machine. Not a test.

    python -m bench.bus_throughput --json bus_throughput.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import msgspec
import nats
from autogen_core import AgentId, MessageContext, RoutedAgent, SingleThreadedAgentRuntime, message_handler
from nats.js import api
from rich.console import Console
from rich.table import Table

from bench._common import cpu_seconds, machine
from faultline.bus import Bus
from faultline.core import Envelope, Interceptor, InterceptorChain, Note, Outbound, derive_id, encode
from faultline.journal import JournalReader
from faultline.runtime import Supervisor
from faultline.runtime._journal_service import JournalService

RAW_STREAM = "RAW"
PLAIN = "bus_to_journal_process"
CHAINED = "bus_3_interceptors_to_journal_process"
RUNS = (
    "raw_js",
    "raw_js_no_msg_id",
    "bus_publish_unconsumed",
    PLAIN,
    CHAINED,
    "autogen_sequential",
    "autogen_gathered",
)
"""The configurations measured in every repetition (the in-process journal is measured after them)."""
EPISODES = 100
JOURNAL_REPLY_TIMEOUT_S = 120.0
DUPLICATE_WINDOW_S = 120.0


# -- messages and statistics ---------------------------------------------------------------------


def note_text(body_bytes: int) -> str:
    """The shortest text whose `Note` encodes to at least `body_bytes`."""
    text = ""
    while len(encode(Note(text=text))) < body_bytes:
        text += "x"
    return text


def make_envelope(run: str, i: int, text: str) -> Envelope:
    return Envelope(
        id=derive_id(run, i),
        episode=f"{run}-{i % EPISODES:03d}",
        sender="alpha",
        recipient="beta",
        body=Note(text=text),
        ts=time.time(),
    )


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile, q in [0, 100]."""
    ranked = sorted(values)
    return ranked[min(len(ranked) - 1, max(0, round(q / 100 * len(ranked)) - 1))]


@dataclass
class Sample:
    """One repetition: messages/s, and CPU microseconds per message for each process watched."""

    rate: float
    cpu_us: dict[str, float]


async def sample(n: int, pids: Mapping[str, int], work: Callable[[], Awaitable[None]]) -> Sample:
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    start = time.perf_counter()
    await work()
    elapsed = time.perf_counter() - start
    cpu = {name: (cpu_seconds(pid) - before[name]) / n * 1e6 for name, pid in pids.items()}
    return Sample(n / elapsed, cpu)


@dataclass
class Summary:
    """Medians over repetitions."""

    rate: float
    cpu_us: dict[str, float]

    @classmethod
    def of(cls, samples: list[Sample]) -> Summary:
        names = samples[0].cpu_us
        return cls(
            statistics.median(s.rate for s in samples),
            {name: statistics.median(s.cpu_us[name] for s in samples) for name in names},
        )

    def as_dict(self) -> dict[str, Any]:
        return {"msgs_per_s": self.rate, "cpu_us_per_msg": self.cpu_us}


# -- (a) raw JetStream -----------------------------------------------------------------------------


async def raw_publish(js: Any, payloads: list[bytes], tag: str, with_id: bool) -> None:
    """publish_async every payload, then await every ack."""
    futures = []
    for i, payload in enumerate(payloads):
        headers = {"Nats-Msg-Id": f"{tag}-{i}"} if with_id else None
        futures.append(await js.publish_async(f"raw.ep.{i % EPISODES}.beta", payload, headers=headers))
    await asyncio.gather(*futures)


# -- (b) bus to journal ----------------------------------------------------------------------------


async def journal_reply(bus: Bus, until: int) -> None:
    """Return once the journal process answers that it holds stream sequence `until`."""
    payload = msgspec.json.encode({"until": until})
    while True:
        reply = await bus.nc.request(bus.subjects.svc("journal"), payload, timeout=JOURNAL_REPLY_TIMEOUT_S)
        if int(msgspec.json.decode(reply.data)["last_seq"]) >= until:
            return


async def publish_batches(bus: Bus, envelopes: list[Envelope], batch: int) -> None:
    for i in range(0, len(envelopes), batch):
        await bus.publish_all(envelopes[i : i + batch])


async def last_seq(bus: Bus) -> int:
    return int((await bus.js.stream_info(bus.subjects.stream)).state.last_seq)


class PassThrough(Interceptor):
    """A no-op written out: the chain leaves inherited hooks out, so these are what a no-op costs."""

    async def outbound(self, message: Outbound) -> Sequence[Envelope]:
        return (message.envelope,)


def three_noops() -> InterceptorChain:
    return InterceptorChain([PassThrough(), PassThrough(), PassThrough()])


# -- (c) autogen-core ------------------------------------------------------------------------------


@dataclass
class Ping:
    text: str


@dataclass
class Drive:
    count: int
    concurrency: int
    text: str


class Receiver(RoutedAgent):
    def __init__(self) -> None:
        super().__init__("receives pings")

    @message_handler
    async def on_ping(self, message: Ping, ctx: MessageContext) -> None:
        return None


class Sender(RoutedAgent):
    """Sends `count` pings to the receiver: awaited one by one, or gathered `concurrency` at a time."""

    def __init__(self) -> None:
        super().__init__("sends pings")

    @message_handler
    async def on_drive(self, message: Drive, ctx: MessageContext) -> None:
        target = AgentId("receiver", "default")
        if message.concurrency <= 1:
            for _ in range(message.count):
                await self.send_message(Ping(message.text), target)
            return
        for done in range(0, message.count, message.concurrency):
            n = min(message.concurrency, message.count - done)
            await asyncio.gather(*(self.send_message(Ping(message.text), target) for _ in range(n)))


async def autogen_sample(count: int, concurrency: int, text: str) -> Sample:
    runtime = SingleThreadedAgentRuntime()
    await Receiver.register(runtime, "receiver", Receiver)
    await Sender.register(runtime, "sender", Sender)
    runtime.start()
    try:
        sender = AgentId("sender", "default")
        await runtime.send_message(Drive(100, concurrency, text), sender)  # creates both agents
        return await sample(
            count, {"bench": os.getpid()}, lambda: runtime.send_message(Drive(count, concurrency, text), sender)
        )
    finally:
        await runtime.stop_when_idle()


# -- (d) paced lag ---------------------------------------------------------------------------------


@dataclass
class LagRun:
    achieved_rate: float
    p50_s: float
    p99_s: float
    max_s: float
    messages: int


async def paced_lag(bus: Bus, journal: Path, rate: int, seconds: float, text: str, tick_s: float) -> LagRun:
    """Publish `rate` messages/s in ticks; per tick, ask the journal to say when it holds the tick."""
    per_tick = max(1, round(rate * tick_s))
    base = await last_seq(bus)
    with JournalReader(journal) as reader:
        first_pos = reader.last_pos + 1
    answered: list[tuple[int, float]] = []

    async def answer(until: int) -> None:
        await journal_reply(bus, until)
        answered.append((until, time.time()))

    sent = 0
    async with anyio.create_task_group() as tg:
        start = time.perf_counter()
        for tick in range(round(seconds / tick_s)):
            delay = start + tick * tick_s - time.perf_counter()
            if delay > 0:
                await anyio.sleep(delay)
            await bus.publish_all([make_envelope("lag", sent + i, text) for i in range(per_tick)])
            sent += per_tick
            tg.start_soon(answer, base + sent)
        elapsed = time.perf_counter() - start
    # Sequence s was committed by the earliest answer to any tick at or after s.
    commits: list[tuple[int, float]] = []
    earliest = float("inf")
    for until, at in sorted(answered, reverse=True):
        earliest = min(earliest, at)
        commits.append((until, earliest))
    commits.reverse()
    lags = []
    with JournalReader(journal) as reader:
        tick = 0
        for row in reader.rows(first_pos):
            while commits[tick][0] < row.stream_seq:
                tick += 1
            lags.append(commits[tick][1] - row.ts)
    return LagRun(sent / elapsed, percentile(lags, 50), percentile(lags, 99), max(lags), len(lags))


# -- the run ---------------------------------------------------------------------------------------


async def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="faultline-bench-") as scratch:
        root = Path(scratch)
        journal = root / "journal.sqlite"
        supervisor = Supervisor(journal_path=journal, workers=[], store_dir=root / "nats", log_dir=root / "logs")
        async with supervisor.running():
            assert supervisor.server is not None and supervisor.server.pid is not None
            pids = {"bench": os.getpid(), "nats-server": supervisor.server.pid}
            journal_pid = supervisor.pid("journal")
            assert journal_pid is not None
            return await measure(args, console, supervisor.url, pids, journal_pid, journal, root)


async def measure(
    args: argparse.Namespace,
    console: Console,
    url: str,
    pids: dict[str, int],
    journal_pid: int,
    journal: Path,
    root: Path,
) -> dict[str, Any]:
    n, reps, batch = args.messages, args.reps, args.batch
    text = note_text(args.body_bytes)
    envelope_bytes = len(encode(make_envelope("size", 0, text)))
    console.print(
        f"body {len(encode(Note(text=text)))} bytes ({len(text)} chars of text), envelope {envelope_bytes} bytes;"
        f" {n:,} messages per repetition, {reps} repetitions"
    )
    with_journal = pids | {"journal": journal_pid}

    payloads = [encode(make_envelope("raw", i, text)) for i in range(n)]
    logging.getLogger("autogen_core").setLevel(logging.WARNING)
    runs: dict[str, list[Sample]] = {key: [] for key in RUNS}
    nc = await nats.connect(url)
    solo = await Bus.connect(url, prefix="solo")
    bus = await Bus.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(
            api.StreamConfig(
                name=RAW_STREAM, subjects=["raw.>"], storage=api.StorageType.FILE, duplicate_window=DUPLICATE_WINDOW_S
            )
        )
        await (await js.publish_async("raw.warmup", b"."))
        await solo.ensure_stream()

        async def to_journal(chain: InterceptorChain, tag: str) -> Sample:
            bus.interceptors = chain
            envelopes = [make_envelope(tag, i, text) for i in range(n)]
            until = await last_seq(bus) + n

            async def pipeline() -> None:
                await publish_batches(bus, envelopes, batch)
                await journal_reply(bus, until)

            return await sample(n, with_journal, pipeline)

        # Every configuration once per repetition, so that ratios compare runs that
        # saw the same machine (other processes come and go).
        for rep in range(reps):
            console.print(f"repetition {rep + 1} of {reps}: (a), (b), (e), (c)")
            runs["raw_js"].append(await sample(n, pids, lambda rep=rep: raw_publish(js, payloads, f"id{rep}", True)))
            envelopes = [make_envelope(f"s{rep}", i, text) for i in range(n)]
            unconsumed = await sample(n, pids, lambda envelopes=envelopes: publish_batches(solo, envelopes, batch))
            runs["bus_publish_unconsumed"].append(unconsumed)
            runs["raw_js_no_msg_id"].append(await sample(n, pids, lambda: raw_publish(js, payloads, "", False)))
            order = [(PLAIN, InterceptorChain()), (CHAINED, three_noops())]
            for key, chain in order if rep % 2 == 0 else order[::-1]:
                runs[key].append(await to_journal(chain, f"j{rep}-{len(chain)}"))
            count = args.autogen_messages
            runs["autogen_sequential"].append(await autogen_sample(count, 1, text))
            runs["autogen_gathered"].append(await autogen_sample(count, args.autogen_concurrency, text))
        bus.interceptors = InterceptorChain()

        console.print("(b) bus.publish_all to a journal service on the publisher's event loop ...")
        runs["bus_to_journal_in_process"] = await in_process(url, root / "local.sqlite", n, reps, batch, text, pids)

        console.print(f"(d) journal lag at {args.lag_rate:,} messages/s for {args.lag_seconds:g}s ...")
        lag = await paced_lag(bus, journal, args.lag_rate, args.lag_seconds, text, args.tick_s)
    finally:
        await bus.close()
        await solo.close()
        await nc.close()

    def ratio(top: str, bottom: str | tuple[str, str]) -> float:
        """Median over repetitions of one run's rate over another's in the same repetition."""
        bottoms = (bottom,) if isinstance(bottom, str) else bottom
        return statistics.median(runs[top][i].rate / max(runs[b][i].rate for b in bottoms) for i in range(reps))

    def cpu_ratio(top: str, bottom: str) -> float:
        return statistics.median(runs[top][i].cpu_us["bench"] / runs[bottom][i].cpu_us["bench"] for i in range(reps))

    return {
        "body_bytes": len(encode(Note(text=text))),
        "envelope_bytes": envelope_bytes,
        "messages": n,
        "reps": reps,
        "batch": batch,
        "autogen_messages": args.autogen_messages,
        "autogen_concurrency": args.autogen_concurrency,
        **{key: Summary.of(samples).as_dict() for key, samples in runs.items()},
        "ratios": {
            "bus_vs_raw": ratio(PLAIN, "raw_js"),
            "bus_unconsumed_vs_raw": ratio("bus_publish_unconsumed", "raw_js"),
            "bus_vs_autogen": ratio(PLAIN, ("autogen_sequential", "autogen_gathered")),
            "interceptors_rate": ratio(CHAINED, PLAIN),
            "interceptors_publisher_cpu": cpu_ratio(CHAINED, PLAIN),
        },
        "lag": {
            "target_msgs_per_s": args.lag_rate,
            "achieved_msgs_per_s": lag.achieved_rate,
            "messages": lag.messages,
            "p50_s": lag.p50_s,
            "p99_s": lag.p99_s,
            "max_s": lag.max_s,
        },
    }


async def in_process(
    url: str, path: Path, n: int, reps: int, batch: int, text: str, pids: dict[str, int]
) -> list[Sample]:
    """(b) with the journal service on the publisher's event loop, on a stream of its own."""
    bus = await Bus.connect(url, prefix="local")
    try:
        await bus.ensure_stream()
        service = JournalService(bus, path)
        samples = []
        async with anyio.create_task_group() as tg:
            tg.start_soon(service.run)
            await service.wait_ready()
            for rep in range(reps):
                envelopes = [make_envelope(f"l{rep}", i, text) for i in range(n)]
                until = await last_seq(bus) + n

                async def pipeline(envelopes: list[Envelope] = envelopes, until: int = until) -> None:
                    await publish_batches(bus, envelopes, batch)
                    await service.wait_for(until)

                samples.append(await sample(n, pids, pipeline))
            service.stop()
        return samples
    finally:
        await bus.close()


# -- report ----------------------------------------------------------------------------------------

Row = tuple[str, str, str, bool | None]


def verdicts(r: dict[str, Any]) -> list[Row]:
    """(measure, value, target, passed) rows, passed None when informational."""
    raw = r["raw_js"]["msgs_per_s"]
    bus = r[PLAIN]["msgs_per_s"]
    chained = r[CHAINED]
    seq, gathered = r["autogen_sequential"]["msgs_per_s"], r["autogen_gathered"]["msgs_per_s"]
    lag = r["lag"]
    paced = lag["achieved_msgs_per_s"] >= 0.95 * lag["target_msgs_per_s"]
    ratios = r["ratios"]
    vs_autogen, with_chain = ratios["bus_vs_autogen"], ratios["interceptors_rate"]
    rate = "{:,.0f} msg/s".format
    return [
        ("(a) raw JetStream publish_async, Nats-Msg-Id", rate(raw), "ceiling", None),
        ("(a) raw JetStream publish_async, no header", rate(r["raw_js_no_msg_id"]["msgs_per_s"]), "", None),
        ("    bus.publish_all, stream not consumed", rate(r["bus_publish_unconsumed"]["msgs_per_s"]), "", None),
        ("    that / (a), median of ratios", f"{ratios['bus_unconsumed_vs_raw']:.0%}", "", None),
        ("(b) bus.publish_all → committed by journal process", rate(bus), "", None),
        ("(b) ... journal in the publisher's process", rate(r["bus_to_journal_in_process"]["msgs_per_s"]), "", None),
        ("(b) / (a), median of ratios", f"{ratios['bus_vs_raw']:.0%}", ">= 70%", ratios["bus_vs_raw"] >= 0.70),
        ("(c) autogen send_message, awaited one by one", rate(seq), "", None),
        (f"(c) autogen send_message, gathered {r['autogen_concurrency']} at a time", rate(gathered), "", None),
        ("(b) / (c) (the faster), median of ratios", f"{vs_autogen:.2f}x", ">= 2x", vs_autogen >= 2),
        (
            f"(d) paced publish rate (asked {lag['target_msgs_per_s']:,})",
            rate(lag["achieved_msgs_per_s"]),
            ">= 95% of asked",
            paced,
        ),
        ("(d) journal lag p50", f"{lag['p50_s'] * 1e3:.1f} ms", "", None),
        ("(d) journal lag p99", f"{lag['p99_s'] * 1e3:.1f} ms", "< 1000 ms", lag["p99_s"] < 1.0),
        ("(d) journal lag max", f"{lag['max_s'] * 1e3:.1f} ms", "", None),
        ("(e) (b) with 3 no-op interceptors", rate(chained["msgs_per_s"]), "", None),
        ("(e) rate with / without, median of ratios", f"{with_chain:.1%}", ">= 90%", with_chain >= 0.9),
        ("(e) publisher CPU/msg with / without", f"{ratios['interceptors_publisher_cpu']:.1%}", "", None),
    ]


def results_table(rows: list[Row], title: str) -> Table:
    table = Table(title=title)
    for column, justify in (("measure", "left"), ("value", "right"), ("target", "right"), ("result", "left")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for measure, value, target, passed in rows:
        table.add_row(measure, value, target, "" if passed is None else "[green]PASS" if passed else "[red]MISS")
    return table


def cpu_table(r: dict[str, Any]) -> Table:
    """CPU microseconds per message, per process: where the time goes."""
    labels = {
        "raw_js": "(a) raw JetStream",
        "bus_publish_unconsumed": "bus, not consumed",
        "bus_to_journal_process": "(b) journal process",
        "bus_to_journal_in_process": "(b) journal in-process",
        "bus_3_interceptors_to_journal_process": "(e) 3 interceptors",
        "autogen_gathered": "(c) autogen gathered",
    }
    table = Table(title="CPU µs per message (a process at 100% of one core for 1 s = 1e6 µs)")
    for column in ("run", "msg/s", "bench", "nats-server", "journal", "total"):
        table.add_column(column, justify="left" if column == "run" else "right")
    for key, label in labels.items():
        cpu = r[key]["cpu_us_per_msg"]
        cells = [f"{cpu[p]:.0f}" if p in cpu else "-" for p in ("bench", "nats-server", "journal")]
        table.add_row(label, f"{r[key]['msgs_per_s']:,.0f}", *cells, f"{sum(cpu.values()):.0f}")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000, help="messages per repetition of (a), (b), (e)")
    parser.add_argument("--reps", type=int, default=5, help="repetitions; medians are reported")
    parser.add_argument("--batch", type=int, default=1_000, help="envelopes per publish_all call")
    parser.add_argument("--body-bytes", type=int, default=200, help="encoded size of each Note body")
    parser.add_argument("--autogen-messages", type=int, default=6_000)
    parser.add_argument("--autogen-concurrency", type=int, default=100, help="sends gathered at once")
    parser.add_argument("--lag-rate", type=int, default=10_000, help="paced messages/s for (d)")
    parser.add_argument("--lag-seconds", type=float, default=5.0)
    parser.add_argument("--tick-s", type=float, default=0.01, help="pacing tick of (d)")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the numbers here")
    args = parser.parse_args()

    console = Console()
    before = machine()
    results = anyio.run(run, args, console)
    rows = verdicts(results)
    info = before | {"loadavg_1m_after": os.getloadavg()[0]}
    title = f"bus throughput — {info['date']}, {info['cpus']} cores, Python {info['python']}"
    console.print(results_table(rows, title))
    console.print(cpu_table(results))
    console.print(f"load average (1 min) before {info['loadavg_1m']:.2f}, after {info['loadavg_1m_after']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(results | {"machine": info}, indent=2) + "\n")


if __name__ == "__main__":
    main()
