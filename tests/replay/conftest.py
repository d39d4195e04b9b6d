"""Journals of sim episodes, with mistakes and without, made once for the replay tests by a real `faultline run`."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from faultline.cli import main
from tests.openai_server import openai_server as openai_server


@pytest.fixture(scope="session")
def sim_journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sim") / "journal.sqlite"
    code = main(
        [
            "run",
            "--tasks",
            "24",
            "--trials",
            "2",
            "--error-rates",
            "0.06",
            "--seed",
            "7",
            "--journal",
            str(path),
            "--json",
        ]
    )
    assert code == 0
    return path


@pytest.fixture(scope="session")
def faultless_journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Episodes the simulator makes no mistake in, whose forks draw none either: a fault put into
    one is its only cause."""
    path = tmp_path_factory.mktemp("faultless") / "journal.sqlite"
    code = main(["run", "--tasks", "12", "--error-rates", "0", "--seed", "7", "--journal", str(path), "--json"])
    assert code == 0
    return path


@pytest.fixture
def journal_copy(sim_journal: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy.sqlite"
    shutil.copy(sim_journal, copy)
    return copy
