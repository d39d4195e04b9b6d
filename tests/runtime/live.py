"""A live system for end-to-end tests: nats-server, the journal service and a worker process of the built-in agents."""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio
import msgspec
import nats
from nats.aio.client import Client as NatsClient

from faultline.api import RunPlan, plan_episodes, start_envelopes, worker_specs
from faultline.bus import OPERATOR, Access, Bus
from faultline.core import EpisodeCompleted
from faultline.envs import Domain, load_domain
from faultline.journal import JournalReader, JournalRow
from faultline.runtime import (
    JOURNAL_SERVICE,
    Completions,
    ProcessSpec,
    Supervisor,
    WorkerStatus,
    bus_settings,
    check_system,
    completing_agents,
    load_config,
    system_access,
    worker_identity,
    worker_statuses,
)

EPISODE_TIMEOUT_S = 30.0
JOURNAL_TIMEOUT_S = 30.0
RESUBSCRIBE_POLL_S = 0.05

T = TypeVar("T")


@dataclass(frozen=True)
class Running:
    """A system up for a module's cases, and its journal."""

    supervisor: Supervisor
    journal: Path

    @property
    def bus(self) -> Bus:
        assert self.supervisor.bus is not None
        return self.supervisor.bus

    async def since(self) -> int:
        """Where the stream stands now: what a case journals comes after."""
        return (await self.bus.js.stream_info(self.bus.subjects.stream)).state.last_seq

    def rows_after(self, seq: int) -> list[JournalRow]:
        with JournalReader(self.journal) as reader:
            return [r for r in reader.rows() if r.stream_seq > seq]


def configured_system(folder: Path, toml: str, **overrides: Any) -> Supervisor:
    """The system `faultline up` starts from a `faultline.toml` of `toml` written into `folder`: its configured
    workers and journal, with access control; `overrides` are further `Supervisor` arguments."""
    path = folder / "faultline.toml"
    path.write_text(toml)
    config = load_config(path)
    groups = check_system(config, str(path))
    arguments: dict[str, Any] = {
        "journal_path": folder / "journal.sqlite",
        "workers": worker_specs(config, groups, path),
        "store_dir": folder / "nats",
        "log_dir": folder / "logs",
        "access": system_access(folder / "credentials", config, groups).prepare(),
        "completers": completing_agents(config, groups),
        "bus_settings": bus_settings(config),
        "journal_args": ("--config", str(path)),
    }
    return Supervisor(**(arguments | overrides))


WORKER_AGENTS = ("env", "tool", "user")


def live_access(tmp_path: Path, groups: Mapping[str, tuple[str, ...]] | None = None) -> Access:
    """The credentials of `live_system` (as `faultline up` makes them): the worker group `main` of WORKER_AGENTS,
    and `groups` beside it (credentials only: no process of theirs is started)."""
    return system_access(
        tmp_path / "credentials", load_config(None), {"main": WORKER_AGENTS, **(groups or {})}, "fl"
    ).prepare()


async def raw_client(
    supervisor: Supervisor, identity: str = OPERATOR, error_cb: Callable[[Exception], Awaitable[None]] | None = None
) -> NatsClient:
    """A plain nats-py client on the system's server, logged in as `identity`, as any program could connect
    (its inbox, where answers come, under `_INBOX.<user>`: the only inboxes a user may read)."""
    assert supervisor.access is not None
    login = supervisor.access.credential(identity)
    options: dict[str, Any] = {"error_cb": error_cb} if error_cb else {}
    return await nats.connect(
        supervisor.url,
        user=login.user,
        password=login.password,
        inbox_prefix=f"_INBOX.{login.user}",
        max_reconnect_attempts=1,
        **options,
    )


@asynccontextmanager
async def live_system(
    tmp_path: Path,
    journal: Path | None = None,
    *,
    temporary_store: bool = False,
    groups: Mapping[str, tuple[str, ...]] | None = None,
    helpers: tuple[str, ...] = (),
) -> AsyncIterator[Supervisor]:
    """`faultline up` with one worker of env, tool and user on the sim model; stopped (drained, journaled) after.

    Access control is on, as by default: `live_access` holds the credentials. With `temporary_store`
    the stream lives in a directory of its own, as under `faultline run`. `helpers` (agent names) run
    in a second worker process, `worker-helpers`, as under `faultline run --helpers`.
    """
    config = tmp_path / "faultline.toml"
    config.write_text("")  # defaults only, whatever the working directory holds
    args = ("worker", "--agents", ",".join(WORKER_AGENTS), "--config", str(config))
    workers = [ProcessSpec("worker", args, worker_identity("main"))]
    if helpers:
        groups = {**(groups or {}), "helpers": helpers}
        helper_args = ("worker", "--agents", ",".join(helpers), "--config", str(config))
        workers.append(ProcessSpec("worker-helpers", helper_args, worker_identity("helpers")))
    supervisor = Supervisor(
        journal_path=journal or tmp_path / "journal.sqlite",
        workers=workers,
        store_dir=None if temporary_store else tmp_path / "nats",
        log_dir=tmp_path / "logs",
        access=live_access(tmp_path, groups),
        completers=completing_agents(load_config(config), {"main": WORKER_AGENTS, **(groups or {})}),
    )
    async with supervisor.running():
        yield supervisor


@asynccontextmanager
async def held(context: AbstractAsyncContextManager[T]) -> AsyncIterator[T]:
    """`context`, entered and left by a task of its own: a module's fixture can hold a `live_system` for all its
    tests though its set-up and its teardown run in different tasks (a task group is left in the task that entered
    it). A failure to enter is raised here; the task is awaited on the way out."""
    entered: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    leave = asyncio.Event()

    async def hold() -> None:
        async with context as value:
            entered.set_result(value)
            await leave.wait()

    task = asyncio.create_task(hold())
    try:
        await asyncio.wait([entered, task], return_when=asyncio.FIRST_COMPLETED)
        if not entered.done():
            task.result()  # what stopped it on the way in
        yield entered.result()
    finally:
        leave.set()
        await task


@functools.cache
def retail() -> Domain:
    return load_domain("retail")


def episode_of(run_id: str) -> str:
    (planned,) = plan_episodes(RunPlan(tasks=1, run_id=run_id), retail())
    return planned.episode


async def run_episode(bus: Bus, run_id: str) -> EpisodeCompleted:
    """Run the first retail task as episode `episode_of(run_id)` and return how it completed."""
    plan = RunPlan(tasks=1, run_id=run_id)
    (planned,) = plan_episodes(plan, retail())
    async with Completions(bus) as completions:
        await bus.publish_all(start_envelopes(plan, planned))
        with anyio.fail_after(EPISODE_TIMEOUT_S):
            done = await completions.wait([planned.episode])
    return done[planned.episode]


async def journal_everything(bus: Bus) -> None:
    """Wait until the journal holds everything in the stream, the dead letters it publishes on the way included.

    It publishes a letter before it passes the refused message, so after one round
    every letter is in the stream: a second round takes them in.
    """
    for _ in range(2):
        info = await bus.js.stream_info(bus.subjects.stream)
        answer = msgspec.json.decode(await _ask_journal(bus, msgspec.json.encode({"until": info.state.last_seq})))
        assert answer["last_seq"] >= info.state.last_seq and not answer["stuck"], answer


async def _ask_journal(bus: Bus, ask: bytes) -> bytes:
    """The journal service's answer to `ask`. After nats-server restarts, the journal's connection comes back and
    subscribes again on its own schedule, maybe after the test's: until it has, nobody answers, and it is asked again
    (a poll of its subscription, within the same time limit)."""
    with anyio.fail_after(JOURNAL_TIMEOUT_S):
        while True:
            try:
                reply = await bus.nc.request(bus.subjects.svc(JOURNAL_SERVICE), ask, timeout=JOURNAL_TIMEOUT_S)
            except nats.errors.NoRespondersError:
                await anyio.sleep(RESUBSCRIBE_POLL_S)
                continue
            return reply.data


async def worker_status(url: str, prefix: str) -> list[WorkerStatus]:
    """What every worker answers `faultline status` within its window."""
    bus = await Bus.connect(url, prefix=prefix)
    try:
        return await worker_statuses(bus)
    finally:
        await bus.close()


def processes(supervisor: Supervisor) -> dict[str, int]:
    """Every process of the system with its pid, after checking that none was restarted and all run."""
    assert [row for row in supervisor.status() if row["restarts"]] == []
    assert supervisor.server is not None and supervisor.server.pid is not None
    pids = {row["name"]: row["pid"] for row in supervisor.status()} | {"nats-server": supervisor.server.pid}
    for pid in pids.values():
        os.kill(pid, 0)  # raises if the process is gone
    return pids
