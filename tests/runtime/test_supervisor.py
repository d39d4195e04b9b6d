"""The supervisor keeps a live system running: failed restarts, a killed nats-server, a full journal disk."""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

from faultline._errors import JournalError
from faultline.api import RunPlan, plan_episodes
from faultline.bus import OPERATOR, Bus, EmbeddedServer
from faultline.journal import JournalReader, verify
from faultline.runtime import Completions, Supervisor, check_journal
from faultline.runtime._journal_service import JournalService
from tests.disk import fill
from tests.runtime.live import (
    episode_of,
    journal_everything,
    live_access,
    live_system,
    processes,
    retail,
    run_episode,
)

pytestmark = pytest.mark.slow


class Said(logging.Handler):
    """What the supervisor logs, line by line, with a way to wait for a line."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []
        self._arrived = anyio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
        self._arrived.set()
        self._arrived = anyio.Event()

    async def wait_for(self, text: str, after: int = 0) -> int:
        """Wait for a line holding `text` past the first `after` lines; return how many lines there are then."""
        with anyio.fail_after(60):
            while not any(text in line for line in self.lines[after:]):
                await self._arrived.wait()
        return len(self.lines)


@contextmanager
def supervisor_log() -> Iterator[Said]:
    said = Said()
    logger = logging.getLogger("faultline.runtime._supervisor")
    logger.addHandler(said)
    try:
        yield said
    finally:
        logger.removeHandler(said)


def journal_content(path: Path) -> tuple[list[int], set[str]]:
    """Stream sequences in journal order, and the episodes journaled."""
    with JournalReader(path) as reader:
        rows = list(reader.rows())
    return [r.stream_seq for r in rows], {r.episode for r in rows}


def pids(supervisor: Supervisor) -> dict[str, int | None]:
    """Every process's pid now, whatever state it is in."""
    assert supervisor.server is not None
    return {row["name"]: row["pid"] for row in supervisor.status()} | {"nats-server": supervisor.server.pid}


def ready(supervisor: Supervisor) -> dict[str, bool]:
    """Whether each process running now announced that it serves."""
    return {row["name"]: row["ready"] for row in supervisor.status()}


async def test_a_restart_that_fails_is_retried_and_the_rest_runs_on(tmp_path: Path) -> None:
    journal, saved = tmp_path / "journal.sqlite", tmp_path / "saved.sqlite"
    with supervisor_log() as said:
        async with live_system(tmp_path, journal) as supervisor:
            bus = supervisor.bus
            assert bus is not None
            assert (await run_episode(bus, "before")).outcome == "success"
            await journal_everything(bus)
            others = {name: pid for name, pid in processes(supervisor).items() if name != "journal"}
            journal.rename(saved)
            journal.mkdir()  # where the journal was: its restart fails until this is gone
            pid = supervisor.pid("journal")
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            seen = await said.wait_for("journal is down (exit code -9)")
            await said.wait_for("journal is down (exit code 1); restarting it in 1.0s", after=seen)
            assert not ready(supervisor)["journal"] and ready(supervisor)["worker"]
            assert (await run_episode(bus, "during")).outcome == "success"
            assert {name: pid for name, pid in pids(supervisor).items() if name != "journal"} == others
            journal.rmdir()
            saved.rename(journal)
            await said.wait_for("journal is running again")
            assert ready(supervisor)["journal"]
            await journal_everything(bus)
    assert any(f"(see {tmp_path / 'logs' / 'journal.log'})" in line for line in said.lines)
    seqs, episodes = journal_content(journal)
    assert seqs == list(range(1, len(seqs) + 1))
    assert {episode_of("before"), episode_of("during")} <= episodes
    assert verify(journal).ok


async def test_a_killed_nats_server_is_restarted_and_nothing_is_lost(tmp_path: Path) -> None:
    journal = tmp_path / "journal.sqlite"
    with supervisor_log() as said:
        async with live_system(tmp_path, journal) as supervisor:
            bus = supervisor.bus
            assert bus is not None and supervisor.server is not None
            assert (await run_episode(bus, "before")).outcome == "success"
            await journal_everything(bus)
            old = supervisor.server.pid
            assert old is not None
            os.kill(old, signal.SIGKILL)
            await said.wait_for("nats-server is down (exit code -9)")
            await said.wait_for("nats-server is running again")
            assert supervisor.server.pid not in (None, old)
            assert (await run_episode(bus, "after")).outcome == "success"
            await journal_everything(bus)
    seqs, episodes = journal_content(journal)
    assert seqs == list(range(1, len(seqs) + 1))
    assert {episode_of("before"), episode_of("after")} <= episodes
    assert verify(journal).ok


async def test_a_full_journal_disk_refuses_new_episodes_loses_nothing_and_catches_up(
    tmp_path: Path, small_disk: Path
) -> None:
    journal = small_disk / "journal.sqlite"
    with supervisor_log() as said:
        async with live_system(tmp_path, journal) as supervisor:
            bus = supervisor.bus
            assert bus is not None
            assert (await run_episode(bus, "before")).outcome == "success"
            await journal_everything(bus)
            before = processes(supervisor)
            filler = fill(small_disk)
            assert (await run_episode(bus, "full")).outcome == "success"  # the stream takes it, the file cannot
            await said.wait_for("the journal cannot write (")
            with pytest.raises(JournalError) as refused:
                await check_journal(bus)
            assert "database or disk is full" in str(refused.value)
            run = await anyio.run_process(
                [
                    sys.executable,
                    "-m",
                    "faultline.cli",
                    "run",
                    "--nats",
                    supervisor.url,
                    "--creds",
                    str(live_access(tmp_path).credential_file(OPERATOR)),
                    "--tasks",
                    "1",
                    "--json",
                ],
                check=False,
            )
            err = run.stderr.decode()
            assert run.returncode == 1 and err.count("\n") == 1, err
            assert err.startswith("faultline: error: new episodes are refused while the journal cannot write (")
            filler.unlink()
            await said.wait_for("the journal writes again")
            await journal_everything(bus)
            assert (await run_episode(bus, "after")).outcome == "success"
            await journal_everything(bus)
            assert processes(supervisor) == before
    seqs, episodes = journal_content(journal)
    assert seqs == list(range(1, len(seqs) + 1))
    assert {episode_of("before"), episode_of("full"), episode_of("after")} <= episodes
    assert verify(journal).ok


async def test_a_run_the_full_journal_cuts_short_counts_what_completed_and_says_how_to_run_the_rest(
    tmp_path: Path, run_disk: Path
) -> None:
    """docs/reliability.md: a run stops starting episodes while the journal cannot write, and `faultline run` stops
    with one line that says how to resume; the command it names runs the rest once the journal writes again."""
    journal = run_disk / "journal.sqlite"
    plan = RunPlan(tasks=2, trials=50, run_id="rfull")
    planned = plan_episodes(plan, retail())
    with supervisor_log() as said:
        async with live_system(tmp_path, journal) as supervisor:
            bus = supervisor.bus
            assert bus is not None
            creds = str(live_access(tmp_path).credential_file(OPERATOR))
            argv = ["run", "--nats", supervisor.url, "--creds", creds, "--journal", str(journal), "--tasks", "2"]
            argv += ["--trials", "50", "--concurrency", "2", "--json", "--run-id", plan.run_id]
            runs: list[subprocess.CompletedProcess[bytes]] = []

            async def run(args: list[str]) -> None:
                runs.append(await anyio.run_process([sys.executable, "-m", "faultline.cli", *args], check=False))

            async with Completions(bus) as completions, anyio.create_task_group() as tg:
                tg.start_soon(run, argv)
                with anyio.fail_after(60):
                    await completions.wait([planned[0].episode])
                filler = fill(run_disk)
            (cut,) = runs
            err = cut.stderr.decode()
            assert cut.returncode == 1 and err.count("\n") == 1, err
            assert err.startswith("faultline: error: new episodes are refused while the journal cannot write (")
            line = re.search(
                r"; (\d+) of 100 episodes completed, (\d+) (?:was|were) running, (\d+) never started \(pass\^k counts the"
                r" completed\); to run the other (\d+) into the same journal once the journal writes again: (.*)$",
                err.strip(),
            )
            assert line, err
            completed, running, never, rest = (int(n) for n in line.groups()[:4])
            assert completed >= 1 and completed + running + never == 100 and rest == 100 - completed
            assert json.loads(cut.stdout.decode().splitlines()[-1])["episodes"] == completed
            command = shlex.split(line.group(5))
            assert command == ["faultline", *argv, "--resume"]

            filler.unlink()
            await said.wait_for("the journal writes again")
            await journal_everything(bus)
            await run(command[1:])
            rest_run = runs[-1]
            assert rest_run.returncode == 0, rest_run.stderr.decode()
            assert json.loads(rest_run.stdout.decode().splitlines()[-1])["episodes"] == 100
            await journal_everything(bus)
    with JournalReader(journal) as reader:
        done = [e for e in reader.episodes() if e.episode.startswith("rfull-") and e.completion() is not None]
    assert len({(e.task, e.trial) for e in done}) == 100
    assert verify(journal).ok


async def test_a_temporary_stream_the_journal_did_not_take_in_is_kept(tmp_path: Path, small_disk: Path) -> None:
    journal = small_disk / "journal.sqlite"
    with supervisor_log() as said:
        async with live_system(tmp_path, journal, temporary_store=True) as supervisor:
            bus = supervisor.bus
            assert bus is not None
            assert (await run_episode(bus, "before")).outcome == "success"
            await journal_everything(bus)
            filler = fill(small_disk)
            assert (await run_episode(bus, "full")).outcome == "success"
            await said.wait_for("the journal cannot write (")
    (line,) = [line for line in said.lines if "store is kept in" in line]
    kept = Path(line.split("nats.store_dir = ")[1].split(" and ")[0])
    assert kept.is_dir() and str(journal) in line
    filler.unlink()
    try:
        with EmbeddedServer(store_dir=kept) as server:
            bus = await Bus.connect(server.url)
            try:
                # what the workers published up to their stop, quiet inputs' last markers included
                last = (await bus.stream_state()).last_seq
                service = JournalService(bus, journal)
                async with anyio.create_task_group() as tg:
                    tg.start_soon(service.run)
                    with anyio.fail_after(30):
                        await service.wait_for(last)
                    service.stop()
            finally:
                await bus.close()
    finally:
        shutil.rmtree(kept)
    seqs, episodes = journal_content(journal)
    assert seqs == list(range(1, last + 1))
    assert {episode_of("before"), episode_of("full")} <= episodes
    assert verify(journal).ok
