"""Entry points of the long-running processes: a worker and the journal service.

Each connects to NATS, serves until SIGTERM or SIGINT, then stops the way its
docstring promises (a worker drains, the journal catches up) and exits 0.
"""

from __future__ import annotations

import contextlib
import gc
import signal
from collections.abc import AsyncIterator, Callable, Collection
from pathlib import Path
from typing import Any, Protocol

import anyio

from faultline._errors import JournalError
from faultline.bus import Bus, BusSettings, Login
from faultline.runtime._agents import agent_names, resolve_agents
from faultline.runtime._config import Config, connect, make_backend
from faultline.runtime._faulting import faults_and_defenses, injector_for, request_faults
from faultline.runtime._helper_pool import HelperPool
from faultline.runtime._journal_service import TRIM_EVERY_S, JournalService
from faultline.runtime._otel_stream import OtelStream
from faultline.runtime._supervisor import announce_ready
from faultline.runtime._worker import Worker, WorkerSettings

COLLECT_EVERY = 50_000
"""Allocations between collections of the youngest generation in a service process (Python's default: 700)."""


class _Service(Protocol):
    async def run(self) -> None: ...

    async def wait_ready(self) -> None: ...

    def stop(self) -> None: ...


async def serve_until_signal(
    bus: Bus, name: str, service: _Service, on_ready: Callable[[], None] | None = None
) -> None:
    """Run `service`, announce it ready as `name` (and tell `on_ready`), stop it on SIGTERM/SIGINT."""
    async with anyio.create_task_group() as tg:

        async def watch_signals() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for _ in signals:
                    service.stop()
                    return

        async def run() -> None:
            await service.run()
            tg.cancel_scope.cancel()

        tg.start_soon(watch_signals)
        tg.start_soon(run)
        await service.wait_ready()
        await announce_ready(bus, name)
        if on_ready is not None:
            on_ready()


def tune_collector() -> None:
    """Collect garbage less often in a process of ours (a service, a worker, the runner of `faultline run`).

    Each message allocates a few dozen short-lived objects that form no cycles (the
    client's message, its headers, the envelope, the row), so with Python's default
    threshold the collector ran every few dozen messages: 18% of the journal service's
    CPU per message, measured. Objects alive after start-up are frozen out of collection.
    """
    gc.freeze()
    gc.set_threshold(COLLECT_EVERY, 20, 20)


@contextlib.asynccontextmanager
async def serving(bus: Bus) -> AsyncIterator[Bus]:
    """`bus` once the stream exists (a process may be the first to reach a new server), closed on the way out."""
    try:
        await bus.ensure_stream()
        yield bus
    finally:
        await bus.close()


def worker_settings(config: Config, shard: tuple[int, int] = (0, 1)) -> WorkerSettings:
    """A worker's limits from `[runtime]`, for shard `shard[0]` of `shard[1]`."""
    r = config.runtime
    return WorkerSettings(
        concurrency=r.concurrency,
        handler_timeout_s=config.handler_timeout_s,
        ack_wait_s=r.ack_wait_s,
        drain_timeout_s=r.drain_timeout_s,
        linger_s=r.linger_s,
        shard=shard[0],
        shards=shard[1],
        system=config.system.class_,
    )


async def run_worker(
    config: Config,
    url: str,
    prefix: str,
    agents: list[str],
    name: str,
    shard: tuple[int, int],
    login: Login | None = None,
    *,
    follow_roster: bool = False,
    on_ready: Callable[[], None] | None = None,
) -> None:
    """Serve `agents`; with `follow_roster`, also the helpers the live roster asks for (`HelperPool`). `on_ready`
    is told once the worker serves."""
    classes = resolve_agents(agents, config)
    settings = worker_settings(config, shard)
    agent_settings: dict[str, dict[str, Any]] = {n: {"model_role": a.model_role or n} for n, a in config.agents.items()}

    tune_collector()
    async with (
        serving(await connect(config, url, prefix=prefix, name=name, login=login)) as bus,
        faults_and_defenses(bus, config, agent_names(config), name) as faults,
    ):
        worker = Worker(bus, classes, lambda role: make_backend(config, role), settings, agent_settings, name=name)
        faults.injector = injector_for(bus, worker, worker.recorded_for)
        worker.request_faults = request_faults(bus, faults)
        if follow_roster:
            pool = HelperPool(worker, resolve=lambda agent: resolve_agents([agent], config)[0])
            await serve_until_signal(bus, name, pool, on_ready)
        else:
            await serve_until_signal(bus, name, worker, on_ready)


async def run_journal(
    url: str,
    prefix: str,
    path: Path,
    name: str,
    settings: BusSettings | None = None,
    login: Login | None = None,
    otel: OtelStream | None = None,
    completers: Collection[str] | None = None,
    shard: int = 0,
    shards: int = 1,
    trim_after_s: float = 0.0,
    trim_every_s: float = TRIM_EVERY_S,
    on_ready: Callable[[], None] | None = None,
) -> None:
    """Serve the journal (shard `shard` of `shards` of the set at `path`, with more than one); with `otel`, each episode goes to its endpoint once its completion is journaled. `on_ready` is told once it serves.

    A completion from a sender that is neither the runner nor one of `completers` is dead-lettered. With
    `trim_after_s` it trims the stream, every `trim_every_s`, of what it journaled of episodes silent that long and
    of the dead letters every journal shard holds (`JournalService`).
    """
    tune_collector()
    try:
        bus = await Bus.connect(url, prefix=prefix, settings=settings or BusSettings(), name=name, login=login)
        async with serving(bus):
            if otel is None:
                service = JournalService(
                    bus,
                    path,
                    completers=completers,
                    shard=shard,
                    shards=shards,
                    trim_after_s=trim_after_s,
                    trim_every_s=trim_every_s,
                )
                await serve_until_signal(bus, name, service, on_ready)
                return
            async with anyio.create_task_group() as tg:
                tg.start_soon(otel.run)
                try:
                    service = JournalService(
                        bus,
                        path,
                        on_completed=otel.completed,
                        completers=completers,
                        shard=shard,
                        shards=shards,
                        trim_after_s=trim_after_s,
                        trim_every_s=trim_every_s,
                    )
                    await serve_until_signal(bus, name, service, on_ready)
                finally:
                    with anyio.CancelScope(shield=True):
                        await otel.close()
                    tg.cancel_scope.cancel()
    except* JournalError as failed:  # one line on stderr, not a traceback
        raise failed.exceptions[0] from None
