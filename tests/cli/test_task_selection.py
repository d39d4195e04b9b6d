"""Which tasks `run` and `campaign` take: the first N, by id or by position; asked for more than there are, they take
all and say so on stderr, where the JSON lines of `--json` never are."""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace

import pytest

from faultline.api import RunSpec
from faultline.cli import _campaign as campaign_cli
from faultline.cli import _run as cli_run
from faultline.cli import build_parser, main
from faultline.envs import load_domain

GOSSIP = "tests.replay.test_fork_topics:Gossip"


@pytest.fixture
def inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two input records of a system of one's own, in a folder where no `faultline up` runs."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": "a", "secret": "42"}\n{"id": "b", "secret": "7"}\n')
    return path


def planned(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> RunSpec:
    """The spec `faultline run argv` hands the API (which is not run)."""
    specs: list[RunSpec] = []
    monkeypatch.setattr(cli_run, "run", lambda spec, progress: specs.append(spec))
    cli_run.execute_run(build_parser("run").parse_args(["run", *argv]))
    (spec,) = specs
    return spec


def cells(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> list[argparse.Namespace]:
    """The `run` arguments of each cell of `faultline campaign argv` (a baseline and storm), whose runs end well
    without running."""
    runs: list[argparse.Namespace] = []

    def run_well(args: argparse.Namespace, *, label: str, sim_note: bool) -> SimpleNamespace:
        runs.append(args)
        return SimpleNamespace(signal=None, journal_problem="", refused="")

    monkeypatch.setattr(campaign_cli, "execute_run", run_well)
    assert main(["campaign", "--model", "sim", "--faults", "storm", *argv]) == 0
    return runs


def test_a_run_asked_for_more_tasks_than_there_are_takes_all_and_says_so(
    inputs: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the API is asked for the 2 there are, so the note is said once, here, not again as its warning
    assert planned(["--system", GOSSIP, "--inputs", str(inputs), "--tasks", "5", "--json"], monkeypatch).tasks == 2
    said = capsys.readouterr()
    assert (said.out, said.err) == ("", f"note: inputs {inputs} has 2 tasks, so --tasks 5 takes all 2\n")
    retail = len(load_domain("retail").checked_tasks())
    planned(["--tasks", str(retail + 1), "--json"], monkeypatch)
    said = capsys.readouterr()
    assert (said.out, said.err) == (
        "",
        f"note: domain 'retail' has {retail} tasks, so --tasks {retail + 1} takes all {retail}\n",
    )


def test_a_run_asked_for_no_more_tasks_than_there_are_says_nothing_of_them(
    inputs: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (["--tasks", "2"], []):
        planned(["--system", GOSSIP, "--inputs", str(inputs), *argv, "--json"], monkeypatch)
        assert capsys.readouterr().err == ""


def test_a_campaign_asked_for_more_tasks_than_there_are_takes_all_and_says_so(
    inputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = cells(
        ["--system", GOSSIP, "--inputs", str(inputs), "--tasks", "5", "--out", str(tmp_path / "c")], monkeypatch
    )
    assert [args.task_ids for args in runs] == ["a,b", "a,b"]
    assert f"note: inputs {inputs} has 2 tasks, so --tasks 5 takes all 2\n" in capsys.readouterr().err


def test_a_campaign_takes_the_tasks_its_task_ids_or_task_range_pick_as_run_does_and_each_cell_runs_them(
    inputs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = (task.id for task in load_domain("retail").checked_tasks()[:2])
    picked = cells(["--task-ids", f"{second},{first}", "--out", str(tmp_path / "ids")], monkeypatch)
    assert [args.task_ids for args in picked] == [f"{second},{first}"] * 2  # in the order given
    system = ["--system", GOSSIP, "--inputs", str(inputs)]
    picked = cells([*system, "--task-range", "1:2", "--out", str(tmp_path / "range")], monkeypatch)
    assert [args.task_ids for args in picked] == ["b", "b"]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--task-ids", "zz"], "faultline: usage error: --task-ids: inputs {inputs} has no task 'zz'"),
        (["--task-ids", "a,a"], "--task-ids: 'a' is named twice; --trials K runs each task K times"),
        (["--task-range", "1:3"], "--task-range '1:3': inputs {inputs} has 2 tasks"),
        (["--tasks", "1", "--task-ids", "a"], "argument --task-ids: not allowed with argument --tasks"),
    ],
)
def test_a_campaign_refuses_a_selection_run_refuses_in_one_line_before_it_starts(
    argv: list[str], said: str, inputs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    system = ["--system", GOSSIP, "--inputs", str(inputs)]
    assert main(["campaign", "--model", "sim", *system, *argv, "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and said.format(inputs=inputs) in err, err
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("given, passed", [("0", 0.0), ("2.5", 2.5), (None, None)])
def test_a_campaign_gives_each_cells_run_its_stall_after_zero_included(
    given: str | None, passed: float | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flag = ["--stall-after", given] if given is not None else []
    runs = cells(["--tasks", "1", *flag, "--out", str(tmp_path / "c")], monkeypatch)
    assert [args.stall_after for args in runs] == [passed, passed]
