"""What access control and TLS cost the bus: publish throughput on an open server, with users and
permissions, and with users, permissions and TLS, in the same run.

Each configuration is its own nats-server on loopback (JetStream, file storage) and
one `Bus` publishing envelopes of ~335 bytes with `publish_all` in batches, each
batch awaited until the stream confirmed it, as a worker does. The publisher
connects as a worker identity, so the server checks every publish against its
permission list. Every repetition runs the three configurations in turn, so they
see the same machine; rates are medians, costs are medians of per-repetition
ratios to the open server. Not a test.

    python bench/bus_security.py --json bus_security.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console
from rich.table import Table

from faultline.bus import (
    OPERATOR,
    Access,
    Bus,
    EmbeddedServer,
    Login,
    agent_identity,
    make_certificates,
    operator_identity,
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


@contextmanager
def server(folder: Path, configuration: str) -> Iterator[tuple[str, Login, Login]]:
    """A nats-server in `configuration`, and how the publisher and the operator log in to it."""
    if configuration == "open":
        with EmbeddedServer(store_dir=folder / "nats") as open_server:
            yield open_server.url, Login(), Login()
        return
    subjects = Subjects()
    access = Access(folder / "credentials", (operator_identity(), agent_identity(subjects, WORKER, AGENTS))).prepare()
    tls = make_certificates(folder / "tls") if configuration == "auth+tls" else None
    with EmbeddedServer(store_dir=folder / "nats", config_file=access.server_config, tls=tls) as secured:
        ca = tls.ca if tls else None
        yield secured.url, Login(access.credential(WORKER), ca), Login(access.credential(OPERATOR), ca)


async def rate(url: str, login: Login, operator: Login, count: int, batch: int, run: str) -> float:
    """Messages per second through `Bus.publish_all`, every batch confirmed."""
    setup = await Bus.connect(url, login=operator)
    await setup.ensure_stream()
    await setup.close()
    bus = await Bus.connect(url, login=login, name=WORKER)
    try:
        messages = envelopes(run, count)
        await bus.publish_all(messages[:batch])  # warm: connection, stream, code paths
        started = time.perf_counter()
        for i in range(batch, count, batch):
            await bus.publish_all(messages[i : i + batch])
        return (count - batch) / (time.perf_counter() - started)
    finally:
        await bus.close()


async def measure(count: int, batch: int, reps: int) -> dict[str, Any]:
    rates: dict[str, list[float]] = {c: [] for c in CONFIGURATIONS}
    for rep in range(reps):
        for configuration in CONFIGURATIONS:
            with tempfile.TemporaryDirectory() as folder, server(Path(folder), configuration) as (url, login, operator):
                rates[configuration].append(await rate(url, login, operator, count, batch, f"r{rep}"))
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
    for column in ("server", "msg/s (median)", "cost vs open"):
        table.add_column(column, justify="right")
    for configuration in CONFIGURATIONS:
        cost = result["cost"].get(configuration)
        shown = "-" if cost is None else f"{cost * 100:+.1f}%"
        table.add_row(configuration, f"{result['rate'][configuration]:,.0f}", shown)
    Console().print(table)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
