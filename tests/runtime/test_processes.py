"""Workers as real OS processes under the supervisor: ordering, crash recovery, clean stop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from nats.aio.msg import Msg

from faultline.bus import Bus, EpisodeStarted, Recording, Start
from faultline.journal import JournalReader, verify
from faultline.runtime import Completions, start_episode
from faultline.runtime._supervisor import ProcessSpec, Supervisor

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
    async with anyio.create_task_group() as tg:
        try:
            await supervisor.start(tg)
            yield supervisor
        finally:
            with anyio.CancelScope(shield=True):
                await supervisor.stop()


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
    async with Completions(bus) as completions:
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
    await bus.nc.request(bus.subjects.svc("journal"), f'{{"until": {info.state.last_seq}}}'.encode(), timeout=20)


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
    # A call cut off by the kill may be made again; no recorded call is.
    assert len(clean_calls) == 3 * ROUNDS
    assert len(crash_calls) - len(clean_calls) in (0, 1)


async def test_up_then_sigterm_stops_everything_and_loses_nothing(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    with config.open("a") as f:
        f.write(f'\n[journal]\npath = "{tmp_path / "up.sqlite"}"\n[nats]\nstore_dir = "{tmp_path / "nats"}"\n')
        f.write('\n[workers.ping]\nagents = ["pinger"]\n[workers.pong]\nagents = ["ponger"]\n')
    process = subprocess.Popen(
        [sys.executable, "-m", "faultline.runtime.cli", "up", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        state = Path(".faultline/up.json")
        with anyio.fail_after(30):
            while not state.exists():
                await anyio.sleep(0.05)
        bus = await Bus.connect(json.loads(state.read_text())["url"])
        async with Completions(bus) as completions:
            for e in ("u1", "u2"):
                await start_episode(bus, e, "pinger", EpisodeStarted(), Start())
            with anyio.fail_after(30):
                await completions.wait(["u1", "u2"])
        await start_episode(bus, "u3", "pinger", EpisodeStarted(), Start())
        info = await bus.js.stream_info(bus.subjects.stream)
        last_seq = info.state.last_seq
        await bus.close()
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err.decode()[-2000:]
    with JournalReader(tmp_path / "up.sqlite") as reader:
        assert reader.last_pos >= last_seq
        kinds = {r.kind for r in reader.episode_rows("u3")}
    assert {"episode_started", "start"} <= kinds
    assert verify(tmp_path / "up.sqlite").ok


async def test_status_is_answered_by_the_workers_themselves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from faultline.runtime.cli import main
    from faultline.runtime.cli._system import gather_status

    async with system(tmp_path, "s") as supervisor:
        await run_episodes(supervisor, ["s1"])
        replies = await gather_status(supervisor.url, "fl")
        code = await anyio.to_thread.run_sync(main, ["status", "--nats", supervisor.url])
    assert code == 0
    assert {r["worker"] for r in replies} == {"ping", "pong"}
    assert {tuple(r["agents"]) for r in replies} == {("pinger",), ("ponger",)}
    assert all(r["handled"] >= ROUNDS for r in replies)
    assert {r["pid"] for r in replies} == {supervisor.pid("ping"), supervisor.pid("pong")} - {None}
    table = capsys.readouterr().out
    assert "2 worker(s)" in table and "pinger" in table and "ponger" in table


def test_status_without_a_system_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from faultline.runtime.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["status"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no `faultline up` is running here" in err
