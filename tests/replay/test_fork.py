"""Forks of journaled episodes: repaired, starved, and replayed."""

from __future__ import annotations

import json
import socket
from functools import partial
from pathlib import Path

import anyio
import msgspec
import pytest

from faultline.cli import main
from faultline.core import Envelope, LlmRequest, LlmResponse
from faultline.journal import Incoming, Journal, JournalReader, JournalRow
from faultline.replay import Keep, Replayer, fork_episode, forks_path
from faultline.runtime import Config, agent_lookup, make_backend
from tests import jsonl
from tests.replay.sim_labels import decisions


def fork(capsys: pytest.CaptureFixture[str], *args: str) -> dict:  # type: ignore[type-arg]
    code = main(["fork", *args, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    [result], summary = jsonl.read(out)
    assert result["type"] == "fork" and summary["forks"] == 1
    return result


def one_wrong_call(journal: Path) -> tuple[str, int, dict]:  # type: ignore[type-arg]
    """A failed episode whose only mistake is a tool call: its id, the call's position and the right call."""
    with JournalReader(journal) as reader:
        for summary in reader.episodes():
            if summary.outcome != "failure":
                continue
            rows = list(reader.episode_rows(summary.episode))
            wrong = [d for d in decisions(rows, "tool") if d.mistake]
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


def repair_wrong_call(journal: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[str, int, dict]:  # type: ignore[type-arg]
    """Fork a failed episode with its one wrong tool call replaced by the right one: (episode, position, fork result)."""
    episode, pos, right = one_wrong_call(journal)
    body = tmp_path / "right.json"
    body.write_text(json.dumps(right))
    return episode, pos, fork(capsys, str(journal), "--episode", episode, "--at", str(pos), "--replace", str(body))


def test_replacing_the_wrong_call_turns_failure_into_success(
    journal_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    episode, pos, result = repair_wrong_call(journal_copy, tmp_path, capsys)
    assert result["original"]["outcome"] == "failure"
    assert (result["outcome"]["outcome"], result["outcome"]["reward"]) == ("success", 1.0)
    assert result["journal"] == str(forks_path(journal_copy))
    with JournalReader(result["journal"]) as reader:
        started = next(r for r in reader.episode_rows(result["episode"]) if r.kind == "episode_started").envelope().body
        rows = list(reader.episode_rows(result["episode"]))
    assert (started.forked_from, started.forked_at) == (episode, pos)  # type: ignore[union-attr]
    history = [r for r in rows if r.stream.startswith("fork:")]
    assert len(history) == len(rows) == result["rows"]
    assert Replayer(agent_lookup(Config())).replay(result["journal"]).identical


def test_dropping_a_needed_message_ends_in_failure(journal_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with JournalReader(journal_copy) as reader:
        ok = next(s for s in reader.episodes() if s.outcome == "success")
        result_row = next(r for r in reader.episode_rows(ok.episode) if r.kind == "tool_result")
    result = fork(capsys, str(journal_copy), "--episode", ok.episode, "--at", str(result_row.pos), "--drop")
    assert result["original"]["outcome"] == "success"
    assert result["outcome"]["outcome"] == "failure"
    assert "stalled" in result["outcome"]["cause"]
    assert main(["replay", result["journal"]]) == 0


def test_history_before_the_fork_calls_no_model(
    journal_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with JournalReader(journal_copy) as reader:
        ok = next(s for s in reader.episodes() if s.outcome == "success")
        rows = list(reader.episode_rows(ok.episode))
    last = [r for r in rows if r.recipient or r.topic][-1]
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


def test_a_fork_at_a_row_no_agent_receives_is_refused(journal_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with JournalReader(journal_copy) as reader:
        recording = next(r for r in reader.rows() if r.kind == "recording")
    assert main(["fork", str(journal_copy), "--episode", recording.episode, "--at", str(recording.pos), "--keep"]) == 1
    [err] = capsys.readouterr().err.strip().splitlines()
    assert f"position {recording.pos} holds a recording, which no agent receives" in err


def test_a_refused_fork_names_the_kinds_with_their_articles(
    journal_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with JournalReader(journal_copy) as reader:
        started = next(r for r in reader.rows() if r.kind == "episode_started")
        turn = next(r for r in reader.rows() if r.kind == "assistant_turn")
    note = tmp_path / "note.json"
    note.write_text('{"kind": "note", "text": "hello"}')
    assert main(["fork", str(journal_copy), "--episode", started.episode, "--at", str(started.pos), "--keep"]) == 1
    assert main(["fork", str(journal_copy), "-e", turn.episode, "--at", str(turn.pos), "--replace", str(note)]) == 1
    assert main(["fork", str(journal_copy), "-e", turn.episode, "--at", str(turn.pos), "--undo-fault"]) == 1
    refused, replaced, undone = capsys.readouterr().err.strip().splitlines()
    assert f"position {started.pos} holds an episode_started, which no agent receives" in refused
    assert replaced.endswith(f"position {turn.pos} holds an assistant_turn; the replacement is a note")
    assert undone.endswith(f"position {turn.pos} holds an assistant_turn, not a fault event: nothing to undo")


def test_a_replacement_that_is_no_body_says_where_to_find_one(
    journal_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "nope", "text": "hello"}')
    assert main(["fork", str(journal_copy), "-e", "E", "--at", "7", "--replace", str(bad)]) == 2
    assert capsys.readouterr().err == (
        f"faultline: usage error: --replace {bad}: not a message body (Invalid value 'nope' - at $.kind); write the"
        f' "body" of the row at --at, changed, from `faultline journal show {journal_copy} --episode E --json`\n'
    )


def test_undoing_a_fault_delivers_the_original_and_replays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    journal = tmp_path / "faulted.sqlite"
    fault = "parameter_format_error:probability=1,budget=1"
    assert main(["run", "--tasks", "1", "--fault", fault, "--journal", str(journal), "--json"]) == 0
    capsys.readouterr()
    with JournalReader(journal) as reader:
        episode = reader.episodes()[0].episode
        rows = list(reader.episode_rows(episode))
    applied = next(r for r in rows if r.kind == "fault_applied")
    body = applied.envelope().body
    faulted_ids = {result["id"] for result in body.results}  # type: ignore[union-attr]
    result = fork(capsys, str(journal), "--episode", episode, "--at", str(applied.pos), "--undo-fault")
    with JournalReader(result["journal"]) as reader:
        forked = list(reader.episode_rows(result["episode"]))
    calls = [r.envelope().body for r in forked if r.kind == "tool_call" and r.id in faulted_ids]
    assert calls == [msgspec.convert(body.original, Envelope).body]  # type: ignore[union-attr]
    assert result["outcome"]["outcome"] == "success"
    assert main(["replay", result["journal"]]) == 0


def a_late_position(journal: Path) -> tuple[str, int]:
    """A successful episode and the position of its last user turn: a short live remainder."""
    with JournalReader(journal) as reader:
        ok = next(s for s in reader.episodes() if s.outcome == "success")
        return ok.episode, [r.pos for r in reader.episode_rows(ok.episode) if r.kind == "user_turn"][-1]


def rows_of(path: Path) -> list[JournalRow]:
    with JournalReader(path) as reader:
        return list(reader.rows())


def test_a_fork_leaves_its_source_untouched_and_writes_a_journal_that_replays_alone(
    journal_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    episode, pos = a_late_position(journal_copy)
    before = rows_of(journal_copy)
    assert main(["fork", str(journal_copy), "-e", episode, "--at", str(pos), "--keep"]) == 0
    forks = journal_copy.with_name("copy.forks.sqlite")
    assert capsys.readouterr().out.endswith(f" rows written to {forks}\n")
    assert rows_of(journal_copy) == before
    assert main(["journal", "verify", str(forks)]) == 0
    assert main(["replay", str(forks)]) == 0
    assert "identical: 1 episodes" in capsys.readouterr().out


def test_forking_twice_reports_the_fork_there_and_writes_nothing(
    journal_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    episode, pos = a_late_position(journal_copy)
    first = fork(capsys, str(journal_copy), "-e", episode, "--at", str(pos), "--keep")
    forks = Path(first["journal"])
    written = rows_of(forks)
    second = fork(capsys, str(journal_copy), "-e", episode, "--at", str(pos), "--keep")
    assert rows_of(forks) == written
    assert (first["existing"], second["existing"]) == (False, True)
    assert (second["episode"], second["outcome"], second["rows"]) == (first["episode"], first["outcome"], first["rows"])
    assert main(["fork", str(journal_copy), "-e", episode, "--at", str(pos), "--keep"]) == 0
    said = f"{forks} holds this fork already ({first['rows']} rows): nothing run or written\n"
    assert capsys.readouterr().out.endswith(said)


def test_into_source_appends_a_fork_once_and_the_source_still_replays(
    journal_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    episode, pos = a_late_position(journal_copy)
    before = rows_of(journal_copy)
    first = fork(capsys, str(journal_copy), "-e", episode, "--at", str(pos), "--keep", "--into-source")
    assert first["journal"] == str(journal_copy) and not forks_path(journal_copy).exists()
    after = rows_of(journal_copy)
    assert after[: len(before)] == before and len(after) == len(before) + first["rows"]
    assert fork(capsys, str(journal_copy), "-e", episode, "--at", str(pos), "--keep", "--into-source")["existing"]
    assert rows_of(journal_copy) == after
    assert Replayer(agent_lookup(Config())).replay(journal_copy).identical
    assert (
        main(["fork", str(journal_copy), "-e", episode, "--at", str(pos), "--keep", "--into-source", "--out", "x"]) == 2
    )
    assert "not allowed with argument" in capsys.readouterr().err


class StuckModel:
    """A model that never answers, so a fork can be cancelled in the middle of its live part."""

    def __init__(self) -> None:
        self.asked = anyio.Event()

    async def complete(self, request: LlmRequest) -> LlmResponse:
        self.asked.set()
        await anyio.Event().wait()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        pass


async def test_a_fork_cancelled_midway_leaves_no_rows_and_can_be_run_again(journal_copy: Path) -> None:
    with JournalReader(journal_copy) as reader:
        episode = next(s.episode for s in reader.episodes() if s.outcome == "success")
        pos = decisions(list(reader.episode_rows(episode)), "tool")[0].input_pos  # the tool agent asks its model next
    stuck = StuckModel()
    forks = forks_path(journal_copy)
    lookup = agent_lookup(Config())
    async with anyio.create_task_group() as group:
        group.start_soon(
            partial(fork_episode, journal_copy, episode, pos, Keep(), lookup=lookup, backends=lambda role: stuck)
        )
        with anyio.fail_after(30):
            await stuck.asked.wait()
        group.cancel_scope.cancel()
    assert not forks.exists(), "the destination is opened only to write a fork that ended"
    result = await fork_episode(
        journal_copy, episode, pos, Keep(), lookup=lookup, backends=lambda role: make_backend(Config(), role)
    )
    assert not result.existing and result.outcome.outcome == "success"
    assert len(rows_of(forks)) == result.rows > 0


def test_a_recording_stored_after_the_outputs_it_preceded_is_served_to_a_fork_not_asked_again(
    journal_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A recording sent again after a moment without a stream leader lands after its handler's outputs."""
    with JournalReader(journal_copy) as reader:
        episode = next(s.episode for s in reader.episodes() if s.outcome == "success")
        rows = list(reader.episode_rows(episode))
    call = next(r for r in rows if r.kind == "tool_call")
    recording = next(r for r in rows if r.kind == "recording" and r.sender == "tool" and r.causation == call.causation)
    answer = next(r for r in rows if r.kind == "tool_result" and r.pos > call.pos)
    late = [r for r in rows if r is not recording]
    late.insert(late.index(answer) + 1, recording)
    stream = rows[0].stream
    for name, order in (("stored-in-order", rows), ("stored-late", late)):
        with Journal.open(tmp_path / f"{name}.sqlite") as journal:
            journal.append(Incoming(stream, seq, r.subject, r.envelope()) for seq, r in enumerate(order, start=1))
    at = {name: [r.id for r in rows_of(tmp_path / f"{name}.sqlite")].index(answer.id) + 1 for name in ("stored-in-order", "stored-late")}  # fmt: skip
    results = {
        name: fork(capsys, str(tmp_path / f"{name}.sqlite"), "-e", episode, "--at", str(at[name]), "--keep")
        for name in at
    }
    assert results["stored-late"]["model_calls"] == results["stored-in-order"]["model_calls"]
    assert results["stored-late"]["outcome"]["outcome"] == results["stored-in-order"]["outcome"]["outcome"]
    assert main(["replay", results["stored-late"]["journal"]]) == 0


def test_a_fork_that_ended_in_error_says_how_to_run_it_again(
    journal_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fork against a model that was down ends in error and stays in the forks file; forking again reported it
    and ran nothing, with no word of how to run it once the model is back."""
    with JournalReader(journal_copy) as reader:
        episode = next(s.episode for s in reader.episodes() if s.outcome == "success")
        pos = decisions(list(reader.episode_rows(episode)), "tool")[0].input_pos  # the tool agent asks its model next
    with socket.socket() as taken:  # a port nobody listens on
        taken.bind(("127.0.0.1", 0))
        down = f"http://127.0.0.1:{taken.getsockname()[1]}/v1"
    model = ["--model", "openai", "--model-name", "m", "--base-url", down, "--model-setting", "max_retries=0"]
    first = fork(capsys, str(journal_copy), "-e", episode, "--at", str(pos), "--keep", *model)
    assert (first["outcome"]["outcome"], first["existing"]) == ("error", False)
    assert main(["fork", str(journal_copy), "-e", episode, "--at", str(pos), "--keep", *model]) == 0
    said = capsys.readouterr().out
    assert "nothing run or written; it ended in error: to run it again" in said and "--out" in said, said
