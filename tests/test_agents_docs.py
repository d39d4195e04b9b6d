"""docs/agents.md is executed as a new user would follow it, in an empty folder: its files written, its
Python blocks run in order, its `$ faultline` lines run as commands, its pytest file run by pytest."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from faultline.agent import use_plugin_path
from faultline.cli import main

AGENTS_DOC = Path(__file__).resolve().parents[1] / "docs" / "agents.md"
BLOCK = re.compile(r"^```(\w+)(?: ([\w.]+))?\n(.*?)^```$", flags=re.MULTILINE | re.DOTALL)


@pytest.mark.slow
def test_the_agents_page_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")  # the tables' names whole, for the checks below
    monkeypatch.setattr(sys, "path", list(sys.path))
    use_plugin_path([tmp_path])
    namespace: dict[str, object] = {"__name__": "agents_doc"}
    commands = 0
    for number, (language, filename, text) in enumerate(BLOCK.findall(AGENTS_DOC.read_text()), start=1):
        if filename:
            (tmp_path / filename).write_text(text)
        elif language == "python":
            exec(compile(text, f"docs/agents.md block {number}", "exec"), namespace)  # noqa: S102 - the page is ours
        elif language == "console":
            for line in text.splitlines():
                assert line.startswith("$ faultline "), line
                assert main(shlex.split(line)[2:]) == 0, line
                commands += 1
    assert commands >= 5
    out = capsys.readouterr().out
    assert "identical: 8 episodes" in out  # four records, two trials
    assert "critical_information_loss" in out and "math" in out  # the attribution names the fault and the agent
    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_desk.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "2 passed" in tests.stdout
