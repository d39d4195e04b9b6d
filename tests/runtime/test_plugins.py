"""A domain that is not installed: found through --plugin-path or `[plugins] path` by `run`, its workers
and `replay`, selected by parameters and task ids, and named in one line when it cannot be imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from faultline.cli import main
from faultline.journal import JournalReader

PLUGIN = """
import sqlite3
from faultline.envs import Action, Budgets, Domain, Task, tool


class Shelf(Domain):
    name = "shelf"
    policy = "Shelve only the books the user names."
    budgets = Budgets(user_turns=7, agent_steps=21)

    def __init__(self, split: str = "all") -> None:
        self.split = split

    def seed_database(self, db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE books (title TEXT PRIMARY KEY, shelf INTEGER)")

    @tool("Put a book on a shelf.", writes=True, title=("string", "The title."), shelf=("integer", "The shelf."))
    def shelve(self, db: sqlite3.Connection, title: str, shelf: int) -> str:
        db.execute("INSERT OR REPLACE INTO books VALUES (?, ?)", (title, shelf))
        return "shelved"

    def tasks(self) -> list[Task]:
        tasks = [
            Task(id=str(i), instruction=f"Put book {i} on shelf {i}.",
                 actions=[Action(name="shelve", arguments={"title": f"book {i}", "shelf": i})])
            for i in range(6)
        ]
        return tasks if self.split == "all" else tasks[::2]
"""


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder holding the plugin, which the test process cannot import until it is put on the path."""
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "shelf_plugin.py").write_text(PLUGIN)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    return folder


def started(journal: Path) -> list[dict[str, object]]:
    with JournalReader(journal) as reader:
        return [
            r.envelope().body.settings  # type: ignore[attr-defined]
            for r in reader.rows()
            if r.kind == "episode_started"
        ]


@pytest.mark.slow
def test_a_plugin_runs_in_the_workers_and_replays_only_where_it_imports(
    plugins: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "j.sqlite"
    domain = "shelf_plugin:Shelf?split=even"
    args = ["run", "--json", "--plugin-path", str(plugins), "--domain", domain, "--task-range", "1:3"]
    assert main([*args, "--journal", str(journal)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["episodes"], summary["pass_k"]) == (2, {"1": 1.0})
    settings = started(journal)
    assert sorted(s["task"] for s in settings) == ["2", "4"]
    assert {(s["domain"], s["max_turns"], s["max_steps"]) for s in settings} == {(domain, 7, 21)}

    replay = [sys.executable, "-m", "faultline.cli", "replay", str(journal)]
    missing = subprocess.run(replay, capture_output=True, text=True, cwd=tmp_path, check=False)
    assert missing.returncode == 1
    assert missing.stderr.startswith("faultline: error: cannot import domain shelf_plugin:Shelf: ModuleNotFoundError")
    assert len(missing.stderr.splitlines()) == 1
    (tmp_path / "faultline.toml").write_text(f'[plugins]\npath = ["{plugins.name}"]\n')
    found = subprocess.run(replay, capture_output=True, text=True, cwd=tmp_path, check=False)
    assert found.returncode == 0, found.stderr
    assert "identical" in found.stdout


@pytest.mark.parametrize(
    ("flags", "code", "message"),
    [
        (
            ["--domain", "absent_plugin:Shelf"],
            1,
            "error: cannot import domain absent_plugin:Shelf: ModuleNotFoundError",
        ),
        (["--plugin-path", "nowhere"], 2, "usage error: --plugin-path nowhere: no such folder"),
        (["--task-range", "3:1"], 2, "usage error: --task-range '3:1': use FROM:TO with whole numbers, FROM < TO"),
        (["--task-range", "0:99"], 2, "usage error: --task-range '0:99': domain 'retail' has 65 tasks"),
        (["--task-ids", "x,y"], 1, "error: domain 'retail' has no task 'x'"),
        (["--tasks", "2", "--task-ids", "1"], 2, "not allowed with argument --tasks"),
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
