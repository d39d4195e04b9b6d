"""Workers as real OS processes under the supervisor: ordering, crash recovery, clean stop."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import anyio
import pytest
from nats.aio.msg import Msg

from faultline._errors import JournalError
from faultline.bus import OPEN_TELLER, Bus, Credential, EmbeddedServer, Login, Message, load_credential
from faultline.core import Envelope, EpisodeStarted, Note, Recording, Start
from faultline.journal import JournalReader, verify
from faultline.runtime import (
    JOURNAL_SERVICE,
    STATUS_SERVICE,
    Completions,
    ProcessSpec,
    Supervisor,
    WorkerStatus,
    start_episode,
    worker_statuses,
)
from tests.processes import alive, children
from tests.runtime.live import worker_status
from tests.runtime.toy import Pinger

pytestmark = pytest.mark.slow

ROUNDS = 12


def write_config(tmp_path: Path) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "faultline.toml"
    path.write_text(
        """
[models.ponger]
backend = "tests.runtime.toy:SlowCountingBackend"

[agents.pinger]
class = "tests.runtime.toy:Pinger"

[agents.ponger]
class = "tests.runtime.toy:Ponger"
"""
    )
    return path


@asynccontextmanager
async def system(tmp_path: Path, name: str) -> AsyncIterator[Supervisor]:
    config = write_config(tmp_path)
    supervisor = Supervisor(
        journal_path=tmp_path / f"{name}.sqlite",
        workers=[
            ProcessSpec("ping", ("worker", "--agents", "pinger", "--config", str(config))),
            ProcessSpec("pong", ("worker", "--agents", "ponger", "--config", str(config))),
        ],
        store_dir=tmp_path / f"{name}-nats",
        log_dir=tmp_path / f"{name}-logs",
    )
    async with supervisor.running():
        yield supervisor


def content(path: Path) -> dict[str, list[tuple[object, ...]]]:
    """Per episode, what a run journaled, without wall-clock times."""
    with JournalReader(path) as reader:
        return {
            episode: [(r.id, r.kind, r.sender, r.recipient, r.topic, r.causation, r.hops, r.body_digest) for r in rows]
            for episode, rows in reader.by_episode()
        }


async def run_episodes(supervisor: Supervisor, episodes: list[str], kill_pong_after: int = 0) -> None:
    bus = supervisor.bus
    assert bus is not None
    pings = 0
    killed = anyio.Event()

    async def on_ping(msg: Msg) -> None:
        nonlocal pings
        pings += 1
        if pings == kill_pong_after:
            pid = supervisor.pid("pong")
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            killed.set()

    sub = await bus.nc.subscribe(bus.subjects.direct(episodes[0], "ponger"), cb=on_ping)
    async with Completions(bus, (Pinger.name,)) as completions:
        for episode in episodes:
            await start_episode(bus, episode, "pinger", EpisodeStarted(task="toy"), Start(data={"rounds": ROUNDS}))
        with anyio.fail_after(60):
            done = await completions.wait(episodes)
    await sub.unsubscribe()
    assert {c.outcome for c in done.values()} == {"success"}, done
    if kill_pong_after:
        assert killed.is_set()
    # the journal holds everything the stream holds before we look at it
    info = await bus.js.stream_info(bus.subjects.stream)
    await bus.nc.request(bus.subjects.svc(JOURNAL_SERVICE), f'{{"until": {info.state.last_seq}}}'.encode(), timeout=20)


async def test_ping_pong_across_two_worker_processes(tmp_path: Path) -> None:
    async with system(tmp_path, "a") as supervisor:
        await run_episodes(supervisor, ["e1", "e2"])
    journal = tmp_path / "a.sqlite"
    assert verify(journal).ok
    with JournalReader(journal) as reader:
        rows = list(reader.episode_rows("e1"))
    notes = [r for r in rows if r.kind == "note"]
    assert [r.envelope().body.data["n"] for r in notes] == [n for i in range(1, ROUNDS + 1) for n in (i, i)]  # type: ignore[union-attr]
    assert [r.sender for r in notes[:4]] == ["pinger", "ponger", "pinger", "ponger"]
    recordings = [r.envelope().body for r in rows if r.kind == "recording"]
    assert sum(1 for r in recordings if isinstance(r, Recording) and r.call == "llm") == ROUNDS
    assert [r.kind for r in rows][0] == "episode_started" and rows[-1].kind == "episode_completed"


async def test_sigkilled_worker_recovers_by_replay_with_identical_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = tmp_path / "calls.log"
    monkeypatch.setenv("FAULTLINE_TEST_CALL_LOG", str(calls))
    episodes = ["k1", "k2", "k3"]
    async with system(tmp_path / "clean", "clean") as supervisor:
        await run_episodes(supervisor, episodes)
    clean_calls = calls.read_text().splitlines()
    calls.unlink()
    async with system(tmp_path / "crash", "crash") as supervisor:
        first_pid = supervisor.pid("pong")
        await run_episodes(supervisor, episodes, kill_pong_after=ROUNDS // 2)
        assert supervisor.pid("pong") != first_pid
    crash_calls = calls.read_text().splitlines()
    clean = content(tmp_path / "clean" / "clean.sqlite")
    crashed = content(tmp_path / "crash" / "crash.sqlite")
    assert clean.keys() == crashed.keys() == set(episodes)
    for episode in episodes:
        assert crashed[episode] == clean[episode], episode
    # A call cut off by the kill may be made again (at most one per episode in flight); no recorded call is.
    assert len(clean_calls) == 3 * ROUNDS
    assert 0 <= len(crash_calls) - len(clean_calls) <= len(episodes)


REPO = Path(__file__).resolve().parents[2]
CODE = os.pathsep.join((str(REPO / "src"), str(REPO)))
"""The PYTHONPATH of a child `faultline`: this tree's package (not another checkout's installed one), and the test
agents, which import from the repository."""


def write_up_config(tmp_path: Path) -> Path:
    """The ping-pong config for `faultline up`, with its journal, store and worker groups in `tmp_path`."""
    config = write_config(tmp_path)
    with config.open("a") as f:
        f.write(f'\n[journal]\npath = "{tmp_path / "up.sqlite"}"\n[nats]\nstore_dir = "{tmp_path / "nats"}"\n')
        f.write('\n[workers.ping]\nagents = ["pinger"]\n[workers.pong]\nagents = ["ponger"]\n')
    return config


def faultline(*args: str, cwd: Path, **popen: Any) -> subprocess.Popen[bytes]:
    """`faultline ARGS` as a child process in `cwd`; the test agents import from the repository."""
    env = {**os.environ, "PYTHONPATH": CODE, **popen.pop("env", {})}
    return subprocess.Popen(
        [sys.executable, "-m", "faultline.cli", *args],
        cwd=cwd,
        env=env,
        **{"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE, **popen},
    )


async def finish(process: subprocess.Popen[bytes], timeout: float = 60) -> str:
    """Wait for `process` to exit (killing it if it does not) and return its stderr."""
    try:
        _, err = await anyio.to_thread.run_sync(lambda: process.communicate(timeout=timeout))
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    return err.decode()


@dataclass(frozen=True)
class Up:
    """Where the `faultline up` of a test serves, and the operator credential it made."""

    url: str
    operator: Credential

    async def connect(self) -> Bus:
        return await Bus.connect(self.url, login=Login(self.operator))


async def wait_until_up(cwd: Path, process: subprocess.Popen[bytes], timeout: float = 30) -> Up:
    """The `faultline up` running in `cwd`, once its state file is written."""
    state = cwd / ".faultline" / "up.json"
    with anyio.fail_after(timeout):
        while not state.exists():
            assert process.poll() is None, "faultline up exited"
            await anyio.sleep(0.05)
    written = json.loads(state.read_text())
    return Up(written["url"], load_credential(Path(written["credentials"])))


async def until_completed(journal: Path, episodes: int, process: subprocess.Popen[bytes]) -> None:
    """Poll until `episodes` have completed in `journal`, which `process` (still running) writes."""
    with anyio.fail_after(60):
        while completed_in(journal) < episodes:
            assert process.poll() is None, "faultline run exited"
            await anyio.sleep(0.1)


def completed_in(journal: Path) -> int:
    """Episodes completed in a journal that another process may be writing (0 before it has rows)."""
    try:
        with JournalReader(journal) as reader:
            return sum(1 for r in reader.rows() if r.kind == "episode_completed")
    except JournalError:
        return 0


async def run_episodes_on(up: Up, episodes: list[str]) -> int:
    """Run ping-pong episodes on the system `up`; return the stream's last sequence after them."""
    bus = await up.connect()
    try:
        async with Completions(bus, (Pinger.name,)) as completions:
            for e in episodes:
                await start_episode(bus, e, "pinger", EpisodeStarted(), Start())
            with anyio.fail_after(30):
                await completions.wait(episodes)
        info = await bus.js.stream_info(bus.subjects.stream)
        return int(info.state.last_seq)
    finally:
        await bus.close()


async def test_up_then_sigterm_stops_everything_and_loses_nothing(tmp_path: Path) -> None:
    process = faultline("up", "--config", str(write_up_config(tmp_path)), cwd=tmp_path)
    try:
        up = await wait_until_up(tmp_path, process)
        await run_episodes_on(up, ["u1", "u2"])
        health = await anyio.run_process(
            [sys.executable, "-m", "faultline.cli", "journal", "health"], cwd=tmp_path, check=False
        )
        assert health.returncode == 0, health.stderr
        assert health.stdout.decode().startswith("journal service up: the journal holds the stream up to sequence")
        bus = await up.connect()
        await start_episode(bus, "u3", "pinger", EpisodeStarted(), Start())
        info = await bus.js.stream_info(bus.subjects.stream)
        last_seq = info.state.last_seq
        await bus.close()
        process.send_signal(signal.SIGTERM)
    finally:
        err = await finish(process)
    assert process.returncode == 0, err[-2000:]
    with JournalReader(tmp_path / "up.sqlite") as reader:
        assert reader.last_pos >= last_seq
        rows = reader.last_pos
        kinds = {r.kind for r in reader.episode_rows("u3")}
    assert {"episode_started", "start"} <= kinds
    assert verify(tmp_path / "up.sqlite").ok
    assert (
        err.splitlines()[-1] == f"stopped: workers drained, journal caught up ({rows} rows in {tmp_path / 'up.sqlite'})"
    )
    assert not (tmp_path / ".faultline" / "up.json").exists()


class Running(NamedTuple):
    folder: Path
    config: Path
    process: subprocess.Popen[bytes]
    up: Up


@pytest.fixture(scope="module")
def first_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    """A `faultline up` that the tests of what is refused beside it share; it stops cleanly after them."""
    folder = tmp_path_factory.mktemp("first-up")
    config = write_up_config(folder)
    process = faultline("up", "--config", str(config), cwd=folder)
    try:
        yield Running(folder, config, process, anyio.run(wait_until_up, folder, process))
        assert process.poll() is None, "the first system runs on"
        process.send_signal(signal.SIGTERM)
    finally:
        err = anyio.run(finish, process)
    assert process.returncode == 0 and "journal caught up" in err.splitlines()[-1], err[-2000:]


def test_every_process_of_an_up_reads_the_configuration_it_was_given(first_up: Running) -> None:
    """`up --config FILE` passed FILE to its workers but not to its journal service, which read the faultline.toml
    of the folder it ran in: a configuration of another name gave the journal the folder's settings."""
    started = [command for command in children(first_up.process.pid).values() if "faultline.cli" in command]
    assert any(" journal serve " in command for command in started), started
    assert all(f"--config {first_up.config}" in command for command in started), started


async def test_status_names_a_worker_of_the_up_here_that_does_not_answer(first_up: Running) -> None:
    """A stopped or stuck worker said nothing, and `status` listed the others as if they were all."""

    async def status() -> tuple[int, dict[str, Any]]:
        done = await anyio.run_process(
            [sys.executable, "-m", "faultline.cli", "status", "--json"], cwd=first_up.folder, check=False
        )
        [summary] = [line for line in map(json.loads, done.stdout.decode().splitlines()) if line["type"] == "summary"]
        return done.returncode, summary

    [pong] = [pid for pid, command in children(first_up.process.pid).items() if "--name worker-pong-0" in command]
    assert await status() == (0, {"type": "summary", "workers": 3, "silent": [], "absent": [], "url": first_up.up.url,
                                   "journal": "writing"})  # fmt: skip
    os.kill(pong, signal.SIGSTOP)
    try:
        code, summary = await status()
    finally:
        os.kill(pong, signal.SIGCONT)
    assert (code, summary["workers"], summary["silent"]) == (1, 2, ["worker-pong-0"])


@pytest.mark.parametrize("elsewhere", [False, True], ids=["same directory", "same config elsewhere"])
async def test_a_second_up_names_the_process_that_holds_the_system(first_up: Running, elsewhere: bool) -> None:
    first = first_up.process
    cwd = first_up.folder / "elsewhere" if elsewhere else first_up.folder
    cwd.mkdir(exist_ok=True)
    second = faultline("up", "--config", str(first_up.config), cwd=cwd)
    second_err = await finish(second)
    assert first.poll() is None, "the first system runs on"
    assert second.returncode == 1
    state = first_up.folder / ".faultline"
    assert second_err == (
        f"faultline: error: {state} is in use by `faultline up` (pid {first.pid}):"
        f" stop it first (kill -TERM {first.pid}) or use another directory\n"
    )


async def test_a_run_in_the_folder_of_a_running_up_names_its_url(first_up: Running) -> None:
    """`run` runs on the `up` running in its folder; asked for a system of its own there (--defense sets up its
    workers), it cannot start one on the same state folder, and names the running one, with how to use it."""
    config, folder = first_up.config, first_up.folder
    run = faultline("run", "--config", str(config), "--tasks", "1", "--defense", "dedup", cwd=folder)
    run_err = await finish(run)
    assert first_up.process.poll() is None, "the first system runs on"
    assert run.returncode == 1
    assert run_err.endswith(f"or use another directory; or run on that system: add --nats {first_up.up.url}\n"), run_err
    assert len(run_err.splitlines()) == 1


async def test_up_says_when_the_journal_did_not_catch_up_and_the_next_up_journals_the_rest(tmp_path: Path) -> None:
    config = write_up_config(tmp_path)
    process = faultline("up", "--config", str(config), cwd=tmp_path)
    try:
        up = await wait_until_up(tmp_path, process)
        await run_episodes_on(up, ["c1"])
        [journal_pid] = [pid for pid, command in children(process.pid).items() if " journal serve " in command]
        os.kill(journal_pid, signal.SIGSTOP)
        last_seq = await run_episodes_on(up, ["c2"])
        process.send_signal(signal.SIGTERM)
    finally:
        err = await finish(process)
    assert process.returncode == 1
    assert err.splitlines()[-1] == (
        "faultline: error: stopped, but the journal did not catch up: the journal service was ended by SIGKILL"
        f" (see {tmp_path / 'logs' / 'journal.log'}); the stream in {tmp_path / 'nats'} keeps the rest,"
        " which the next `faultline up` journals"
    )
    assert completed_in(tmp_path / "up.sqlite") < 2

    process = faultline("up", "--config", str(config), cwd=tmp_path)
    try:
        again = await wait_until_up(tmp_path, process)
        process.send_signal(signal.SIGTERM)
    finally:
        err = await finish(process)
    assert process.returncode == 0 and "journal caught up" in err.splitlines()[-1], err[-2000:]
    assert again.operator == up.operator  # the credentials made by the first start are reused
    with JournalReader(tmp_path / "up.sqlite") as reader:
        assert reader.last_pos >= last_seq
    assert completed_in(tmp_path / "up.sqlite") == 2
    assert verify(tmp_path / "up.sqlite").ok


async def test_up_on_a_server_configured_with_the_credentials_command_starts_every_process(tmp_path: Path) -> None:
    """docs/multi-host.md: `faultline credentials` makes the users a cluster of one's own includes, then `up --nats`
    runs on it. Every process `up` starts must be one of those users, the helper worker included."""
    config = write_up_config(tmp_path)
    made = await anyio.run_process(
        [sys.executable, "-m", "faultline.cli", "credentials", "--config", str(config)],
        cwd=tmp_path,
        check=False,
        env={**os.environ, "PYTHONPATH": CODE},
    )
    assert made.returncode == 0, made.stderr
    folder = tmp_path / ".faultline" / "credentials"
    node = folder / "node.conf"
    node.write_text("server_name: own-node\ninclude ./nats-server.conf\n")
    with EmbeddedServer(store_dir=tmp_path / "own-nats", config_file=node) as server:
        process = faultline("up", "--config", str(config), "--nats", server.url, cwd=tmp_path)
        try:
            up = await wait_until_up(tmp_path, process)
            await run_episodes_on(up, ["m1"])
            process.send_signal(signal.SIGTERM)
        finally:
            err = await finish(process)
    assert process.returncode == 0 and "journal caught up" in err.splitlines()[-1], err[-2000:]
    assert completed_in(tmp_path / "up.sqlite") == 1


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_stop_signal_ends_run_cleanly_with_a_journal_that_verifies(tmp_path: Path, signum: int) -> None:
    journal = tmp_path / "j.sqlite"
    temp = tmp_path / "tmp"
    temp.mkdir()
    # A session of its own, so that SIGINT can go to its process group as a terminal's Ctrl-C does.
    process = faultline(
        "run", "--tasks", "1000", "--trials", "50", "--journal", str(journal),
        cwd=tmp_path, env={"TMPDIR": str(temp)}, start_new_session=True,
    )  # fmt: skip
    try:
        await until_completed(journal, 3, process)
        kids = children(process.pid)
        if signum == signal.SIGINT:
            os.killpg(process.pid, signum)
        else:
            process.send_signal(signum)
    finally:
        err = await finish(process)
    commands = " | ".join(kids.values())
    assert "nats-server" in commands and " journal serve " in commands and " worker " in commands
    assert process.returncode == 128 + signum, err[-2000:]
    last = err.splitlines()[-1]
    stopped = re.fullmatch(
        rf"faultline: stopped by {signal.Signals(signum).name}: (\d+) of 3250 episodes completed, (\d+) (?:was|were) running,"
        r" (\d+) never started \(pass\^k counts the completed\);"
        rf" nats-server, the journal service and the workers are stopped, and {re.escape(str(journal))} holds all"
        r" they published; to run the other \d+ into the same journal: faultline run --tasks 1000 --trials 50"
        rf" --journal {re.escape(str(journal))} --run-id r[0-9a-f]{{6}} --resume",
        last,
    )
    assert stopped, last
    assert sum(int(n) for n in stopped.groups()) == 3250
    assert [pid for pid in kids if alive(pid)] == []
    assert list(temp.iterdir()) == [], "the embedded server's store is removed"
    assert completed_in(journal) >= int(stopped.group(1)) >= 3
    assert verify(journal).ok


async def test_the_rest_of_an_interrupted_run_runs_with_the_command_its_stop_line_prints(tmp_path: Path) -> None:
    """Completed episodes count as they ended; those that started and never completed run again under new ids;
    pass^k is over every planned episode, as for an uninterrupted run."""
    journal = tmp_path / "j.sqlite"
    argv = ("run", "--tasks", "12", "--trials", "2", "--concurrency", "2", "--journal", str(journal))
    process = faultline(*argv, cwd=tmp_path)
    try:
        await until_completed(journal, 3, process)
        process.send_signal(signal.SIGTERM)
    finally:
        err = await finish(process)
    command = err.splitlines()[-1].rpartition("into the same journal: ")[2]
    words = shlex.split(command)
    assert words[0] == "faultline" and words[-1] == "--resume", command
    before = completed_in(journal)
    resumed = faultline(*words[1:], "--json", cwd=tmp_path, stdout=subprocess.PIPE)
    out, err = await anyio.to_thread.run_sync(lambda: resumed.communicate(timeout=120))
    assert resumed.returncode == 0, err.decode()[-2000:]
    summary = json.loads(out.decode().splitlines()[-1])
    assert summary["episodes"] == 24 and summary["not_run"] == 0
    with JournalReader(journal) as reader:
        episodes = [e for e in reader.episodes() if e.outcome]
    assert len(episodes) == completed_in(journal) >= 24 > before
    run_id = words[words.index("--run-id") + 1]
    planned = {f"{run_id}-{task}-t{trial}" for task in {e.task for e in episodes} for trial in (0, 1)}
    again = [e.episode for e in episodes if e.episode not in planned]
    assert all(e.startswith(f"{run_id}-r1-") for e in again)  # a restarted episode has an id of its own
    assert len({(e.task, e.trial) for e in episodes}) == 24


async def test_a_sigkilled_run_leaves_no_process_behind_and_a_journal_that_verifies(tmp_path: Path) -> None:
    journal = tmp_path / "j.sqlite"
    process = faultline("run", "--tasks", "1000", "--trials", "50", "--journal", str(journal), cwd=tmp_path)
    try:
        await until_completed(journal, 3, process)
        kids = children(process.pid)
        process.kill()
    finally:
        await finish(process)
    commands = " | ".join(kids.values())
    assert "nats-server" in commands and " journal serve " in commands and " worker " in commands
    with anyio.fail_after(60):  # each stops as on SIGTERM: workers drain, the journal writes what it holds
        while [pid for pid in kids if alive(pid)]:
            await anyio.sleep(0.1)
    assert completed_in(journal) >= 3
    assert verify(journal).ok


async def test_status_is_answered_by_the_workers_themselves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from faultline.cli import main

    async with system(tmp_path, "s") as supervisor:
        await run_episodes(supervisor, ["s1"])
        # A worker counts an input once it is acknowledged, which may come just after the episode completes.
        with anyio.fail_after(10):
            replies = await worker_status(supervisor.url, "fl")
            while len(replies) < 2 or any(r.handled < ROUNDS for r in replies):
                replies = await worker_status(supervisor.url, "fl")  # each ask waits its window for the answers
        code = await anyio.to_thread.run_sync(main, ["status", "--nats", supervisor.url])
        brief = await _told_both(supervisor.url, model_calls_only=True)
        unread = [
            b"\xff not an ask",
            b'{"x":' * 100_000,
            b"{}",
            b'{"token": "not.one.token"}',
        ]  # the 2nd past the decoder
        after_unread = await _told_both(supervisor.url, unread=unread)
    assert code == 0
    assert {r.worker for r in replies} == {"ping", "pong"}
    assert {tuple(r.agents) for r in replies} == {("pinger",), ("ponger",)}
    assert all(r.handled >= ROUNDS for r in replies)
    assert {r.pid for r in replies} == {supervisor.pid("ping"), supervisor.pid("pong")} - {None}
    table = capsys.readouterr().out
    assert "2 worker(s)" in table and "pinger" in table and "ponger" in table
    assert "episodes in flight" in table and "…" not in table  # piped, whole: no column cut to 80 wide
    assert re.search(r"journal: writing; messages not journaled yet, by shard: \d+\n", table), table
    assert re.search(
        r"stream: [\d,]+ messages, [\d.]+ MiB, up to sequence [\d,]+;"
        r" trimmed of episodes silent for 3600 s and of journaled dead letters\n",
        table,
    ), table
    assert {r.identity for r in replies} == {OPEN_TELLER}  # a server without users vouches for nobody
    assert {r.worker for r in brief} == {"ping", "pong"}
    assert all(not (r.pid or r.agents or r.episodes) for r in brief)  # no episode listed
    assert {r.worker for r in after_unread} == {"ping", "pong"}  # asks they cannot read got no answer, and no harm


async def test_status_says_how_far_behind_a_stopped_journal_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from faultline.cli import main

    async with system(tmp_path, "s") as supervisor:
        journal = supervisor.pid("journal")
        assert journal is not None
        os.kill(journal, signal.SIGSTOP)
        try:
            bus = await Bus.connect(supervisor.url)
            try:
                await bus.publish_all(
                    Envelope(id=f"n{i}", episode="e1", sender="a", recipient="b", body=Note(text=str(i)))
                    for i in range(30)
                )
            finally:
                await bus.close()
            code = await anyio.to_thread.run_sync(main, ["status", "--json", "--nats", supervisor.url])
        finally:
            os.kill(journal, signal.SIGCONT)
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    [backlog] = [line for line in lines if line.get("type") == "journal"]
    [summary] = [line for line in lines if line.get("type") == "summary"]
    [stream] = [line for line in lines if line.get("type") == "stream"]
    assert code == 0
    assert backlog["shard"] == 0 and backlog["waiting"] >= 30  # the stream holds them; the journal has not
    assert stream["messages"] >= 30 and stream["last_seq"] >= stream["messages"] and stream["bytes"] > 0
    assert summary["journal"].startswith("no answer (")


async def _told_both(url: str, *, model_calls_only: bool = False, unread: Sequence[bytes] = ()) -> list[WorkerStatus]:
    """Both workers' answers to a status request, after the asks `unread`, which no answer may follow."""
    bus = await Bus.connect(url)
    tokens: list[str] = []

    async def note(msg: Message) -> None:
        tokens.append(msg.subject.rsplit(".", 1)[1])

    try:
        await bus.subscribe(bus.subjects.tell(STATUS_SERVICE, "*", "*"), note)
        for ask in unread:
            await bus.notify(bus.subjects.svc(STATUS_SERVICE), ask)
        with anyio.fail_after(10):
            while len(answers := await worker_statuses(bus, model_calls_only=model_calls_only)) < 2:
                pass
    finally:
        await bus.close()
    assert all(re.fullmatch("[0-9a-f]{16}", token) for token in tokens), tokens  # told only to the good asks
    return answers


def test_status_without_a_system_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from faultline.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["status"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no `faultline up` is running here" in err
