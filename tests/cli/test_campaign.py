"""Campaigns end to end (sim, 2 tasks, 1 trial, 2 fault types: three cells): one stopped by SIGTERM,
then killed by SIGKILL, resumes and reports the same as uninterrupted ones run on a system already
running, two of them sharing its journal without mixing their episodes."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from faultline.cli import main
from faultline.report import read_manifest
from tests.runtime.test_processes import completed_in, faultline, finish, wait_until_up

pytestmark = pytest.mark.slow

CAMPAIGN = ("campaign", "--model", "sim", "--tasks", "2", "--trials", "1", "--faults", "storm,cycle")
WAIT_S = 120.0
"""How long a loaded machine may take to reach the point where the test interrupts a campaign."""


def campaign(folder: Path, *extra: str) -> subprocess.Popen[bytes]:
    return faultline(*CAMPAIGN, "--out", str(folder), *extra, cwd=folder.parent)


async def until(condition: Callable[[], object], process: subprocess.Popen[bytes]) -> None:
    """Wait, with a time limit, until `condition()` holds while `process` runs."""
    with anyio.fail_after(WAIT_S):
        while not condition():
            assert process.poll() is None, "the campaign exited first"
            await anyio.sleep(0.05)


def report(folder: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    assert main(["report", str(folder), "--json"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


async def uninterrupted_on_a_running_system(tmp_path: Path, names: tuple[str, ...]) -> None:
    """Run one campaign per name, one after the other, on one `faultline up` and its journal."""
    journal = tmp_path / "up.sqlite"
    up = faultline("up", "--journal", str(journal), cwd=tmp_path)
    try:
        system = await wait_until_up(tmp_path, up)
        for name in names:
            cells = campaign(tmp_path / name, "--nats", system.url, "--journal", str(journal))
            err = await finish(cells, timeout=WAIT_S)
            assert cells.returncode == 0, err[-2000:]
        up.send_signal(signal.SIGTERM)  # drains the workers; the journal catches up before `up` exits
    finally:
        err = await finish(up)
    assert up.returncode == 0, err[-2000:]


@pytest.mark.timeout(600)
async def test_an_interrupted_campaign_resumes_to_the_report_of_uninterrupted_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    await uninterrupted_on_a_running_system(tmp_path, ("whole", "again"))
    whole = report(tmp_path / "whole", capsys)
    assert whole[-1]["episodes"] == 6  # 3 cells of 2 episodes: none of the other campaign's in the shared journal
    assert report(tmp_path / "again", capsys) == whole

    folder = tmp_path / "stopped"
    storm = folder / "cells" / "storm" / "journal.sqlite"
    first = campaign(folder)
    try:
        await until(storm.exists, first)  # the baseline is finished, the storm cell runs
        first.send_signal(signal.SIGTERM)
    finally:
        err = await finish(first)
    assert first.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert "run the same command again to resume: 1 of 3 cells are finished" in err.splitlines()[-1]
    assert [c.done for c in read_manifest(folder).cells] == [True, False, False]

    stopped_inode = storm.stat().st_ino
    second = campaign(folder)
    try:  # the storm cell starts over in a new journal, and runs episodes
        await until(lambda: storm.exists() and storm.stat().st_ino != stopped_inode and completed_in(storm), second)
        second.kill()  # its nats-server, journal service and workers end with it
    finally:
        await finish(second)
    assert [c.done for c in read_manifest(folder).cells] == [True, False, False]

    err = await finish(campaign(folder), timeout=WAIT_S * 3)
    assert "1 of 3 cells already finished" in err, err[-2000:]
    assert [(c.done, c.attempts) for c in read_manifest(folder).cells] == [(True, 1), (True, 3), (True, 1)]
    assert report(folder, capsys) == whole
