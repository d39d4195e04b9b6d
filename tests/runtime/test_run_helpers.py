"""`faultline run --helpers` end to end: real nats-server, journal service, worker and helper processes."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from faultline.cli import main
from faultline.core import ContextReply, ContextRequest, EpisodeStarted, Notice, Recording
from faultline.journal import JournalReader, JournalRow
from tests import jsonl

pytestmark = pytest.mark.slow

ROSTER = ["dce", "tsa", "tor", "planner", "memory:6", "verifier"]
"""Every helper, in the canonical order."""


@pytest.fixture(scope="module")
def helped_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:  # type: ignore[type-arg]
    """A run of 6 retail tasks with every helper, the sim making mistakes the verifier can catch: its
    journal and its JSON summary."""
    journal = tmp_path_factory.mktemp("helped") / "j.sqlite"
    args = ["run", "--json", "--tasks", "6", "--error-rates", "0.15", "--seed", "4", "--journal", str(journal)]
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main([*args, "--helpers", "verifier,memory:6,tor,planner,tsa,dce"]) == 0
    return journal, json.loads(out.getvalue())


@pytest.fixture
def helped(helped_run: tuple[Path, dict]) -> Path:  # type: ignore[type-arg]
    return helped_run[0]


def test_the_summary_gives_each_agent_its_model_use_and_the_helpers_overhead(
    helped_run: tuple[Path, dict],  # type: ignore[type-arg]
) -> None:
    _, summary = helped_run
    costs = {row["agent"]: row for row in summary["costs"]}
    assert {"tool", "user", "dce", "tsa", "planner", "verifier"} <= costs.keys()
    assert "user_context" not in costs  # memory asks no model
    with JournalReader(helped_run[0]) as reader:
        dce = sum(1 for r in reader.rows() if r.kind == "recording" and r.sender == "dce")
    assert costs["dce"]["calls"] == pytest.approx(dce / 6)
    helper_tokens = sum(costs[a]["prompt_tokens"] + costs[a]["completion_tokens"] for a in ("dce", "tsa", "planner",
                                                                                              "verifier", "tor") if a in costs)  # fmt: skip
    tool_tokens = costs["tool"]["prompt_tokens"] + costs["tool"]["completion_tokens"]
    assert summary["helper_overhead"]["tokens"] == pytest.approx(helper_tokens / tool_tokens)
    # The paper's overhead: the helpers' share of the completion tokens of the tool agent and the helpers.
    generated = sum(costs[a]["completion_tokens"] for a in ("dce", "tsa", "planner", "verifier", "tor") if a in costs)
    paper = summary["overhead"]
    assert paper["episodes"] == 6 and paper["assistant_tokens"] == pytest.approx(costs["tool"]["completion_tokens"])
    assert paper["share"] == pytest.approx(generated / (generated + costs["tool"]["completion_tokens"]))


def rows(journal: Path) -> list[JournalRow]:
    with JournalReader(journal) as reader:
        return list(reader.rows())


def test_every_episode_records_its_roster_and_every_helper_answers(helped: Path) -> None:
    all_rows = rows(helped)
    started = [r.envelope().body for r in all_rows if r.kind == "episode_started"]
    assert len(started) == 6 and all(isinstance(s, EpisodeStarted) and s.roster == ROSTER for s in started)
    replies = [r.envelope().body for r in all_rows if r.kind == "context_reply"]
    assert {r.helper for r in replies if isinstance(r, ContextReply)} == {"dce", "tsa", "tor", "planner", "memory",
                                                                          "verifier"}  # fmt: skip
    assert not [r for r in all_rows if r.kind == "notice"], "no helper should miss its wait"
    recorded = {r.sender for r in all_rows if r.kind == "recording"}
    assert {"dce", "tsa", "planner", "verifier"} <= recorded  # model calls of the helpers are journaled
    proposals = [r.envelope().body for r in all_rows if r.kind == "context_request" and r.recipient == "verifier"]
    kinds = {"reply" if "reply" in p.proposal else "call" for p in proposals if isinstance(p, ContextRequest)}
    assert kinds == {"call", "reply"}  # the verifier reviews messages to the user too
    assert main(["replay", str(helped)]) == 0


def test_a_recheck_is_followed_by_one_revised_proposal_with_the_proposal_and_verdict_journaled(helped: Path) -> None:
    all_rows = rows(helped)
    rechecks = [r for r in all_rows if r.kind == "context_reply" and r.envelope().body.verdict == "RECHECK"]  # type: ignore[union-attr]
    assert rechecks, "the sim's mistakes should draw at least one RECHECK"
    for row in rechecks:
        verdict = row.envelope().body
        assert isinstance(verdict, ContextReply) and verdict.data
        episode = [r for r in all_rows if r.episode == row.episode]
        proposals = [r.envelope().body for r in episode if r.kind == "context_request" and r.recipient == "verifier"]
        assert any(isinstance(p, ContextRequest) and p.step == verdict.step and p.proposal for p in proposals)
        revised = next(r.envelope().body for r in episode if r.pos > row.pos and r.sender == "tool")
        assert isinstance(revised, Recording) and revised.call == "llm"
        assert "RECHECK of your proposed " in revised.request["messages"][0]["content"]
    outcomes = [r.envelope().body for r in all_rows if r.kind == "episode_completed"]
    assert not [o for o in outcomes if "step limit" in o.cause]  # type: ignore[union-attr]


def test_a_fork_that_drops_a_helper_reply_decides_without_it_after_the_wait(
    helped: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reply = next(r for r in rows(helped) if r.kind == "context_reply" and r.sender == "dce")
    out = helped.parent / "forks.sqlite"
    args = ["fork", str(helped), "--episode", reply.episode, "--at", str(reply.pos), "--drop", "--out", str(out)]
    assert main([*args, "--json"]) == 0
    [result], _ = jsonl.read(capsys.readouterr().out)
    assert "stalled" not in result["outcome"].get("cause", "")
    notices = [r.envelope().body for r in rows(out) if r.kind == "notice"]
    assert len(notices) == 1 and isinstance(notices[0], Notice) and notices[0].data["missing"] == ["dce"]
    assert main(["replay", str(out)]) == 0


def test_a_wrong_roster_is_one_line_and_starts_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--helpers", "dce,oracle", "--journal", str(tmp_path / "j.sqlite")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--helpers 'dce,oracle': unknown helper 'oracle'" in err
    assert not (tmp_path / "j.sqlite").exists()


def test_helpers_that_miss_a_short_wait_are_named_live_and_the_run_replays(tmp_path: Path) -> None:
    """The worker fires the tool agent's timer (as the tool agent, which its credentials allow)."""
    config = tmp_path / "faultline.toml"
    config.write_text("[helpers]\nwait_s = 0.001\n")
    journal = tmp_path / "j.sqlite"
    args = ["run", "--json", "--tasks", "2", "--helpers", "dce,planner", "--journal", str(journal)]
    assert main([*args, "--config", str(config)]) == 0
    all_rows = rows(journal)
    notices = [r.envelope().body for r in all_rows if r.kind == "notice"]
    assert notices and all(isinstance(n, Notice) and set(n.data["missing"]) <= {"dce", "planner"} for n in notices)
    fired = [r for r in all_rows if r.kind == "timer_fired"]
    assert fired and {(r.sender, r.recipient) for r in fired} == {("tool", "tool")}
    assert {r.envelope().body.outcome for r in all_rows if r.kind == "episode_completed"} <= {"success", "failure"}  # type: ignore[union-attr]
    assert main(["replay", str(journal)]) == 0
