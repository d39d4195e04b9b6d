"""Forks of journaled episodes: repaired, starved, and replayed."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from faultline.bus import Envelope
from faultline.journal import JournalReader
from faultline.replay import Replayer, decisions
from faultline.runtime._config import Config
from faultline.runtime._services import agent_lookup
from faultline.runtime.cli import main


def fork(capsys: pytest.CaptureFixture[str], *args: str) -> dict:  # type: ignore[type-arg]
    code = main(["fork", *args, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)  # type: ignore[no-any-return]


def one_wrong_call(journal: Path) -> tuple[str, int, dict]:  # type: ignore[type-arg]
    """A failed episode whose only mistake is a tool call: its id, the call's position and the right call."""
    with JournalReader(journal) as reader:
        for summary in reader.episodes():
            if summary.outcome != "failure":
                continue
            rows = list(reader.episode_rows(summary.episode))
            wrong = [d for d in decisions(rows) if d.mistake]
            mistakes = {json.dumps(d.mistake, sort_keys=True) for d in wrong}
            calls = [d for d in wrong if d.action["name"] not in ("reply", "(nothing)")]
            if len(mistakes) == 1 and calls:
                made = calls[-1]
                call_row = next(
                    r for r in rows if r.sender == "tool" and r.kind == "tool_call" and r.pos > made.recording_pos
                )
                intended = made.mistake["intended"]  # type: ignore[index]
                right = {"kind": "tool_call", "call_id": call_row.envelope().body.call_id, **intended}  # type: ignore[union-attr]
                return summary.episode, call_row.pos, right
    raise AssertionError("the sim journal has no failed episode with a single wrong tool call")


def test_replacing_the_wrong_call_turns_failure_into_success(
    journal_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    episode, pos, right = one_wrong_call(journal_copy)
    body = tmp_path / "right.json"
    body.write_text(json.dumps(right))
    result = fork(capsys, str(journal_copy), "--episode", episode, "--at", str(pos), "--replace", str(body))
    assert result["original"]["outcome"] == "failure"
    assert (result["outcome"]["outcome"], result["outcome"]["reward"]) == ("success", 1.0)
    with JournalReader(journal_copy) as reader:
        started = next(r for r in reader.episode_rows(result["episode"]) if r.kind == "episode_started").envelope().body
        rows = list(reader.episode_rows(result["episode"]))
    assert (started.forked_from, started.forked_at) == (episode, pos)  # type: ignore[union-attr]
    history = [r for r in rows if r.stream.startswith("fork:")]
    assert len(history) == len(rows)
    assert Replayer(agent_lookup(Config())).replay(journal_copy).identical


def test_dropping_a_needed_message_ends_in_failure(journal_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with JournalReader(journal_copy) as reader:
        ok = next(s for s in reader.episodes() if s.outcome == "success")
        result_row = next(r for r in reader.episode_rows(ok.episode) if r.kind == "tool_result")
    result = fork(capsys, str(journal_copy), "--episode", ok.episode, "--at", str(result_row.pos), "--drop")
    assert result["original"]["outcome"] == "success"
    assert result["outcome"]["outcome"] == "failure"
    assert "stalled" in result["outcome"]["cause"]
    assert main(["replay", str(journal_copy)]) == 0


def test_history_before_the_fork_calls_no_model(
    journal_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with JournalReader(journal_copy) as reader:
        ok = next(s for s in reader.episodes() if s.outcome == "success")
        rows = list(reader.episode_rows(ok.episode))
    last = rows[-3]
    out = tmp_path / "fork.sqlite"
    result = fork(
        capsys, str(journal_copy), "--episode", ok.episode, "--at", str(last.pos), "--keep", "--out", str(out)
    )
    with JournalReader(out) as reader:
        fork_rows = list(reader.episode_rows(result["episode"]))
    prefix_recordings = [r for r in rows if r.kind == "recording" and r.pos < last.pos]
    copied = [r for r in fork_rows if r.kind == "recording"][: len(prefix_recordings)]
    assert [r.body_digest for r in copied] == [r.body_digest for r in prefix_recordings]
    assert result["outcome"]["outcome"] == "success"


def test_bad_fork_requests_are_one_line(journal_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fork", str(journal_copy), "--episode", "nope", "--at", "1", "--drop"]) == 1
    assert main(["fork", str(journal_copy), "--episode", "nope", "--at", "1"]) == 2
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "tool_call"}')
    with JournalReader(journal_copy) as reader:
        episode = reader.episodes()[0].episode
    assert main(["fork", str(journal_copy), "--episode", episode, "--at", "1", "--replace", str(bad)]) == 2
    assert main(["fork", str(journal_copy), "--episode", episode, "--at", "1", "--undo-fault"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("faultline: ") for line in err)


def test_undoing_a_fault_delivers_the_original_and_replays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    journal = tmp_path / "faulted.sqlite"
    fault = "argument_error:probability=1,budget=1"
    assert main(["run", "--tasks", "1", "--fault", fault, "--journal", str(journal), "--json"]) == 0
    capsys.readouterr()
    with JournalReader(journal) as reader:
        episode = reader.episodes()[0].episode
        rows = list(reader.episode_rows(episode))
    applied = next(r for r in rows if r.kind == "fault_applied")
    body = applied.envelope().body
    faulted_ids = {result["id"] for result in body.results}  # type: ignore[union-attr]
    result = fork(capsys, str(journal), "--episode", episode, "--at", str(applied.pos), "--undo-fault")
    with JournalReader(journal) as reader:
        forked = list(reader.episode_rows(result["episode"]))
    calls = [r.envelope().body for r in forked if r.kind == "tool_call" and r.id in faulted_ids]
    assert calls == [msgspec.convert(body.original, Envelope).body]  # type: ignore[union-attr]
    assert result["outcome"]["outcome"] == "success"
    assert main(["replay", str(journal)]) == 0
