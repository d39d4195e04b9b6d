"""`run_system`: a system's episodes in this process, on a real nats-server, journaled to a real file."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio

from faultline.agents import Scorer
from faultline.api import PlannedEpisode, RunPlan, RunResult, plan_records, run_plan, wait_for_journal
from faultline.bus import Bus
from faultline.core import (
    Envelope,
    EpisodeCompleted,
    ModelBackend,
    System,
    SystemRef,
    load_system,
    read_inputs,
    record_of,
    system_path,
)
from faultline.journal import JournalReader
from faultline.replay import Replayer, ReplayReport
from faultline.runtime import JournalService, RunDefaults, Worker, WorkerSettings

Models = ModelBackend | Callable[[str], ModelBackend]
"""One backend for every model role, or a function of the role."""


@dataclass(frozen=True)
class SystemRun:
    """The episodes `run_system` ran: how each completed, and the journal that holds every message."""

    journal: Path
    system: SystemRef
    planned: list[PlannedEpisode]
    completed: dict[str, EpisodeCompleted]
    """By episode id."""

    def outcome(self, record: str, trial: int = 0) -> EpisodeCompleted:
        """How the episode of input record `record` (its id) and `trial` completed."""
        return self.completed[self.episode(record, trial)]

    def episode(self, record: str, trial: int = 0) -> str:
        """The id of the episode of input record `record` and `trial`."""
        return next(p.episode for p in self.planned if (p.task, p.trial) == (record, trial))

    def messages(self, record: str, trial: int = 0) -> list[Envelope]:
        """The journaled messages of that episode, in stream order (recordings and events included)."""
        with JournalReader(self.journal) as reader:
            return [row.envelope() for row in reader.episode_rows(self.episode(record, trial))]

    def replay(self) -> ReplayReport:
        """Replay the journal with the system's agents: `identical`, or the first divergence of each episode."""
        system = self.system
        scorer = {Scorer.name: Scorer}
        return Replayer(lambda name: system.agent(name) or scorer.get(name)).replay(self.journal)


async def run_system(
    system: str | type[System],
    inputs: Sequence[Mapping[str, object]] | Path,
    *,
    nats_url: str,
    journal: Path,
    models: Models,
    trials: int = 1,
    run_id: str = "test",
    episode_timeout_s: float = 30.0,
    stall_after_s: float = RunDefaults().stall_after_s,
) -> SystemRun:
    """Run each input record `trials` times on `system`, its agents and the scorer in this process.

    `system` is a System subclass (importable by its module and name, so that replay finds it) or its
    `package.module:Class` path; `inputs` are records (dicts, with an optional `id`, else their
    position from 1) or a JSON-lines file. Every message goes through the nats-server at `nats_url`
    and into the SQLite `journal`. An episode still running after `episode_timeout_s` completes as
    `timeout`; one in which nothing is in flight for `stall_after_s` (0: never), as a `failure` whose cause
    begins `stalled:`.
    """
    path = system_path(system)
    ref = load_system(path)
    records = (
        read_inputs(inputs, ref.system.needs)
        if isinstance(inputs, Path)
        else [record_of(item, i) for i, item in enumerate(inputs, start=1)]
    )
    plan = RunPlan(
        domain="",
        system=path,
        tasks=len(records),
        trials=trials,
        run_id=run_id,
        episode_timeout_s=episode_timeout_s,
        stall_after_s=stall_after_s,
    )
    result = RunResult(plan_records(plan, records))
    backends = (lambda _role: models) if isinstance(models, ModelBackend) else models
    bus = await Bus.connect(nats_url)
    try:
        await bus.ensure_stream()
        journal_service = JournalService(bus, journal, completers=(ref.system.completer,))
        worker = Worker(bus, [*ref.system.agents, Scorer], backends=backends, settings=WorkerSettings(system=path))
        async with anyio.create_task_group() as tg:
            tg.start_soon(journal_service.run)
            tg.start_soon(worker.run)
            await journal_service.wait_ready()
            await worker.wait_ready()
            try:
                await run_plan(bus, plan, result, lambda _episode, _done: None)
                await wait_for_journal(bus)
            finally:
                worker.stop()
                journal_service.stop()
    finally:
        await bus.close()
    return SystemRun(journal, ref, result.planned, dict(result.completed))
