"""The lifecycle of a system a program starts: its processes, their order, and the signals that stop it.

`run` and the command line's `up` share these: which worker processes a configuration asks for,
starting them under a `Supervisor`, and stopping them in order on SIGTERM, SIGINT or SIGHUP.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio

from faultline.bus import OPERATOR, TLSFiles, make_certificates
from faultline.core import helper_agent
from faultline.runtime import (
    DEFAULT_CONFIG_FILE,
    HELPER_GROUP,
    Cells,
    Config,
    ProcessSpec,
    Supervisor,
    worker_identity,
    worker_places,
)

T = TypeVar("T")
S = TypeVar("S", bound=Supervisor | Cells)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""Signals on which `up` and `run` stop their system in order: workers, services, journal, server."""


def made_tls(config: Config, folder: Path) -> TLSFiles:
    """The embedded server's TLS files: the configuration's own, else made (once) in `folder`."""
    n = config.nats
    if n.tls_cert:
        return TLSFiles(Path(n.tls_ca), Path(n.tls_cert), Path(n.tls_key))
    return make_certificates(folder)


def config_source(path: Path | None) -> str:
    """How errors name the configuration: its file (`./faultline.toml` when none was given and it exists), else the
    built-in defaults."""
    if path is None and DEFAULT_CONFIG_FILE.is_file():
        return str(DEFAULT_CONFIG_FILE)
    return str(path) if path else "built-in defaults"


def config_flag(config_path: Path | None) -> tuple[str, ...]:
    """`--config PATH` for a process a system starts, so it reads the file its starter read; none for the default
    (`./faultline.toml` where it exists: the processes start in the starter's folder)."""
    return ("--config", str(config_path)) if config_path else ()


def worker_specs(config: Config, groups: dict[str, tuple[str, ...]], config_path: Path | None) -> list[ProcessSpec]:
    """One process per worker instance of `groups` (what `check_system` accepted, and `with_helpers`);
    a group the config does not declare runs one process."""
    return [
        ProcessSpec(
            place.name,
            ("worker", "--agents", ",".join(place.agents), "--shard", place.shard_text, *config_flag(config_path)),
            worker_identity(place.group, place.shard, place.shards, config.partitions),
        )
        for place in worker_places(config, groups)
    ]


def with_helpers(groups: dict[str, tuple[str, ...]], roster: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """`groups` and, when the roster names helpers, a group that runs their agents."""
    return {**groups, HELPER_GROUP: tuple(map(helper_agent, roster))} if roster else groups


def fama_service(config: Config, config_path: Path | None, journal: Path) -> list[ProcessSpec]:
    """The FAMA controller's service when `[fama] enabled`; it publishes rosters, so it runs as the operator.

    `journal` is the file `up`'s journal service writes, which `[fama] attribution` reads.
    """
    if not config.fama.enabled:
        return []
    return [ProcessSpec("fama", ("fama", "serve", *config_flag(config_path), "--journal", str(journal)), OPERATOR)]


def roster_worker(config_path: Path | None) -> ProcessSpec:
    """The worker of a long-running system that serves the helpers the live roster asks for."""
    return ProcessSpec(
        HELPER_GROUP, ("worker", "--follow-roster", *config_flag(config_path)), worker_identity(HELPER_GROUP)
    )


@dataclass
class StopRequest:
    """The signal that ended a `stop_on_signal` block, or None when the block ended by itself."""

    signum: int | None = None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum else ""


@asynccontextmanager
async def stop_on_signal(*alongside: Callable[[], Coroutine[Any, Any, None]]) -> AsyncIterator[StopRequest]:
    """Cancel the block at the first of STOP_SIGNALS; its `finally` clauses then stop what it started.

    The `alongside` tasks (a progress display) run until the block ends. An error raised in the
    block leaves it as itself, not wrapped in an exception group. Only the main thread receives
    signals: elsewhere (a notebook's `asyncio.to_thread(run, ...)`) the block runs to its end.
    """
    request = StopRequest()
    error: Exception | None = None
    in_main_thread = threading.current_thread() is threading.main_thread()
    with anyio.open_signal_receiver(*STOP_SIGNALS) if in_main_thread else contextlib.nullcontext() as signals:
        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                assert signals is not None
                async for signum in signals:
                    request.signum = signum
                    tg.cancel_scope.cancel()
                    return

            if signals is not None:
                tg.start_soon(watch)
            for task in alongside:
                tg.start_soon(task)
            try:
                yield request
            except Exception as exc:  # noqa: BLE001 - raised again below, outside the task group
                error = exc
            tg.cancel_scope.cancel()
    if error is not None:
        raise error


async def run_supervised(
    supervisor: S,
    work: Callable[[S], Awaitable[T]],
    *alongside: Callable[[], Coroutine[Any, Any, None]],
) -> tuple[T | None, StopRequest]:
    """Start the system, run `work` on it, then stop every process in order, also after an error or a signal.

    Returns what `work` returned (None when a signal cut it short) and the signal, if one came.
    """
    result: T | None = None
    error: Exception | None = None
    async with anyio.create_task_group() as tg:
        async with stop_on_signal(*alongside) as request:
            try:
                await supervisor.start(tg)
                result = await work(supervisor)
            except Exception as exc:  # noqa: BLE001 - raised again below, outside the task group
                error = exc
            finally:
                with anyio.CancelScope(shield=True):
                    await supervisor.stop()
        tg.cancel_scope.cancel()
    if error is not None:
        raise error
    return result, request


def journal_problem(supervisor: Supervisor | Cells) -> str:
    """Empty when the journal service exited 0 once asked to stop, which it does only after copying the
    whole stream; else what happened to it, in words (of each cell's, naming the cell)."""
    if isinstance(supervisor, Cells):
        told = (journal_problem(cell) for cell in supervisor.supervisors)
        return "; ".join(f"cell {k}: {problem}" for k, problem in enumerate(told) if problem)
    problems = []
    for name in supervisor.journal_names:
        code = supervisor.exit_code(name)
        if code == 0:
            continue
        log = f" (see {supervisor.log_dir / (name + '.log')})" if supervisor.log_dir else ""
        service = "the journal service" if name == "journal" else f"journal service {name}"
        if code is None:
            problems.append(f"{service} did not run")
        elif code < 0:
            problems.append(f"{service} was ended by {signal.Signals(-code).name}{log}")
        else:
            problems.append(f"{service} exited with status {code}{log}")
    return "; ".join(problems)
