"""Cells: independent systems on one host, each a nats-server with its own stream, journal shard and workers.

One nats-server stores and delivers every message of a system, about 2.9 ms of its CPU per retail episode (sim),
so a host's live throughput stops at what one server does, however many cores it has. Cells divide that work.
Cell k is a whole system of its own (a `Supervisor`): its server holds only the episodes that
`core.episode_cell(episode, cells)` gives k, its journal service writes shard k of the journal set, and its
workers (worker shards too, which divide the cell's episodes by another hash) handle what its stream delivers.
No message crosses cells, so no server routes to another; the runner sends each episode's start to its cell's
server, and every agent's answer stays there.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio
import msgspec

from faultline._errors import FaultlineError
from faultline.bus import Bus, default_server_cores
from faultline.journal import shard_path
from faultline.runtime._config import Config
from faultline.runtime._supervisor import Supervisor


def cell_config(config: Config, journal: Path, cell: int) -> Config:
    """Cell `cell`'s own configuration: a system of one stream whose journal is its shard's file in the set at
    `journal`, and whose server runs on its share of the cores one server would have (`default_server_cores`),
    unless the configuration or the environment (GOMAXPROCS) says how many."""
    cores = config.nats.server_cores
    if not cores and "GOMAXPROCS" not in os.environ:
        cores = default_server_cores(config.nats.cells)
    return msgspec.structs.replace(
        config,
        nats=msgspec.structs.replace(config.nats, cells=1, server_cores=cores),
        journal=msgspec.structs.replace(config.journal, shards=1, path=str(shard_path(journal, cell))),
    )


@dataclass
class Cells:
    """Several cells' supervisors, started and stopped as one system: cell k's is `supervisors[k]`."""

    supervisors: Sequence[Supervisor]
    journal: Path
    """The journal set the cells write, a shard each."""

    @property
    def buses(self) -> list[Bus]:
        """The operator's connection to each cell's server, in cell order (once started)."""
        buses = [supervisor.bus for supervisor in self.supervisors if supervisor.bus is not None]
        assert len(buses) == len(self.supervisors), "the cells are not started"
        return buses

    async def start(self, tg: anyio.abc.TaskGroup) -> None:
        """Start every cell, and return once each has every process ready; the first failure if one does not.

        The servers and connections one after another in this task, which also stops them (a connection lives in
        the task that opened it); the processes, which spend seconds importing, in every cell at once.
        """
        for supervisor in self.supervisors:
            await supervisor.open(tg)
        try:
            async with anyio.create_task_group() as spawning:
                for supervisor in self.supervisors:
                    spawning.start_soon(supervisor.spawn, tg)
        except* FaultlineError as failed:
            raise failed.exceptions[0] from None

    async def stop(self) -> None:
        """Stop every cell, in order within each (`Supervisor.stop`), the last started first."""
        for supervisor in reversed(self.supervisors):
            await supervisor.stop()
