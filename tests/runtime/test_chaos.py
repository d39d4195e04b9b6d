"""Chaos: seeded schedules of kills, pauses, partitions (both ways, one way, and between two nodes only), a full
disk and clock steps against a 3-node cluster lose no episode, and the checker sees loss.

The slow tests run six small schedules end to end (bench/chaos.py runs long ones): every episode
completes once, as a success, the journal holds each stored message once, verifies and replays
identically. The others pin what a seed draws and what the checker reports.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from bench import chaos
from bench._checker import Verdict, _stream_problem, check
from bench._cluster import NODES
from bench._common import fail_after
from bench._disk import unavailable
from bench._nemesis import (
    CLOCK_ERA_KINDS,
    DISK,
    DISK_KINDS,
    KINDS,
    LEADER,
    NETWORK_ERA_KINDS,
    ONE_WAY_ERA_KINDS,
    PROCESS_KINDS,
    Kind,
    Schedule,
    draw_schedule,
    percentile,
)
from bench.chaos import processes, run_schedule
from faultline.api import SIM_NOTE, RunResult
from faultline.bus import StreamState
from faultline.core import EpisodeCompleted
from faultline.journal import JournalReader
from faultline.runtime import parse_config
from tests.processes import alive, children, state

EPISODES = 20
GOLDEN = Path(__file__).parents[1] / "replay" / "golden" / "runs.db"


def test_a_seed_draws_one_schedule_and_its_json_draws_it_again() -> None:
    schedule = draw_schedule(1, 200, processes())  # a seed that draws every kind
    assert draw_schedule(1, 200, processes()) == schedule
    assert draw_schedule(2, 200, processes()) != schedule
    assert msgspec.json.decode(msgspec.json.encode(schedule), type=Schedule) == schedule
    assert len(schedule.faults) == 25
    counts = [fault.after_episodes for fault in schedule.faults]
    assert counts == sorted(counts) and 1 <= counts[0] and counts[-1] <= 150
    targets = {*processes(), "n1", "n2", "n3", LEADER}
    assert {fault.kind for fault in schedule.faults} == set(KINDS)
    for fault in schedule.faults:
        supervised_kill = fault.kind is Kind.KILL and fault.target in processes()
        assert (fault.duration_s == 0) == supervised_kill, fault
        assert (fault.latency_s > 0) == (fault.kind is Kind.DELAY), fault
        assert (fault.iops > 0) == (fault.kind is Kind.SLOW_DISK), fault
        assert (fault.offset_s != 0) == (fault.kind is Kind.CLOCK), fault
        assert (fault.direction in ("in", "out")) == (fault.kind is Kind.ONE_WAY), fault
        assert (fault.peer in NODES and fault.peer != fault.target) == (fault.kind is Kind.BRIDGE), fault
        if fault.kind in DISK_KINDS:
            assert fault.target == DISK
        else:
            assert fault.target in (processes() if fault.kind is Kind.CLOCK else targets), fault
        assert not fault.with_previous


@pytest.mark.parametrize(
    ("seed", "episodes", "kinds", "drawn"),
    [
        pytest.param(
            1,
            EPISODES,
            PROCESS_KINDS,
            ["kill worker-main-1 after 2 episodes + 0.12s", "pause leader for 3.44s after 11 episodes + 0.21s"],
            id="before-network-kinds",
        ),
        pytest.param(
            5,
            16,
            NETWORK_ERA_KINDS,
            ["partition n3 for 5.83s after 5 episodes + 0.36s", "kill leader for 2.86s after 12 episodes + 0.47s"],
            id="before-disks-and-clocks",
        ),
        pytest.param(
            9,
            24,
            CLOCK_ERA_KINDS,
            [
                "disk_full disk for 2.3s after 4 episodes + 0.27s",
                "kill worker-main-1 after 12 episodes + 0.5s",
                "partition n2 for 5.9s after 13 episodes + 0.94s",
            ],
            id="before-one-way-partitions",
        ),
        pytest.param(
            11,
            24,
            ONE_WAY_ERA_KINDS,
            [
                "one_way n1 in for 5.11s after 4 episodes + 0.51s",
                "one_way n3 out for 2.3s after 11 episodes + 0.61s",
                "partition journal for 7.23s after 15 episodes + 0.54s",
            ],
            id="before-bridges-and-black-holes",
        ),
    ],
)
def test_a_seed_drawn_with_the_kinds_of_an_earlier_era_draws_the_schedule_it_drew_then(
    seed: int, episodes: int, kinds: tuple[Kind, ...], drawn: list[str]
) -> None:
    schedule = draw_schedule(seed, episodes, processes(), kinds)
    assert schedule.describe().splitlines()[1:] == [f"  {i}. {fault}" for i, fault in enumerate(drawn, 1)]


def test_an_overlapping_schedule_has_the_faults_of_its_seed_some_begun_while_the_one_before_lasts() -> None:
    alone = draw_schedule(7, 200, processes())
    overlapping = draw_schedule(7, 200, processes(), overlap=True)
    assert overlapping.overlap and not alone.overlap
    assert [msgspec.structs.replace(f, with_previous=False) for f in overlapping.faults] == list(alone.faults)
    assert not overlapping.faults[0].with_previous
    assert 5 < sum(f.with_previous for f in overlapping.faults) < 20
    assert "while the one before lasts" in overlapping.describe()
    assert msgspec.json.decode(msgspec.json.encode(overlapping), type=Schedule) == overlapping


def test_a_schedule_draws_only_the_kinds_it_is_given() -> None:
    schedule = draw_schedule(7, 200, processes(), kinds=[Kind.PAUSE])
    assert {fault.kind for fault in schedule.faults} == {Kind.PAUSE}


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 99), percentile([3.0], 99)) == (50.0, 99.0, 3.0)
    assert percentile([], 50) is None


def test_the_stream_check_names_a_gap_a_message_twice_and_a_short_journal() -> None:
    stored = StreamState(messages=3, last_seq=3)
    assert _stream_problem([1, 2, 3], 3, stored) == ""
    assert "missing [3]" in _stream_problem([1, 2, 4], 3, StreamState(messages=4, last_seq=4))
    assert "twice [2]" in _stream_problem([1, 2, 2], 3, stored)
    assert _stream_problem([1, 2, 3], 2, stored) == "1 message ids stored twice"
    assert "holds 3 rows, the stream 4" in _stream_problem([1, 2, 3], 3, StreamState(messages=4, last_seq=4))


def test_the_checker_names_an_episode_lost_and_one_that_ended_otherwise(tmp_path: Path) -> None:
    journal = Path(shutil.copy(GOLDEN, tmp_path / "runs.db"))
    with JournalReader(journal) as reader:
        rows = list(reader.rows())
        completed = [r for r in rows if r.kind == "episode_completed"]
    seen = completed[0]
    body = seen.envelope().body
    assert isinstance(body, EpisodeCompleted)
    other = "timeout" if body.outcome != "timeout" else "success"
    result = RunResult([], completed={seen.episode: EpisodeCompleted(outcome=other)}, running={"ghost": 0.0})
    verdict = check(journal, result, StreamState(messages=len(rows), last_seq=len(rows)), "BusError: gone")
    assert verdict.lost == {"ghost": "the runner saw no completion (BusError: gone)"}
    assert verdict.differing == {seen.episode: f"runner {other!r}, journal {body.outcome!r}"}
    assert (verdict.duplicated, verdict.verify, verdict.replay) == ({}, "", "")
    assert not verdict.ok


async def test_a_schedule_that_cannot_reach_the_checker_is_named_and_the_next_one_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    written = tmp_path / "chaos.json"
    seen: list[Any] = []

    async def never_back(schedule: Schedule, keep: str, load: chaos.Load) -> chaos.ScheduleReport:
        if written.exists():  # what the schedules before wrote, kept if the run is cut short here
            seen.append(json.loads(written.read_text())["summary"]["broken_schedules"])

        async def node() -> None:
            raise TimeoutError(f"seed {schedule.seed}: the stream's replicas were not current")

        async with anyio.create_task_group() as tg:
            tg.start_soon(node)
        raise AssertionError("unreachable")

    monkeypatch.setattr(chaos, "_run_in", never_back)
    said: list[str] = []
    args = argparse.Namespace(
        schedules=2, episodes=8, seed=5, keep="", kinds=KINDS, overlap=False, json=written, load=chaos.Load()
    )
    summary = (await chaos.main_async(args, said.append))["summary"]
    broken = {seed: f"TimeoutError: seed {seed}: the stream's replicas were not current" for seed in (5, 6)}
    assert summary["broken_schedules"] == broken and summary["failed_schedules"] == [5, 6]
    assert seen == [{"5": broken[5]}]
    assert json.loads(written.read_text())["summary"]["failed_schedules"] == [5, 6]
    assert json.loads(written.read_text())["note"] == SIM_NOTE, "schedules on sim say what their numbers measure"
    assert sum("FAILED before the checker" in line for line in said) == 2


# After a node's pause, nats-py drops its socket to the stale node without closing it; the warning of
# that socket's collection is the client library's, and says nothing about the system.
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize(
    ("seed", "episodes", "kinds", "overlap"),
    [
        (1, EPISODES, PROCESS_KINDS, False),  # a worker killed, the leader paused
        (2, EPISODES, PROCESS_KINDS, False),
        (5, 16, NETWORK_ERA_KINDS, False),  # a node partitioned from the rest for 5.83 s, then the leader killed
        # the journal's disk full for 4.38 s; while it is, a worker's clock stepped back 3,280.8 s for 7.82 s
        (53, 16, (Kind.DISK_FULL, Kind.SLOW_DISK, Kind.CLOCK), True),
        (15, 16, (Kind.ONE_WAY,), False),  # what goes to n2 held 2.11 s, then what the leader sends held 7 s
        # the routes between n3 and n2 cut 2.68 s, then n1 and n3's 4.21 s: the schedule whose runner once
        # waited 44 s for a completion lost between two nodes (test_cluster.py has that loss on its own)
        (18, 16, (Kind.BRIDGE,), False),
    ],
)
async def test_a_seeded_schedule_of_faults_loses_no_episode(
    tmp_path: Path, seed: int, episodes: int, kinds: tuple[Kind, ...], overlap: bool
) -> None:
    schedule = draw_schedule(seed, episodes, processes(), kinds, overlap=overlap)
    if {fault.kind for fault in schedule.faults} & set(DISK_KINDS) and (why := unavailable()):
        pytest.skip(f"no disk of its own for the journal here: {why}")
    report = await run_schedule(schedule, tmp_path)
    assert report.ok, (schedule.describe(), report.runner_error, report.verdict)
    assert report.verdict.outcomes == {"success": report.verdict.episodes} and report.verdict.episodes >= episodes
    assert sorted(msgspec.json.encode(applied["fault"]) for applied in report.applied) == sorted(
        msgspec.json.encode(fault) for fault in schedule.faults
    )


def test_the_goals_recovery_counts_faults_on_nodes_and_cuts_each_timed_alone() -> None:
    def applied(kind: Kind, target: str, began_s: float, recovered_s: float) -> dict[str, Any]:
        fault = {"kind": kind, "target": target}
        times = {"began_s": began_s, "ended_s": began_s + 1, "recovered_s": recovered_s}
        return {"fault": fault, "target": target, **times, "journal_behind": None, "journal_caught_up_s": None}

    verdict = Verdict(
        episodes=1, started=1, completed=1, outcomes={}, lost={}, duplicated={}, differing={}, not_success={},
        stream="", verify="", replay="",
    )  # fmt: skip
    faults = [
        applied(Kind.KILL, LEADER, 0.0, 2.0),  # a node: counted
        applied(Kind.KILL, "worker-main-0", 10.0, 3.0),  # a process killed: not a cut
        applied(Kind.PARTITION, "worker-main-1", 20.0, 4.0),  # a process cut off: counted
        applied(Kind.BRIDGE, "n2", 30.0, 9.0),  # the next began before it recovered: not alone
        applied(Kind.DELAY, "n3", 35.0, 1.0),  # slowed, not cut
    ]
    report = chaos.ScheduleReport(
        schedule=draw_schedule(1, 8, processes()), verdict=verdict, applied=faults, completions_s=[],
        runner_error="", seconds=1.0,
    )  # fmt: skip
    summary = chaos.summarize([report])
    assert summary["recovery_after_cuts_s"] == {"n": 2, "p50": 2.0, "p99": 4.0, "max": 4.0}
    assert summary["recovery_s"]["n"] == 5 and "bridge node" not in summary["recovery_alone_s"]


def test_the_local_model_is_every_roles_model_with_the_local_defaults() -> None:
    config = parse_config(tomllib.loads(chaos.CONFIG + chaos.local_models("http://127.0.0.1:1/v1")))
    for role in ("user", "tool"):
        model = config.model(role)
        assert (model.backend, model.base_url, model.model) == ("openai", "http://127.0.0.1:1/v1", "local")
        assert (model.max_tokens, model.tool_calls, model.timeout_s, model.max_retries) == (128, "text", 300, 1)
        assert model.truncation == "auto"


async def test_a_wait_that_runs_out_says_what_it_waited_for_and_what_it_saw_last() -> None:
    seen = "leader n1; n2 current, n3 behind"
    with pytest.raises(
        TimeoutError, match=rf"^the stream's replicas were not current within 0.01s \(last seen: {seen}\)$"
    ):
        with fail_after(0.01, "the stream's replicas were not current", lambda: seen):
            await anyio.Event().wait()


async def test_the_harness_stopped_by_sigterm_while_a_node_is_paused_leaves_no_process_or_folder_behind(
    tmp_path: Path,
) -> None:
    """A node stopped by SIGSTOP would never act on the SIGTERM the kernel sends it when the harness dies: the
    harness resumes it and stops everything, as after an error, and says what stopped it."""
    folders = tmp_path / "tmp"
    folders.mkdir()
    command = [sys.executable, "-m", "bench.chaos", "--episodes", "40", "--seed", "28", "--kinds", "pause"]
    harness = subprocess.Popen(
        command,
        cwd=Path(__file__).parents[2],
        env=os.environ | {"TMPDIR": str(folders)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        with anyio.fail_after(120):
            while not (paused := [pid for pid in children(harness.pid) if state(pid) == "T"]):
                assert harness.poll() is None, harness.communicate()[0].decode()[-2000:]
                await anyio.sleep(0.05)  # polling the processes' states, not waiting for time to pass
        started = list(children(harness.pid))
        harness.send_signal(signal.SIGTERM)
        out, _ = await anyio.to_thread.run_sync(lambda: harness.communicate(timeout=60))
    finally:
        if harness.poll() is None:
            harness.kill()
    assert harness.returncode == 128 + signal.SIGTERM, out.decode()[-2000:]
    assert "stopped by SIGTERM" in out.decode()
    assert len(started) >= 6 and set(paused) <= set(started)  # three nodes, the journal, two workers
    assert [pid for pid in started if alive(pid)] == []
    assert list(folders.iterdir()) == []


def test_a_failed_schedules_logs_outlive_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A failure that passed when run again left nothing to read: the schedule's folder, logs and all, was gone."""
    monkeypatch.setattr(chaos.tempfile, "tempdir", str(tmp_path))
    workdir = tmp_path / "run"
    (workdir / "logs").mkdir(parents=True)
    (workdir / "logs" / "worker-main-0.log").write_text("what the worker said\n")
    chaos._keep_logs(chaos.draw_schedule(7, 8, chaos.processes(), KINDS), workdir)
    [kept] = tmp_path.glob("chaos-7-logs-*")
    assert (kept / "worker-main-0.log").read_text() == "what the worker said\n"
    assert capsys.readouterr().out == f"  the processes' logs of seed 7 are kept in {kept}\n"
