"""A fault rule that altered several messages of an episode is undone whole when no single event undone rescues it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from faultline.agent import (
    Agent,
    ChatMessage,
    Context,
    Envelope,
    Grade,
    InputRecord,
    LlmRequest,
    Note,
    Start,
    System,
)
from faultline.cli import main
from faultline.journal import JournalReader
from faultline.replay import FAULT_REPAIR


class Asker(Agent):
    """Asks its model about the record, then the clerk two things, and finishes with both answers."""

    name = "asker"

    def __init__(self) -> None:
        self.answers: list[str] = []

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        if isinstance(msg.body, Start):
            record = json.dumps(msg.body.data, sort_keys=True)  # every field of the record, as a prompt may hold it
            await ctx.llm(LlmRequest(role="asker", messages=[ChatMessage(role="user", content=record)]))
            for word in msg.body.data["words"]:
                ctx.send("clerk", Note(text=str(word)))
        elif isinstance(msg.body, Note) and msg.sender == "clerk":
            self.answers.append(msg.body.text)
            if len(self.answers) == 2:
                ctx.finish("".join(sorted(self.answers)))


class Clerk(Agent):
    """Answers a word in capitals, once it asked its model (whose answer it does not need: a step to resample)."""

    name = "clerk"

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        if isinstance(msg.body, Note):
            await ctx.llm(LlmRequest(role="clerk", messages=[ChatMessage(role="user", content=msg.body.text)]))
            ctx.send(msg.sender, Note(text=msg.body.text.upper()))


class Pair(System):
    name = "pair"
    agents = (Asker, Clerk)
    entry = "asker"
    finishers = ("asker",)
    needs = ("words",)

    def score(self, record: InputRecord, output: Any) -> Grade:
        return Grade(1.0) if output == "AB" else Grade(0.0, f"answered {output!r}")


@pytest.fixture(scope="module")
def faulted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A journal of two episodes: `r1-ab-t0` met a cycle on both of the asker's notes, `r1-ac-t0` (which fails
    whatever happens: the clerk cannot make "AB" of "a" and "c") a storm on one of the clerk's answers."""
    folder = tmp_path_factory.mktemp("faulted")
    inputs = folder / "inputs.jsonl"
    inputs.write_text('{"id": "ab", "words": ["a", "b"]}\n{"id": "ac", "words": ["a", "c"]}\n')
    journal = folder / "journal.sqlite"
    argv = ["run", "--system", "tests.replay.test_attribution_rules:Pair", "--inputs", str(inputs), "--run-id", "r1"]
    argv += ["--fault", "cycle:from=asker,kind=note,episode=r1-ab-t0"]
    argv += ["--fault", "storm:from=clerk,kind=note,budget=1,episode=r1-ac-t0"]
    argv += ["--episode-timeout", "3", "--journal", str(journal), "--json"]
    assert main(argv) == 0
    with JournalReader(journal) as reader:
        assert {s.episode: s.outcome for s in reader.episodes()} == {"r1-ab-t0": "timeout", "r1-ac-t0": "failure"}
    return journal


def test_attribution_undoes_a_rule_whole_when_no_event_alone_rescues(
    faulted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Undoing either cycled note alone leaves the other cycled, so the asker still waits: attribution said
    "undoing any one of the 2 fault events does not rescue the episode" of a fault that decided it."""
    capsys.readouterr()
    forks = tmp_path / "forks.sqlite"
    argv = ["attribute", str(faulted), "-e", "r1-ab-t0", "--method", "fault", "--out", str(forks), "--json"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[0])
    assert (result["method"], result["agent"], result["fault"], result["decided"]) == (
        FAULT_REPAIR,
        "asker",
        "cycle",
        True,
    )
    assert [p["change"] for p in result["evidence"]][-2:] == ["undo_rule", "keep"]
    assert "undone whole, its 2 events" in result["search"]


def test_a_fork_undoes_a_rule_whole(faulted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    journal, episode = faulted, "r1-ab-t0"
    with JournalReader(journal) as reader:
        first = next(r.pos for r in reader.episode_rows(episode) if r.kind == "fault_applied")
    capsys.readouterr()
    outcomes = {}
    for change in ("--undo-fault", "--undo-rule"):
        argv = ["fork", str(journal), "-e", episode, "--at", str(first), change, "--out", str(tmp_path / "f.sqlite")]
        assert main([*argv, "--json"]) == 0
        outcomes[change] = json.loads(capsys.readouterr().out.splitlines()[0])["outcome"]["outcome"]
    assert outcomes == {"--undo-fault": "failure", "--undo-rule": "success"}


def test_auto_says_what_each_method_found_where_none_decides(
    faulted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Where no method decided, the answer was the last method's alone: "scan: resampling from no model step
    rescues the episode", with not a word of the fault event that was undone and did not rescue either."""
    capsys.readouterr()
    argv = ["attribute", str(faulted), "-e", "r1-ac-t0", "--out", str(tmp_path / "forks.sqlite"), "--json"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[0])
    assert not result["decided"]
    assert result["search"] == (
        "fault-event repair: undoing any one of the 1 fault events does not rescue the episode;"
        " sampled counterfactuals: scan: resampling from no model step rescues the episode (3 probed)"
    )
    assert "undo_fault" in [p["change"] for p in result["evidence"]]


def test_sampled_forks_of_a_system_hand_its_agents_their_records_as_journaled(
    faulted: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Attribution numbered its draws in every Start's data, so the asker's model request, which holds its record,
    no longer matched the journal's and every fork failed with "the journal holds call #0 llm() that the code no
    longer makes", which ended the command."""
    capsys.readouterr()
    forks = tmp_path / "forks.sqlite"
    argv = ["attribute", str(faulted), "-e", "r1-ac-t0", "--method", "sampled", "--out", str(forks), "--json"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[0])
    causes = [f["cause"] for p in result["evidence"] for f in p["forks"]]
    assert len(causes) == 3 and all(c.startswith("answered ") for c in causes), causes  # ran, none diverged
    with JournalReader(forks) as reader:
        starts = {r.body for r in reader.rows() if r.kind == "start" and r.recipient == "asker"}
    with JournalReader(faulted) as reader:
        assert starts == {
            r.body for r in reader.episode_rows("r1-ac-t0") if r.kind == "start" and r.recipient == "asker"
        }
