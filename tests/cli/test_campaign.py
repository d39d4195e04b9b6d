"""A campaign stopped by SIGTERM, then killed by SIGKILL, resumes and ends with the report of an
uninterrupted one (sim, 2 tasks, 1 trial, 2 fault types: three cells)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import anyio
import pytest

from faultline.cli import main
from faultline.report import read_manifest
from tests.runtime.test_processes import children, completed_in, faultline, finish

pytestmark = pytest.mark.slow

CAMPAIGN = ("campaign", "--model", "sim", "--tasks", "2", "--trials", "1", "--faults", "storm,cycle")
WAIT_S = 120.0
"""How long a loaded machine may take to reach the point where the test interrupts a campaign."""


def campaign(folder: Path) -> subprocess.Popen[bytes]:
    return faultline(*CAMPAIGN, "--out", str(folder), cwd=folder.parent)


async def until(condition: object, process: subprocess.Popen[bytes]) -> None:
    """Wait, with a time limit, until `condition()` holds while `process` runs."""
    with anyio.fail_after(WAIT_S):
        while not condition():  # type: ignore[operator]
            assert process.poll() is None, "the campaign exited first"
            await anyio.sleep(0.05)


def report(folder: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    assert main(["report", str(folder), "--json"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.mark.timeout(600)
async def test_an_interrupted_campaign_resumes_to_the_report_of_an_uninterrupted_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reference = tmp_path / "whole"
    err = await finish(campaign(reference), timeout=WAIT_S * 3)
    assert [c.done for c in read_manifest(reference).cells] == [True, True, True], err[-2000:]

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
        system = children(second.pid)
        second.kill()
        for pid in system:  # its nats-server, journal service and workers outlive a SIGKILL
            os.kill(pid, signal.SIGKILL)
    finally:
        await finish(second)
    assert [c.done for c in read_manifest(folder).cells] == [True, False, False]

    err = await finish(campaign(folder), timeout=WAIT_S * 3)
    assert "1 of 3 cells already finished" in err, err[-2000:]
    assert [c.done for c in read_manifest(folder).cells] == [True, True, True]
    assert report(folder, capsys) == report(reference, capsys)
