"""The supervisor: starts the system as separate OS processes and keeps it running.

Order of start: nats-server (embedded, unless a URL is given), the journal
service, then the other services (memory) and the workers side by side: each
process spends seconds importing, and none needs another to start. Order of stop: workers
first (each drains what it holds), then the services (they finish the events
already in the stream), then the journal (it catches up with the stream), then
the server. A process that dies unasked, nats-server included, is restarted
with exponential backoff for as long as the system runs: a restart that fails is
logged with the process's name and tried again later, and the rest keeps running.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import anyio
import msgspec
from anyio.abc import Process

from faultline._errors import BusError, ServerError
from faultline._parent import supervised_env
from faultline.bus import (
    OPEN_TELLER,
    OPERATOR,
    Access,
    Bus,
    BusSettings,
    EmbeddedServer,
    Login,
    Message,
    TLSFiles,
    WorkerId,
    decode_notice,
    hear,
    tell,
)
from faultline.runtime._episodes import JOURNAL_SERVICE, JOURNAL_STATE, PROCESS_SERVICE, READY, JournalState
from faultline.runtime._journal_service import ANY_COMPLETER, journal_process

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
RESTART_BACKOFF_S = 0.5
RESTART_BACKOFF_MAX_S = 10.0
STABLE_AFTER_S = 30.0
"""A process that ran this long before it exited is restarted after the shortest backoff again."""

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ProcessSpec:
    """A child process: its name (also its ready announcement), its `faultline` arguments, and the NATS
    identity it connects as (its credential file is passed with `--creds` when the system has access control)."""

    name: str
    args: tuple[str, ...]
    identity: str = ""


@dataclass
class _Child:
    spec: ProcessSpec
    process: Process | None = None
    restarts: int = 0
    log: IO[bytes] | None = None
    started: float = 0.0


class _Ready(msgspec.Struct):
    """A process's announcement that it serves (`announce_ready`)."""

    name: str = ""


async def announce_ready(bus: Bus, name: str) -> None:
    """Tell a waiting supervisor that process `name` serves now, under this process's NATS user: the supervisor
    takes a process for ready only from the user it started it as."""
    await tell(bus, PROCESS_SERVICE, READY, msgspec.json.encode({"name": name, "pid": os.getpid()}))
    await bus.flush()


@dataclass
class Supervisor:
    """Runs `journal` and `workers` as child processes of this one; see the module docstring."""

    journal_path: Path
    workers: Sequence[ProcessSpec]
    services: Sequence[ProcessSpec] = ()
    nats_url: str = ""
    prefix: str = "fl"
    bus_settings: BusSettings = field(default_factory=BusSettings)
    store_dir: Path | None = None
    log_dir: Path | None = None
    extra_args: tuple[str, ...] = ()
    journal_args: tuple[str, ...] = ()
    """More arguments of `faultline journal serve` (e.g. --otel URL)."""
    journal_shards: int = 1
    """Journal services, each writing its shard of the journal set at `journal_path` (1: the file itself)."""
    journal_trim_after_s: float = 0.0
    """How long the stream keeps a settled episode's messages (`[journal] trim_after_s`; 0: for ever)."""
    completers: tuple[str, ...] | None = None
    """The agents that may complete an episode (`completing_agents`): the journal dead-letters any other's
    completion; None has it journal every completion."""
    access: Access | None = None
    """Credentials and permissions (prepared); None runs without access control (`--insecure`)."""
    server_tls: TLSFiles | None = None
    """The embedded server's certificate and key, when it speaks TLS."""
    tls_ca: Path | None = None
    """The CA every process of the system checks the server's certificate against; None without TLS."""
    sync_interval: str = ""
    """The embedded server's JetStream sync policy (`EmbeddedServer.sync_interval`)."""
    server_cores: int = 0
    """The cores the embedded server runs on at once (`EmbeddedServer.cores`)."""
    bus: Bus | None = None
    server: EmbeddedServer | None = None
    _children: dict[str, _Child] = field(default_factory=dict)
    _ready: dict[str, anyio.Event] = field(default_factory=dict)
    _tellers: dict[str, str] = field(default_factory=dict)
    """The NATS user each process was started as: its readiness counts only told under that name."""
    _stopping: bool = False

    @property
    def url(self) -> str:
        return self.nats_url or (self.server.url if self.server else "")

    @property
    def worker_ids(self) -> list[WorkerId]:
        """The workers as they confirm fault rules (`publish_controls`): each by its credential and its name."""
        return [(self._teller_of(spec), spec.name) for spec in self.workers]

    def _teller_of(self, spec: ProcessSpec) -> str:
        """The NATS user process `spec` tells under: its identity, or anyone's on a server without users."""
        return spec.identity if self.access else OPEN_TELLER

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Start everything and return once every process announced it is ready."""
        await self.open(tg)
        await self.spawn(tg)

    async def open(self, tg: anyio.abc.TaskGroup) -> None:
        """Start the embedded nats-server (unless a URL is given), connect to it and make the stream: what `spawn`
        needs. In the task that will `stop`, which closes the connection."""
        access = self.access
        if not self.nats_url:
            config_file = access.server_config if access else None
            self.server = EmbeddedServer(
                store_dir=self.store_dir,
                config_file=config_file,
                tls=self.server_tls,
                sync_interval=self.sync_interval,
                cores=self.server_cores,
            )
            await anyio.to_thread.run_sync(self.server.start)
            tg.start_soon(self._watch_server, self.server)
        self.bus = await Bus.connect(
            self.url,
            prefix=self.prefix,
            settings=self.bus_settings,
            name=OPERATOR,
            login=Login(access.credential(OPERATOR) if access else None, self.tls_ca),
        )
        await self.bus.ensure_stream()
        if access is not None:
            await self.bus.ensure_consumers(access.consumers)  # the workers may only read them, not make them
        await hear(self.bus, PROCESS_SERVICE, READY, self._on_ready)
        await hear(self.bus, JOURNAL_SERVICE, JOURNAL_STATE, self._on_journal_state)

    async def spawn(self, tg: anyio.abc.TaskGroup) -> None:
        """Start the journal services, then the other services and the workers side by side (`open` first), and
        return once every one announced it is ready; `tg` keeps them running."""
        completers = ("--completers", ANY_COMPLETER if self.completers is None else ",".join(self.completers))
        partitions = ("--partitions", str(self.bus_settings.partitions))
        trim = ("--trim-after-s", f"{self.journal_trim_after_s:g}")
        journal_args = ("journal", "serve", str(self.journal_path), *completers, *partitions, *trim, *self.journal_args)
        shards = self.journal_shards
        await self._spawn(
            tg,
            [
                ProcessSpec(
                    name, (*journal_args, *(("--shard", str(k), "--shards", str(shards)) if shards > 1 else ())), name
                )
                for k, name in enumerate(self.journal_names)
            ],
        )
        await self._spawn(tg, [*self.services, *self.workers])

    @property
    def journal_names(self) -> list[str]:
        """The journal services' process names, which are also their identities: one per shard."""
        return [journal_process(k, self.journal_shards) for k in range(self.journal_shards)]

    async def _on_ready(self, teller: str, msg: Message) -> None:
        ready = decode_notice(msg.data, _Ready, subject=msg.subject)
        if ready is None or ready.name not in self._ready:
            return
        started_as = self._tellers[ready.name]
        if teller != started_as:
            log.warning(
                "ignoring %r's readiness told by NATS user %r: it was started as %r", ready.name, teller, started_as
            )
            return
        self._ready[ready.name].set()

    async def _on_journal_state(self, _: str, msg: Message) -> None:
        """Tell the user when the journal cannot write, and when it can again."""
        state = decode_notice(msg.data, JournalState, subject=msg.subject)
        if state is None:
            return
        which = "the journal" if state.shards == 1 else f"journal shard {state.shard}"
        if state.stuck:
            log.error(
                "%s cannot write (%s): new episodes are refused until it can; the stream keeps every message",
                which,
                state.stuck,
            )
        else:
            log.warning("%s writes again from stream sequence %d and catches up", which, state.last_seq + 1)

    def _argv(self, spec: ProcessSpec) -> list[str]:
        common = ["--nats", self.url, "--prefix", self.prefix, "--name", spec.name, *self.extra_args]
        if self.access is not None and spec.identity:
            common += ["--creds", str(self.access.credential_file(spec.identity))]
        if self.tls_ca is not None:
            common += ["--tls-ca", str(self.tls_ca)]
        return [sys.executable, "-m", "faultline.cli", *spec.args, *common]

    async def _spawn(self, tg: anyio.abc.TaskGroup, specs: Sequence[ProcessSpec]) -> None:
        """Start `specs` together and return once all are ready, then keep them running.

        ServerError names the first (in `specs`' order) that did not become ready.
        """
        children = [self._children.setdefault(spec.name, _Child(spec)) for spec in specs]
        ready: dict[str, bool] = {}

        async def launch(child: _Child) -> None:
            ready[child.spec.name] = await self._launch(child)

        async with anyio.create_task_group() as starting:
            for child in children:
                starting.start_soon(launch, child)
        for child in children:
            if not ready[child.spec.name]:
                raise ServerError(f"process {child.spec.name} did not become ready{self._see_log(child.spec.name)}")
        for child in children:
            tg.start_soon(self._watch, child)

    async def _launch(self, child: _Child) -> bool:
        """Start the child's process; True once it announced it is ready, False if it died or timed out first."""
        spec = child.spec
        self._ready[spec.name] = anyio.Event()
        self._tellers[spec.name] = self._teller_of(spec)
        if self.log_dir is not None and child.log is None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            child.log = open(self.log_dir / f"{spec.name}.log", "ab")  # noqa: SIM115 - closed in stop()
        # A session of its own: a terminal's Ctrl-C reaches this process only, which stops children in order.
        # Started from the event loop's thread, which lives as long as this process: the child ends with it.
        child.process = await anyio.open_process(
            self._argv(spec), stdin=None, stdout=child.log, stderr=child.log, start_new_session=True,
            env=supervised_env(),
        )  # fmt: skip
        process = child.process
        child.started = anyio.current_time()
        ready = self._ready[spec.name]
        with anyio.move_on_after(READY_TIMEOUT_S) as timeout:
            async with anyio.create_task_group() as wait:

                async def until_ready() -> None:
                    await ready.wait()
                    wait.cancel_scope.cancel()

                wait.start_soon(until_ready)
                await process.wait()  # returns only if the child dies first
                wait.cancel_scope.cancel()
        if timeout.cancelled_caught and process.returncode is None:
            process.kill()
            await process.wait()
        return process.returncode is None

    def _stopped(self) -> bool:
        """Whether `stop()` began; a call, so that a check after an await is not taken for a repeat."""
        return self._stopping

    def _see_log(self, name: str) -> str:
        return f" (see {self.log_dir / (name + '.log')})" if self.log_dir else ""

    async def _watch(self, child: _Child) -> None:
        """Restart `child` whenever it exits unasked, with backoff, until the system stops.

        A restart that fails (the process dies or is not ready in time) is logged and
        tried again after a longer wait; the other processes run on meanwhile.
        """
        failures = 0
        while True:
            process = child.process
            assert process is not None
            await process.wait()
            if self._stopped():
                return
            failures = 1 if anyio.current_time() - child.started >= STABLE_AFTER_S else failures + 1
            delay = _backoff(failures)
            log.error(
                "%s is down (exit code %s); restarting it in %.1fs%s",
                child.spec.name,
                process.returncode,
                delay,
                self._see_log(child.spec.name),
            )
            await anyio.sleep(delay)
            if self._stopped():
                return
            await process.aclose()
            child.restarts += 1
            if await self._launch(child):
                assert child.process is not None
                log.warning(
                    "%s is running again (pid %d, restart %d)", child.spec.name, child.process.pid, child.restarts
                )

    async def _watch_server(self, server: EmbeddedServer) -> None:
        """Restart the embedded nats-server on its port and store when it dies; clients reconnect by themselves."""
        failures = 0
        while True:
            started = anyio.current_time()
            code = await anyio.to_thread.run_sync(server.wait, abandon_on_cancel=True)
            if self._stopped():
                return
            failures = 1 if anyio.current_time() - started >= STABLE_AFTER_S else failures + 1
            delay = _backoff(failures)
            log.error("nats-server is down (exit code %s); restarting it on %s in %.1fs", code, server.url, delay)
            await anyio.sleep(delay)
            if self._stopped():
                return
            try:
                await anyio.to_thread.run_sync(server.restart)
            except ServerError as exc:
                log.error("%s", exc)
            else:
                log.warning("nats-server is running again on %s (pid %s)", server.url, server.pid)

    def pid(self, name: str) -> int | None:
        child = self._children.get(name)
        return child.process.pid if child and child.process else None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Supervisor]:
        """Every process started for the block, and stopped in order after it, also after an error."""
        async with anyio.create_task_group() as tg:
            try:
                await self.start(tg)
                yield self
            finally:
                with anyio.CancelScope(shield=True):
                    await self.stop()
                tg.cancel_scope.cancel()

    async def stop(self) -> None:
        """Drain workers, let the journal catch up, stop the server. Safe to call twice.

        A temporary stream store that holds what the journal did not take in is kept, and the log says where.
        """
        self._stopping = True
        services = {spec.name for spec in self.services}
        journals = set(self.journal_names)
        await self._terminate([c for name, c in self._children.items() if name not in journals | services])
        await self._terminate([c for name, c in self._children.items() if name in services])
        await self._terminate([c for name, c in self._children.items() if name in journals])
        kept = await self._store_to_keep()
        for child in self._children.values():
            if child.log is not None:
                child.log.close()
                child.log = None
        if self.bus is not None:
            await self.bus.close()
            self.bus = None
        if self.server is not None:
            await anyio.to_thread.run_sync(functools.partial(self.server.stop, keep_store=kept is not None))
            self.server = None
        if kept is not None:
            log.error(
                "the journal did not take in the whole stream, so the stream's store is kept in %s: run"
                " `faultline up` with nats.store_dir = %s and journal.path = %s to journal the rest",
                kept,
                kept,
                self.journal_path,
            )

    async def _store_to_keep(self) -> Path | None:
        """The temporary stream store, if a journal service did not end cleanly and the stream holds messages."""
        if self.server is None or not self.server.temporary or self.bus is None:
            return None
        if all(self.exit_code(name) == 0 for name in self.journal_names):
            return None  # each exits 0 only after taking in the whole stream
        try:
            state = await self.bus.stream_state()
        except BusError:
            return self.server.store_dir  # cannot tell: keep it
        return self.server.store_dir if state.messages else None

    async def _terminate(self, children: list[_Child]) -> None:
        live = [c.process for c in children if c.process is not None and c.process.returncode is None]
        for process in live:
            process.send_signal(signal.SIGTERM)
        for process in live:
            with anyio.move_on_after(STOP_TIMEOUT_S) as scope:
                await process.wait()
            if scope.cancelled_caught:
                process.kill()
                await process.wait()
        for process in [c.process for c in children if c.process is not None]:
            await process.aclose()

    def exit_code(self, name: str) -> int | None:
        """How process `name` last ended: None while it runs or if it never started."""
        child = self._children.get(name)
        return child.process.returncode if child is not None and child.process is not None else None

    def status(self) -> list[dict[str, Any]]:
        """Each child's name, pid, restarts, exit status (None while it runs), and whether the process running
        now announced it serves (a restarted one is not ready until it did)."""
        return [
            {
                "name": n,
                "pid": c.process.pid if c.process else None,
                "restarts": c.restarts,
                "returncode": c.process.returncode if c.process else None,
                "ready": c.process is not None and c.process.returncode is None and self._ready[n].is_set(),
            }
            for n, c in self._children.items()
        ]


def _backoff(failures: int) -> float:
    """The wait before restart attempt `failures` (1, 2, ...) of a process that keeps failing."""
    return float(min(RESTART_BACKOFF_S * 2 ** (failures - 1), RESTART_BACKOFF_MAX_S))
