"""A domain that is not installed (the worked example of docs/domains.md): found through --plugin-path or
`[plugins] path` by `run`, its workers and `replay`, selected by parameters and task positions, and named
in one line when it cannot be imported."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from faultline.agent import Domain, Task
from faultline.cli import main
from faultline.journal import JournalReader

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
"""The worked example of docs/domains.md: lendbench, a benchmark of its own, and its adapter."""
DOMAIN = "lendbench_faultline:LendBench?split=test"


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The examples folder, which this process cannot import from until it is put on the path."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    return EXAMPLES


def journaled(journal: Path, kind: str) -> list[Any]:
    with JournalReader(journal) as reader:
        return [r.envelope() for r in reader.rows() if r.kind == kind]


@pytest.mark.slow
def test_the_worked_example_runs_in_the_workers_and_replays_only_where_it_imports(
    plugins: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "j.sqlite"
    args = ["run", "--json", "--plugin-path", str(plugins), "--domain", DOMAIN, "--task-range", "0:4"]
    assert main([*args, "--journal", str(journal)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["episodes"], summary["pass_k"]) == (4, {"1": 1.0})
    settings = [e.body.settings for e in journaled(journal, "episode_started")]
    assert sorted(s["task"] for s in settings) == ["0", "1", "2", "3"]
    assert {(s["domain"], s["max_turns"], s["max_steps"]) for s in settings} == {(DOMAIN, 30, 30)}
    turns = [e.body for e in journaled(journal, "user_turn") if e.sender == "user"]
    instructions = [t["instruction"] for t in lendbench_tasks()]
    assert turns and not any(i in t.text for t in turns for i in instructions)

    replay = [sys.executable, "-m", "faultline.cli", "replay", str(journal)]
    missing = subprocess.run(replay, capture_output=True, text=True, cwd=tmp_path, check=False)
    assert missing.returncode == 1
    assert missing.stderr.startswith(
        "faultline: error: cannot load domain 'lendbench_faultline:LendBench': no module named 'lendbench_faultline'"
    )
    assert len(missing.stderr.splitlines()) == 1
    (tmp_path / "faultline.toml").write_text(f'[plugins]\npath = ["{plugins}"]\n')
    found = subprocess.run(replay, capture_output=True, text=True, cwd=tmp_path, check=False)
    assert found.returncode == 0, found.stderr
    assert "identical" in found.stdout


def lendbench_tasks() -> list[dict[str, Any]]:
    from lendbench.tasks import TEST  # importable once the run put the examples on the path

    return TEST


@pytest.mark.parametrize(
    ("flags", "code", "message"),
    [
        (
            ["--domain", "absent_plugin:Shelf"],
            1,
            "error: cannot load domain 'absent_plugin:Shelf': no module named 'absent_plugin'",
        ),
        (["--plugin-path", "nowhere"], 2, "usage error: --plugin-path nowhere: no such folder"),
        (["--task-range", "3:1"], 2, "usage error: --task-range '3:1': use FROM:TO with whole numbers, FROM < TO"),
        (["--task-range", "0:99"], 2, "usage error: --task-range '0:99': domain 'retail' has 65 tasks"),
        (["--task-ids", "x,y"], 2, "usage error: --task-ids: domain 'retail' has no task 'x'"),
        (["--task-ids", "cancel-00,cancel-00"], 2, "usage error: --task-ids: 'cancel-00' is named twice; --trials K"),
        (["--task-ids", ","], 2, "usage error: --task-ids ',': names no task"),
        (["--memory", "topk:x"], 2, "usage error: --memory 'topk:x': use off, topk, topk:K or dynamic"),
        (["--tasks", "2", "--task-ids", "1"], 2, "not allowed with argument --tasks"),
        (
            ["--domain", f"{__name__}:RaisingTasks"],
            1,
            "error: domain 'raising': tasks() raised FileNotFoundError: tasks.json is missing",
        ),
        (
            ["--domain", f"{__name__}:TwiceListed"],
            1,
            "error: domain 'twice' lists task 'a' twice: task ids must be unique",
        ),
    ],
)
def test_a_domain_or_selection_that_cannot_work_is_one_line_before_anything_starts(
    plugins: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], code: int, message: str
) -> None:
    assert main(["run", *flags, "--journal", str(tmp_path / "j.sqlite")]) == code
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert message in err
    assert not (tmp_path / ".faultline").exists()


class RaisingTasks(Domain):
    """A benchmark adapter whose task file is not there."""

    name = "raising"

    def seed_database(self, db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE t (x)")

    def tasks(self) -> list[Task]:
        raise FileNotFoundError("tasks.json is missing")


class TwiceListed(RaisingTasks):
    name = "twice"

    def tasks(self) -> list[Task]:
        return [Task(id="a", instruction="one"), Task(id="a", instruction="two")]


def test_a_benchmark_tool_error_reaches_the_model_once_prefixed(plugins: Path) -> None:
    """lendbench's tools answer "Error: ..."; the adapter hands on the reason, the model reads one prefix."""
    from faultline.envs import Action, load_domain, use_plugin_path

    use_plugin_path([plugins])
    domain = load_domain(DOMAIN)
    db = domain.open_database()
    outcome = domain.call(db, Action(name="get_member_details", arguments={"member_id": "nobody"}))
    assert outcome.as_text() == "Error: member not found"
