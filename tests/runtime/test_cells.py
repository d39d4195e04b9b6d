"""Cells: a run on several independent nats-servers, each with its own stream, journal shard and workers, whose
journal set reads as one journal."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import shutil
import signal
from collections import Counter
from pathlib import Path

import msgspec
import pytest

from faultline._errors import ConfigError, JournalError
from faultline.api import RunSpec, SilentProgress, run
from faultline.cli import main
from faultline.core import CONTROL_EPISODE, episode_cell, episode_shard, system_path
from faultline.journal import JournalReader, create_set, export_jsonl, import_jsonl, read_manifest, shard_path, verify
from faultline.runtime import Config, cell_config, parse_config
from tests.processes import children
from tests.runtime.test_stalls import Waiting

pytestmark = pytest.mark.slow


def in_cells(cells: int, **settings: object) -> Config:
    return parse_config({"nats": {"cells": cells}, **settings})


def episodes_in(file: Path) -> set[str]:
    with JournalReader(file) as reader:
        return {summary.episode for summary in reader.episodes()}


def test_a_run_in_cells_runs_each_episode_in_its_cell_and_its_journal_set_reads_as_one(tmp_path: Path) -> None:
    journal = tmp_path / "j"
    report = run(RunSpec(tasks=8, journal=journal, config=in_cells(3), run_id="cells"))
    assert report.summary.outcomes == {"success": 8}
    assert report.summary.journal == str(journal)
    manifest = read_manifest(journal)
    assert (manifest.shards, manifest.cells) == (3, True)
    everyone = {p.episode for p, _ in report.episodes.outcomes()}
    for k in range(3):
        # each cell's journal service copies its own server's stream alone: what it holds is what ran there
        assert episodes_in(shard_path(journal, k)) == {e for e in everyone if episode_cell(e, 3) == k}
    assert all(episodes_in(shard_path(journal, k)) for k in range(3)), "this run's 8 episodes fall in every cell"
    assert report.summary.cells == [len(episodes_in(shard_path(journal, k))) for k in range(3)]
    assert verify(journal).ok
    assert main(["replay", str(journal)]) == 0
    with JournalReader(journal) as reader:
        assert {summary.episode for summary in reader.episodes()} == everyone


def test_the_cells_servers_share_the_cores_one_server_would_run_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOMAXPROCS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(32)))
    journal = Path("runs/j")
    assert cell_config(in_cells(4), journal, 3).nats.server_cores == 2, "a quarter of 32 cores, among 4 servers"
    assert cell_config(in_cells(4, nats={"cells": 4, "server_cores": 3}), journal, 0).nats.server_cores == 3
    assert cell_config(in_cells(4), journal, 3).journal.path == str(shard_path(journal, 3))
    monkeypatch.setenv("GOMAXPROCS", "6")
    assert cell_config(in_cells(4), journal, 0).nats.server_cores == 0, "the environment's, which each inherits"


def test_worker_shards_within_a_cell_each_take_a_share_of_its_episodes() -> None:
    """A cell is chosen by a hash of its own: chosen by the worker shards' hash, a cell of 2 of 4 would hold only
    episodes of one of its 2 worker shards, and the other would idle."""
    episodes = [f"r{i:05d}-task-{i % 97:02d}-t{i % 3}" for i in range(4000)]
    buckets = Counter((episode_cell(e, 4), episode_shard(e, 2)) for e in episodes)
    assert len(buckets) == 8
    assert all(400 <= count <= 600 for count in buckets.values()), buckets


def test_a_cell_runs_several_worker_processes_per_group(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    journal = tmp_path / "j"
    code = main(["run", "--cells", "2", "--workers", "2", "--tasks", "12", "--run-id", "w2", "--journal", str(journal)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert re.search(r"cells\s+│\s+2, episodes in each: 6, 6", out), out
    with JournalReader(journal) as reader:
        episodes = [summary.episode for summary in reader.episodes()]
        assert {summary.outcome for summary in reader.episodes()} == {"success"}
    assert len(episodes) == 12
    # every worker shard of every cell had episodes: one whose consumer read nothing would have left them unfinished
    assert len({(episode_cell(e, 2), episode_shard(e, 2)) for e in episodes}) == 4
    assert main(["replay", str(journal)]) == 0


def test_a_run_in_cells_resumes_in_its_cells(tmp_path: Path) -> None:
    journal = tmp_path / "j"
    first = run(RunSpec(tasks=4, journal=journal, config=in_cells(2), run_id="rc"))
    again = run(RunSpec(tasks=8, journal=journal, config=in_cells(2), run_id="rc", resume=True))
    assert first.summary.outcomes == {"success": 4}
    assert again.summary.outcomes == {"success": 8}, "the first run's 4 count as they ended; 4 more ran"
    assert verify(journal).ok, "every episode, old and new, is in its cell's shard"
    with JournalReader(journal) as reader:
        assert len(reader.episodes()) == 8


class KillsAServer(SilentProgress):
    """Watches a run in cells: kills one cell's nats-server (SIGKILL) once `after` episodes completed."""

    def __init__(self, after: int) -> None:
        self.after = after
        self.killed = 0

    def update(self, done: int, ok: int, waiting: str) -> None:
        if done >= self.after and not self.killed:
            servers = [pid for pid, command in children(os.getpid()).items() if "nats-server" in command]
            self.killed = servers[0]
            os.kill(self.killed, signal.SIGKILL)


def test_a_cell_whose_server_is_killed_loses_nothing_and_the_others_run_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    journal = tmp_path / "j"
    watcher = KillsAServer(after=2)
    with caplog.at_level(logging.WARNING, logger="faultline.runtime"):
        report = run(RunSpec(tasks=16, concurrency=6, journal=journal, config=in_cells(2)), progress=watcher)
    assert watcher.killed
    assert "nats-server is down (exit code -9)" in caplog.text and "nats-server is running again" in caplog.text
    assert report.summary.outcomes == {"success": 16}, "every episode completed, in both cells"
    assert not report.journal_problem
    assert verify(journal).ok
    assert main(["replay", str(journal)]) == 0


class CountsModelCalls(SilentProgress):
    """Watches a run: the most model calls its progress line said were in flight at once."""

    def __init__(self) -> None:
        self.most = 0

    def update(self, done: int, ok: int, waiting: str) -> None:
        if said := re.search(r"(\d+) model calls? in flight", waiting):
            self.most = max(self.most, int(said.group(1)))


def test_a_runs_progress_counts_the_model_calls_of_every_cell(tmp_path: Path) -> None:
    """2 episodes in each cell, each nearly always waiting on a 1 s model call: more than 2 calls in flight at once
    are only seen by asking both cells' workers."""
    slow = {"nats": {"cells": 2}, "models": {"default": {"latency": {"distribution": "fixed", "seconds": 1.0}}}}
    watcher = CountsModelCalls()
    report = run(
        RunSpec(tasks=4, concurrency=4, journal=tmp_path / "j", config=parse_config(slow), run_id="lat"),
        progress=watcher,
    )
    assert sorted(episode_cell(p.episode, 2) for p, _ in report.episodes.outcomes()) == [0, 0, 1, 1]
    assert report.summary.outcomes == {"success": 4}
    assert watcher.most >= 3, watcher.most


def test_a_runs_fault_rules_are_in_force_in_every_cell(tmp_path: Path) -> None:
    journal = tmp_path / "j"
    report = run(RunSpec(tasks=6, journal=journal, config=in_cells(2), faults=["storm:copies=2,kind=tool_call"]))
    outcomes = report.episodes.outcomes()
    assert len(outcomes) == 6
    for k in range(2):
        with JournalReader(shard_path(journal, k)) as reader:
            controls = list(reader.episode_rows(CONTROL_EPISODE))
            faulted = {row.episode for row in reader.rows() if row.kind == "fault_applied"}
        assert [row.kind for row in controls] == ["control", "control"], "each cell's rule: added, then removed"
        assert faulted == episodes_in(shard_path(journal, k)), f"every episode of cell {k} was faulted"
    with JournalReader(journal) as reader:
        assert len(list(reader.episode_rows(CONTROL_EPISODE))) == 4, "the set reads every cell's controls"
        by_episode = [episode for episode, _ in reader.by_episode()]
        assert by_episode.count(CONTROL_EPISODE) == 1, "the controls are one episode of the set"
        assert dict(reader.by_episode())[CONTROL_EPISODE] == list(reader.episode_rows(CONTROL_EPISODE))
    assert verify(journal).ok, "a cell's controls are in its own shard, where they belong"
    assert main(["replay", str(journal)]) == 0


def test_a_cells_set_exports_and_imports_as_cells(tmp_path: Path) -> None:
    journal = tmp_path / "j"
    run(RunSpec(tasks=4, journal=journal, config=in_cells(2), faults=["storm:copies=2,kind=tool_call"]))
    out = io.StringIO()
    rows = export_jsonl(journal, out)
    copy = tmp_path / "copy"
    assert import_jsonl(out.getvalue().splitlines(), copy) == rows
    assert read_manifest(copy).cells
    assert verify(copy).ok


def test_a_shard_holding_another_cells_episode_fails_verify(tmp_path: Path) -> None:
    """Each cell's controls and dead letters belong in its shard; an episode of another cell does not."""
    single = tmp_path / "single.sqlite"
    run(RunSpec(tasks=4, journal=single, faults=["storm:copies=2,kind=tool_call"]))
    journal = tmp_path / "j"
    create_set(journal, 2, cells=True)
    for k in range(2):
        shutil.copy(single, shard_path(journal, k))
        shutil.copy(single.with_name("single.sqlite.head"), shard_path(journal, k).with_name(f"shard-{k}.sqlite.head"))
    problem = verify(journal).problem
    assert re.search(r"holds episode 'r\w+-.*', which belongs in shard [01]", problem), problem


def test_cells_refuse_what_they_cannot_run_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="cannot name one"):
        in_cells(2, nats={"cells": 2, "url": "nats://127.0.0.1:4222"})
    with pytest.raises(ConfigError, match="set \\[journal\\] shards to 2"):
        in_cells(2, journal={"shards": 3})
    with pytest.raises(ConfigError, match="memory service reads one"):
        run(RunSpec(tasks=1, journal=tmp_path / "m", config=in_cells(2), memory="topk"))
    with pytest.raises(ConfigError, match="a run on the system at .* cannot have them"):
        run(RunSpec(tasks=1, config=in_cells(2), nats="nats://127.0.0.1:4222"))
    assert in_cells(2, journal={"shards": 2}).journal_shards == 2
    assert main(["run", "--cells", "2", "--nats", "nats://127.0.0.1:4222", "--journal", str(tmp_path / "w")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cells are systems a run starts for itself" in err, err
    assert not (tmp_path / "w").exists(), "refused before anything started"


def test_a_journal_set_is_written_by_cells_or_by_one_stream_never_both(tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    create_set(plain, 2)
    with pytest.raises(JournalError, match="written by one stream, asked to be written by cells"):
        run(RunSpec(tasks=1, journal=plain, config=in_cells(2)))
    celled = tmp_path / "celled"
    create_set(celled, 2, cells=True)
    sharded = msgspec.structs.replace(Config(), journal=msgspec.structs.replace(Config().journal, shards=2))
    with pytest.raises(JournalError, match="written by cells, asked to be written by one stream"):
        run(RunSpec(tasks=1, journal=celled, config=sharded))
    assert json.loads((plain / "journal-set.json").read_text()) == {"shards": 2}, "an old set's manifest, unchanged"


def test_up_refuses_cells_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "faultline.toml"
    config.write_text("[nats]\ncells = 2\n")
    assert main(["up", "--config", str(config), "--journal", str(tmp_path / "j")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cells are started by `faultline run`" in err, err
    assert not (tmp_path / "j").exists()


def test_a_system_of_ones_own_runs_in_cells_and_each_cell_ends_its_stalled_episode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run x2's episodes fall one waiting and one asking in each cell: each cell's stall watch ends its own."""
    inputs = tmp_path / "inputs.jsonl"
    records = {"w1": "wait", "a1": "ask", "w2": "wait", "a2": "ask"}
    inputs.write_text("".join(json.dumps({"id": task, "how": how}) + "\n" for task, how in records.items()))
    journal = tmp_path / "j"
    argv = ["run", "--json", "--system", system_path(Waiting), "--inputs", str(inputs), "--journal", str(journal)]
    assert main([*argv, "--cells", "2", "--run-id", "x2", "--stall-after", "1", "--episode-timeout", "60"]) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["outcomes"] == {"failure": 2, "success": 2}
    assert sum(summary["stalled"].values()) == 2
    with JournalReader(journal) as reader:
        stalled = [e.episode for e in reader.episodes() if (e.cause or "").startswith("stalled: ")]
    assert sorted(episode_cell(episode, 2) for episode in stalled) == [0, 1]
    assert sorted(episode.split("-")[1] for episode in stalled) == ["w1", "w2"]
    assert verify(journal).ok


class SeesServers(SilentProgress):
    """Watches a run: the command lines of its nats-servers, once its system is up."""

    def __init__(self) -> None:
        self.servers: list[str] = []

    def system_up(self) -> None:
        self.servers = [command for command in children(os.getpid()).values() if "nats-server" in command]


@pytest.mark.parametrize("security", ["tls", "insecure"])
def test_cells_run_over_tls_and_without_credentials_as_one_system_does(security: str, tmp_path: Path) -> None:
    """Every cell's server speaks TLS with the certificate the run made, or lets anyone in, as asked."""
    journal = tmp_path / "j"
    spec = RunSpec(tasks=4, journal=journal, config=in_cells(2), run_id="lat", **{security: True})  # type: ignore[arg-type]
    watcher = SeesServers()
    assert run(spec, progress=watcher).summary.outcomes == {"success": 4}
    assert len(watcher.servers) == 2
    assert all(("--tlscert" in command) == (security == "tls") for command in watcher.servers), watcher.servers
    assert all((" -c " in command) == (security != "insecure") for command in watcher.servers), watcher.servers
    with JournalReader(journal) as reader:
        assert {episode_cell(e.episode, 2) for e in reader.episodes()} == {0, 1}
    assert verify(journal).ok
