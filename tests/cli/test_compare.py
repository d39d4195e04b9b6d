"""`faultline compare`: two journals of the same tasks, summarised over the tasks both hold."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faultline.api import SIM_NOTE, SIM_SYSTEM_NOTE
from faultline.cli import main
from faultline.core import Envelope, EpisodeCompleted, EpisodeStarted, MessageBody, Recording, Subjects, derive_id
from faultline.journal import Incoming, Journal

TURN_LIMIT = "turn limit reached (30 user turns)"


def _episode(
    name: str, task: str, trial: int, done: EpisodeCompleted, roster: list[str], run: str = "", model: str = "m"
) -> list[Envelope]:
    """An episode with one model call per agent (the tool agent and each helper, 100 + 10 tokens each); its start
    records `run`."""
    usage = {"prompt_tokens": 100, "completion_tokens": 10}
    calls: list[tuple[str, MessageBody]] = [
        (agent, Recording(call="llm", index=0, request_digest="d", response={"usage": usage, "model": model}))
        for agent in ("tool", *roster)
    ]
    started = EpisodeStarted(domain="retail", task=task, trial=trial, roster=roster, run=run)
    bodies = [("runner", started), *calls, ("env", done)]
    return [
        Envelope(id=derive_id(name, i), episode=name, sender=sender, body=body, ts=1.0 + i)
        for i, (sender, body) in enumerate(bodies)
    ]


Episodes = list[tuple[str, int, EpisodeCompleted]]
"""(task, trial, how it completed)."""


def _run(
    episodes: Episodes, roster: list[str], run: str = "", *, recorded: bool = False, model: str = "m"
) -> list[Envelope]:
    """The episodes of a run: ids `<run>-<task>-t<trial>`, as `faultline run` names them (no run: `<task>-t<trial>`);
    `recorded`: their starts record the run, as `faultline run`'s do (else as they did not before)."""
    prefix = f"{run}-" if run else ""
    return [
        e
        for task, trial, done in episodes
        for e in _episode(f"{prefix}{task}-t{trial}", task, trial, done, roster, run if recorded else "", model)
    ]


def _write(path: Path, envelopes: list[Envelope]) -> Path:
    subjects = Subjects()
    with Journal.open(path) as journal:
        journal.append([Incoming("S", i + 1, subjects.for_envelope(e), e) for i, e in enumerate(envelopes)])
    return path


def _journal(path: Path, episodes: Episodes, roster: list[str]) -> Path:
    return _write(path, _run(episodes, roster))


OK = EpisodeCompleted(outcome="success", reward=1.0, latency_s=0.5)


def test_compare_prints_pass_k_failures_and_costs_per_journal_over_common_tasks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    failed = EpisodeCompleted(outcome="failure", cause=TURN_LIMIT, latency_s=1.5)
    a = _journal(
        tmp_path / "a.sqlite",
        [("t1", 0, OK), ("t1", 1, failed), ("t2", 0, OK), ("t2", 1, EpisodeCompleted(outcome="timeout"))],
        [],
    )
    b = _journal(
        tmp_path / "b.sqlite",
        [("t1", 0, OK), ("t1", 1, OK), ("t2", 0, OK), ("t2", 1, failed), ("t3", 0, failed)],
        ["dce"],
    )
    plot = tmp_path / "compare.png"
    assert main(["compare", str(a), str(b), "--json", "--plot", str(plot)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    rows = {(row["type"], row["name"]): row["values"] for row in lines if row["type"] != "summary"}
    assert rows["pass_k", "pass^1"] == {"a.sqlite": 0.5, "b.sqlite": 0.75}
    assert rows["pass_k", "pass^2"] == {"a.sqlite": 0.0, "b.sqlite": 0.5}
    assert rows["failures", "turn limit reached"] == {"a.sqlite": 1.0, "b.sqlite": 1.0}
    assert rows["failures", "timeout"] == {"a.sqlite": 1.0, "b.sqlite": 0.0}
    assert rows["agent_tokens", "dce"] == {"a.sqlite": 0.0, "b.sqlite": 110.0}
    assert rows["tokens", "all agents"] == {"a.sqlite": 110.0, "b.sqlite": 220.0}
    # a's timeout reports no latency, and is left out: counted as 0 it made the journal with a timeout look faster
    assert rows["latency_s", "latency / episode"] == {"a.sqlite": pytest.approx(2.5 / 3), "b.sqlite": 0.75}
    summary = lines[-1]
    assert summary["type"] == "summary" and summary["tasks"] == 2
    assert summary["left_out"] == {"a.sqlite": [], "b.sqlite": ["t3"]}
    assert summary["helper_overhead"]["b.sqlite"] == {"tokens": 1.0}
    assert summary["note"] == "", "no side ran on sim"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and b"tEXtDescription" not in plot.read_bytes()


def test_compare_of_sim_runs_says_what_their_numbers_measure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _write(tmp_path / "a.sqlite", _run([("t1", 0, OK)], [], model="sim"))
    b = _write(tmp_path / "b.sqlite", _run([("t1", 0, OK)], [], model="m"))
    plot = tmp_path / "compare.png"
    assert main(["compare", str(a), str(b), "--json", "--plot", str(plot)]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["note"] == SIM_NOTE
    assert b"tEXtDescription\x00note: " + SIM_NOTE.encode() in plot.read_bytes()
    assert main(["compare", str(a), str(b)]) == 0
    assert "note: sim is an offline simulator" in " ".join(capsys.readouterr().out.split())


def test_compare_refuses_journals_with_no_task_in_common(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _journal(tmp_path / "a.sqlite", [("t1", 0, OK)], [])
    b = _journal(tmp_path / "b.sqlite", [("t2", 0, OK)], [])
    assert main(["compare", str(a), str(b)]) == 2
    assert capsys.readouterr().err.strip() == "faultline: usage error: compare: the journals have no task in common"


def test_compare_takes_the_episode_filters_in_every_journal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _journal(tmp_path / "a.sqlite", [("t1", 0, OK), ("t2", 0, OK)], [])
    b = _journal(tmp_path / "b.sqlite", [("t1", 0, OK), ("t2", 0, OK)], [])
    assert main(["compare", str(a), str(b), "--task", "t2", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["type"] == "summary" and summary["tasks"] == 1


FAILED = EpisodeCompleted(outcome="failure", cause=TURN_LIMIT)


def _shared(path: Path) -> Path:
    """One journal of three runs, as a campaign's cells on one running system leave it: c1-0-baseline-1 solved both
    tasks, c1-1-storm-1 one of them, and c1-1-storm-10 (another attempt, its id c1-1-storm-1 and more) neither."""
    return _write(
        path,
        [
            *_run([("t1", 0, OK), ("t2", 0, OK)], [], "c1-0-baseline-1"),
            *_run([("t1", 0, OK), ("t2", 0, FAILED)], [], "c1-1-storm-1"),
            *_run([("t1", 0, FAILED), ("t2", 0, FAILED)], [], "c1-1-storm-10"),
        ],
    )


def test_compare_takes_each_run_of_one_journal_as_a_side(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shared = _shared(tmp_path / "shared.sqlite")
    assert main(["compare", str(shared), "--run", "c1-0-baseline-1", "--run", "c1-1-storm-1", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    rows = {(row["type"], row["name"]): row["values"] for row in lines if row["type"] != "summary"}
    assert rows["episodes", "episodes"] == {"c1-0-baseline-1": 2.0, "c1-1-storm-1": 2.0}
    assert rows["pass_k", "pass^1"] == {"c1-0-baseline-1": 1.0, "c1-1-storm-1": 0.5}
    summary = lines[-1]
    assert summary["runs"] == {"c1-0-baseline-1": "c1-0-baseline-1", "c1-1-storm-1": "c1-1-storm-1"}
    assert summary["journals"] == {"c1-0-baseline-1": str(shared), "c1-1-storm-1": str(shared)}


def test_compare_takes_a_run_by_what_its_starts_record_not_by_how_its_ids_begin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run c1-1's episode ids begin as every one of run c1-1-x's does: `--run c1-1` took both runs."""
    shared = _write(
        tmp_path / "shared.sqlite",
        [
            *_run([("t1", 0, OK), ("t2", 0, OK)], [], "c1-1", recorded=True),
            *_run([("t1", 0, FAILED), ("t2", 0, FAILED), ("t3", 0, FAILED)], [], "c1-1-x", recorded=True),
        ],
    )
    assert main(["compare", str(shared), "--run", "c1-1", "--run", "c1-1-x", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    rows = {(row["type"], row["name"]): row["values"] for row in lines if row["type"] != "summary"}
    assert rows["episodes", "episodes"] == {"c1-1": 2.0, "c1-1-x": 2.0}
    assert rows["pass_k", "pass^1"] == {"c1-1": 1.0, "c1-1-x": 0.0}
    assert lines[-1]["left_out"] == {"c1-1": [], "c1-1-x": ["t3"]}


def test_compare_takes_a_run_in_each_journal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _shared(tmp_path / "a.sqlite")
    b = _write(tmp_path / "b.sqlite", _run([("t1", 0, OK), ("t2", 0, OK)], [], "c1-1-storm-1"))
    assert main(["compare", str(a), str(b), "--run", "c1-1-storm-1", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    rows = {(row["type"], row["name"]): row["values"] for row in lines if row["type"] != "summary"}
    assert rows["pass_k", "pass^1"] == {"a.sqlite:c1-1-storm-1": 0.5, "b.sqlite:c1-1-storm-1": 1.0}


def test_compare_of_a_run_the_journal_does_not_hold_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shared = _shared(tmp_path / "shared.sqlite")
    assert main(["compare", str(shared), "--run", "c1-0-baseline-1", "--run", "c1-2"]) == 1
    assert capsys.readouterr().err == (
        f"faultline: error: {shared}: no episode of run 'c1-2' (the run an episode's start records; for one journaled"
        f" before starts recorded it, the run its id begins with); `faultline journal episodes {shared}` lists them\n"
    )
    assert main(["compare", str(shared), "--run", "c1-0-baseline-1"]) == 2
    assert capsys.readouterr().err == (
        "faultline: usage error: compare: name two or more journals, or runs of one (--run RUN_ID, twice or more)\n"
    )


def test_compare_of_systems_of_ones_own_on_sim_says_what_sim_does_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """sim echoes the agents of a system of one's own; the note said it "follows each task's ground truth"."""
    response = {"usage": {"prompt_tokens": 5, "completion_tokens": 5}, "model": "sim"}
    bodies: list[tuple[str, MessageBody]] = [
        ("runner", EpisodeStarted(task="a", system="desk:HelpDesk")),
        ("triage", Recording(call="llm", index=0, request_digest="d", response=response)),
        ("scorer", OK),
    ]
    episode = [Envelope(id=derive_id("a-t0", i), episode="a-t0", sender=s, body=b) for i, (s, b) in enumerate(bodies)]
    journal = _write(tmp_path / "desk.sqlite", episode)
    assert main(["compare", str(journal), str(journal)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"note: {SIM_SYSTEM_NOTE}" in out and "follows each task's ground truth" not in out
