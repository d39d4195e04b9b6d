"""A journal of sim episodes with mistakes, made once for the replay tests by a real `faultline run`."""

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


@pytest.fixture
def journal_copy(sim_journal: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy.sqlite"
    shutil.copy(sim_journal, copy)
    return copy
