"""A run asked for more tasks than its domain (its input records) holds runs all of them and says so: in its report,
which says how many were asked for and how many ran, and as a warning under `faultline.api` before it starts, as the
command line says it in a note."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from faultline.api import RunSpec, run, tasks_taken

COUNTER = "tests.runtime.counter_domain:Counter"
"""A domain of two tasks."""
GOSSIP = "tests.replay.test_fork_topics:Gossip"


@pytest.fixture
def warnings() -> Iterator[list[str]]:
    """What is logged as a warning under `faultline.api` (a command run in this process may have stopped its
    records from reaching the root logger, where `caplog` listens)."""
    said: list[str] = []

    class Kept(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno == logging.WARNING:
                said.append(record.getMessage())

    logger = logging.getLogger("faultline.api")
    handler = Kept()
    logger.addHandler(handler)
    try:
        yield said
    finally:
        logger.removeHandler(handler)


def test_more_tasks_than_there_are_are_all_of_them_with_a_note_and_no_more_are_as_many_without() -> None:
    assert tasks_taken(5, 2, "domain 'counter'") == (2, "domain 'counter' has 2 tasks, so tasks=5 takes all 2")
    assert tasks_taken(5, 2, "inputs in.jsonl", named="--tasks {}")[1] == (
        "inputs in.jsonl has 2 tasks, so --tasks 5 takes all 2"
    )
    assert tasks_taken(2, 2, "domain 'counter'") == (2, "")
    assert tasks_taken(1, 2, "domain 'counter'") == (1, "")


def test_a_run_asked_for_more_tasks_than_its_domain_holds_runs_them_all_and_says_so(
    tmp_path: Path, warnings: list[str]
) -> None:
    """`run(RunSpec(tasks=5))` on a domain of two ran two tasks, and neither its report nor anything else said so."""
    report = run(RunSpec(domain=COUNTER, tasks=5, journal=tmp_path / "j.sqlite", insecure=True))
    assert report.plan is not None
    assert (report.tasks_asked, report.plan.tasks, report.summary.tasks, report.summary.episodes) == (5, 2, 2, 2)
    assert report.tasks_note == f"domain {COUNTER!r} has 2 tasks, so tasks=5 takes all 2"
    assert warnings == [report.tasks_note]


def test_a_run_asked_for_more_input_records_than_there_are_says_so_and_one_asked_for_no_more_says_nothing(
    tmp_path: Path, warnings: list[str]
) -> None:
    inputs = tmp_path / "in.jsonl"
    inputs.write_text('{"id": "a", "secret": "42"}\n{"id": "b", "secret": "7"}\n')
    system = RunSpec(system=GOSSIP, inputs=inputs, tasks=3, journal=tmp_path / "j.sqlite", insecure=True)
    report = run(system)
    assert (report.tasks_asked, report.summary.tasks) == (3, 2)
    assert report.tasks_note == f"inputs {inputs} has 2 tasks, so tasks=3 takes all 2"
    assert warnings == [report.tasks_note]
    warnings.clear()
    enough = run(RunSpec(domain=COUNTER, tasks=2, journal=tmp_path / "counter.sqlite", insecure=True))
    assert (enough.tasks_asked, enough.summary.tasks, enough.tasks_note, warnings) == (2, 2, "", [])
