"""What access control and TLS cost the bus: publish throughput on an open server, with users and
permissions, and with users, permissions and TLS, in the same run.

Each configuration is its own nats-server on loopback (JetStream, file storage) and
one `Bus` publishing envelopes of ~335 bytes with `publish_all` in batches, each
batch awaited until the stream confirmed it, as a worker does. The publisher
connects as a worker identity, so the server checks every publish against its
permission list. Every repetition runs the three configurations in turn, so they
see the same machine; rates are medians, costs are medians of per-repetition
ratios to the open server. Beside the rates, the CPU time the publisher and the
nats-server spent per message (from /proc/<pid>/stat): where the cost of a check
falls, and a measure a busy machine moves much less than a rate. Not a test.

    python -m bench.bus_security --json bus_security.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.table import Table

from bench._common import cpu_seconds
from faultline.bus import (
    OPERATOR,
    Access,
    Bus,
    EmbeddedServer,
    Identity,
    Login,
    agent_identity,
    agent_reads,
    make_certificates,
    operator_identity,
    worker_reads,
)
from faultline.core import Envelope, Note, Subjects

CONFIGURATIONS = ("open", "auth", "auth+tls")
WORKER = "worker-main"
AGENTS = ("alpha", "beta")


def envelopes(run: str, count: int) -> list[Envelope]:
    text = "x" * 176
    return [
        Envelope(id=f"{run}-{i}", episode=f"e{i % 64}", sender="alpha", recipient="beta", body=Note(text=text))
        for i in range(count)
    ]


def worker_identity(subjects: Subjects) -> Identity:
    """A worker group's identity as the system makes it: its agents' outputs, consumers and reads."""
    reads = (*worker_reads(subjects), *(read for agent in AGENTS for read in agent_reads(subjects, agent)))
    consumers = [f"agent-{agent}-0of1" for agent in AGENTS]
    return agent_identity(subjects, WORKER, AGENTS, consumers=consumers, reads=reads)


@contextmanager
def server(folder: Path, configuration: str) -> Iterator[tuple[EmbeddedServer, Login, Login]]:
    """A nats-server in `configuration`, and how the publisher and the operator log in to it."""
    if configuration == "open":
        with EmbeddedServer(store_dir=folder / "nats") as open_server:
            yield open_server, Login(), Login()
        return
    subjects = Subjects()
    access = Access(folder / "credentials", (operator_identity(), worker_identity(subjects))).prepare()
    tls = make_certificates(folder / "tls") if configuration == "auth+tls" else None
    with EmbeddedServer(store_dir=folder / "nats", config_file=access.server_config, tls=tls) as secured:
        ca = tls.ca if tls else None
        yield secured, Login(access.credential(WORKER), ca), Login(access.credential(OPERATOR), ca)


@dataclass
class Sample:
    rate: float
    """Messages per second."""
    cpu_us: dict[str, float]
    """CPU microseconds per message of the publisher and of nats-server."""


async def rate(nats: EmbeddedServer, login: Login, operator: Login, count: int, batch: int, run: str) -> Sample:
    """Messages per second through `Bus.publish_all`, every batch confirmed, and the CPU time they took."""
    url = nats.url
    assert nats.pid is not None
    pids = {"publisher": os.getpid(), "nats-server": nats.pid}
    setup = await Bus.connect(url, login=operator)
    await setup.ensure_stream()
    await setup.close()
    bus = await Bus.connect(url, login=login, name=WORKER)
    try:
        messages = envelopes(run, count)
        await bus.publish_all(messages[:batch])  # warm: connection, stream, code paths
        cpu = {name: cpu_seconds(pid) for name, pid in pids.items()}
        started = time.perf_counter()
        for i in range(batch, count, batch):
            await bus.publish_all(messages[i : i + batch])
        elapsed = time.perf_counter() - started
        sent = count - batch
        return Sample(sent / elapsed, {name: (cpu_seconds(pid) - cpu[name]) / sent * 1e6 for name, pid in pids.items()})
    finally:
        await bus.close()


async def measure(count: int, batch: int, reps: int) -> dict[str, Any]:
    samples: dict[str, list[Sample]] = {c: [] for c in CONFIGURATIONS}
    for rep in range(reps):
        for configuration in CONFIGURATIONS:
            with (
                tempfile.TemporaryDirectory() as folder,
                server(Path(folder), configuration) as (nats, login, operator),
            ):
                samples[configuration].append(await rate(nats, login, operator, count, batch, f"r{rep}"))
    rates = {c: [sample.rate for sample in samples[c]] for c in CONFIGURATIONS}
    costs = {
        c: statistics.median(1 - mine / base for mine, base in zip(rates[c], rates["open"], strict=True))
        for c in CONFIGURATIONS[1:]
    }
    return {
        "messages": count,
        "batch": batch,
        "reps": reps,
        "rate": {c: statistics.median(values) for c, values in rates.items()},
        "rates": rates,
        "cost": costs,
        "cpu_us_per_msg": {
            c: {name: statistics.median(sample.cpu_us[name] for sample in samples[c]) for name in samples[c][0].cpu_us}
            for c in CONFIGURATIONS
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    result = anyio.run(measure, args.messages, args.batch, args.reps)
    table = Table(
        title=f"bus publish throughput, {args.messages} messages in batches of {args.batch}, {args.reps} reps"
    )
    for column in ("server", "msg/s (median)", "cost vs open", "publisher CPU µs/msg", "nats-server CPU µs/msg"):
        table.add_column(column, justify="right")
    for configuration in CONFIGURATIONS:
        cost = result["cost"].get(configuration)
        shown = "-" if cost is None else f"{cost * 100:+.1f}%"
        cpu = result["cpu_us_per_msg"][configuration]
        table.add_row(
            configuration,
            f"{result['rate'][configuration]:,.0f}",
            shown,
            f"{cpu['publisher']:.1f}",
            f"{cpu['nats-server']:.1f}",
        )
    Console().print(table)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
