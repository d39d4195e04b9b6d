"""Campaigns end to end (sim, 2 tasks, 1 trial, one fault type: two cells), all on one `faultline up`
and its journal: one stopped by SIGTERM, then killed by SIGKILL, resumes and reports the same as an
uninterrupted one; neither counts the other's episodes, nor those of an interrupted attempt."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import anyio
import pytest

from faultline._errors import FaultlineError, JournalError
from faultline.cli import _campaign as campaign_cli
from faultline.cli import main
from faultline.cli._models import effective_config
from faultline.cli._run import selectable_ids
from faultline.journal import Journal, JournalReader
from faultline.report import SIM_SYSTEM_NOTE, read_manifest
from tests.runtime.test_processes import faultline, finish, wait_until_up

pytestmark = pytest.mark.slow

CAMPAIGN = ("campaign", "--model", "sim", "--tasks", "2", "--trials", "1", "--faults", "storm")
WAIT_S = 120.0
"""How long a loaded machine may take to reach the point where the test interrupts a campaign."""


async def until(condition: Callable[[], object], process: subprocess.Popen[bytes]) -> None:
    """Wait, with a time limit, until `condition()` holds while `process` runs."""
    with anyio.fail_after(WAIT_S):
        while not condition():
            assert process.poll() is None, "the campaign exited first"
            await anyio.sleep(0.05)


def attempts(folder: Path) -> list[int]:
    """The attempts at each cell so far ([] before the manifest is written)."""
    try:
        return [c.attempts for c in read_manifest(folder).cells]
    except FaultlineError:
        return []


def running(folder: Path, journal: Path) -> bool:
    """Whether the journal holds a row of the last attempt at the campaign's storm cell."""
    cells = attempts(folder)
    if cells[-1:] != [1]:
        return False
    run_id = read_manifest(folder).cells[-1].run_id
    try:
        with JournalReader(journal) as reader:
            return any(r.episode.startswith(run_id) for r in reader.rows())
    except JournalError:
        return False


def report(folder: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    assert main(["report", str(folder), "--json"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.mark.timeout(300)
async def test_an_interrupted_campaign_resumes_to_the_report_of_an_uninterrupted_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "up.sqlite"
    # Each of the tool agent's model calls takes 0.5 s (sim's emulated latency), so a cell lasts seconds,
    # not the fraction of one in which it could end between the test seeing it run and the signal.
    (tmp_path / "faultline.toml").write_text('[models.tool.latency]\ndistribution = "fixed"\nseconds = 0.5\n')
    up = faultline("up", "--journal", str(journal), cwd=tmp_path)
    try:
        system = await wait_until_up(tmp_path, up)

        def campaign(name: str) -> subprocess.Popen[bytes]:
            folder = tmp_path / name
            return faultline(*CAMPAIGN, "--out", str(folder), "--nats", system.url, "--journal", str(journal),
                             cwd=tmp_path)  # fmt: skip

        whole = campaign("whole")
        err = await finish(whole, timeout=WAIT_S)
        assert whole.returncode == 0, err[-2000:]
        with JournalReader(journal) as reader:
            tool = next(cost for cost in reader.agent_costs() if cost.agent == "tool")
        assert tool.calls and tool.latency_s >= 0.5 * tool.calls, "each model call took its emulated 0.5 s"

        folder = tmp_path / "stopped"
        first = campaign("stopped")
        try:
            await until(lambda: running(folder, journal), first)  # the baseline is finished, the storm cell runs
            first.send_signal(signal.SIGTERM)
        finally:
            err = await finish(first)
        assert first.returncode == 128 + signal.SIGTERM, err[-2000:]
        assert "run the same command again to resume: 1 of 2 cells are finished" in err.splitlines()[-1]
        assert [c.done for c in read_manifest(folder).cells] == [True, False]

        second = campaign("stopped")
        try:  # the storm cell starts over with a run id of its own
            await until(lambda: attempts(folder) == [1, 2], second)
            second.kill()
        finally:
            await finish(second)
        assert [c.done for c in read_manifest(folder).cells] == [True, False]

        err = await finish(campaign("stopped"), timeout=WAIT_S)
        assert "1 of 2 cells already finished" in err, err[-2000:]
    finally:
        up.send_signal(signal.SIGTERM)  # drains the workers; the journal catches up before `up` exits
        err = await finish(up)
    assert up.returncode == 0, err[-2000:]
    assert [(c.done, c.attempts) for c in read_manifest(folder).cells] == [(True, 1), (True, 3)]
    expected = report(tmp_path / "whole", capsys)
    assert expected[-1]["episodes"] == 4  # 2 cells of 2 episodes: none of the other campaign's in the journal
    assert report(folder, capsys) == expected


def test_a_signal_between_two_cells_stops_the_campaign_before_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runs: list[str] = []

    def run_then_signalled(args: object, *, label: str, sim_note: bool) -> SimpleNamespace:
        """A cell's run that ends well, after which the campaign's process is sent SIGTERM."""
        runs.append(label)
        os.kill(os.getpid(), signal.SIGTERM)
        return SimpleNamespace(signal=None, journal_problem="", refused="")

    monkeypatch.setattr(campaign_cli, "execute_run", run_then_signalled)
    before = signal.getsignal(signal.SIGTERM)
    folder = tmp_path / "c"
    assert main([*CAMPAIGN, "--out", str(folder)]) == 128 + signal.SIGTERM
    assert len(runs) == 1 and runs[0].startswith("cell 1/2 baseline")
    assert [c.done for c in read_manifest(folder).cells] == [True, False]
    err = capsys.readouterr().err
    assert "stopped by SIGTERM before cell storm; run the same command again to resume: 1 of 2 cells" in err
    assert signal.getsignal(signal.SIGTERM) == before, "the campaign leaves the signal handlers as it found them"


def test_a_cell_the_journal_cut_short_stays_unfinished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run that the journal refused new episodes (it could not write) reports what completed: the cell holds only
    part of its episodes, so the campaign stops on it and runs it again when run once more."""

    def run_refused(args: object, *, label: str, sim_note: bool) -> SimpleNamespace:
        return SimpleNamespace(signal=None, journal_problem="", refused="new episodes are refused (disk full)")

    monkeypatch.setattr(campaign_cli, "execute_run", run_refused)
    folder = tmp_path / "c"
    assert main([*CAMPAIGN, "--out", str(folder)]) == 1
    err = capsys.readouterr().err
    assert err.endswith("faultline: error: cell baseline was cut short: new episodes are refused (disk full)\n"), err
    assert [c.done for c in read_manifest(folder).cells] == [False, False]


def test_a_campaign_on_a_system_of_ones_own_gives_its_runs_no_domain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`run` refuses a --domain for a system of one's own, which runs its input records: the cells' runs have none."""
    inputs = tmp_path / "in.jsonl"
    inputs.write_text('{"id": "a", "secret": "42"}\n')
    selected: list[tuple[list[str], str]] = []

    def run_selecting(args: argparse.Namespace, *, label: str, sim_note: bool) -> SimpleNamespace:
        """A cell's run that selects its inputs as `run` does, then ends well."""
        selected.append(selectable_ids(args, effective_config(args)))
        return SimpleNamespace(signal=None, journal_problem="", refused="")

    monkeypatch.setattr(campaign_cli, "execute_run", run_selecting)
    system = ("--system", "tests.replay.test_fork_topics:Gossip", "--inputs", str(inputs))
    assert main([*CAMPAIGN, *system, "--out", str(tmp_path / "c")]) == 0
    assert selected == [(["a"], f"inputs {inputs}")] * 2
    note = " ".join(capsys.readouterr().err.split())  # sim echoes the system's agents: it follows no ground truth
    assert f"note: {SIM_SYSTEM_NOTE}" in note and "ground truth" not in note


def test_a_finished_cell_whose_journal_is_gone_runs_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The manifest said it was done, so running the campaign again skipped it, and `report` could not read the
    folder: nothing of the cell was left but its line in the manifest."""
    runs: list[str] = []

    def run_journaling(args: argparse.Namespace, *, label: str, sim_note: bool) -> SimpleNamespace:
        """A cell's run that ends well and leaves its journal where the campaign put it."""
        runs.append(label)
        Journal.open(args.journal).close()
        return SimpleNamespace(signal=None, journal_problem="", refused="")

    monkeypatch.setattr(campaign_cli, "execute_run", run_journaling)
    folder = tmp_path / "c"
    assert main([*CAMPAIGN, "--out", str(folder)]) == 0
    manifest = read_manifest(folder)
    storm = manifest.cells[-1]
    for path in manifest.journal_of(folder, storm).parent.glob("journal.sqlite*"):
        path.unlink()
    capsys.readouterr()
    assert main([*CAMPAIGN, "--out", str(folder)]) == 0
    assert [label.split()[2] for label in runs] == ["baseline", "storm", "storm"]
    assert "cell(s) storm finished, but their journals are gone: they run again" in capsys.readouterr().err
    assert all(c.done for c in read_manifest(folder).cells)
