"""Exact replay against today's code: identical journals, changed agents, tampered files."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import msgspec
import pytest

from faultline._errors import ChainError, JournalError
from faultline.agents import EnvironmentHost, EpisodeSpec, ToolAgent
from faultline.cli import _text as cli_text
from faultline.cli import main
from faultline.core import (
    RUNNER,
    Agent,
    AssistantTurn,
    Context,
    Envelope,
    EpisodeCompleted,
    EpisodeStarted,
    Note,
    Subjects,
    ToolCall,
    ToolResult,
    UserTurn,
    derive_id,
    error_completion,
    failed_by_agent,
    failure_envelopes,
)
from faultline.envs import Task
from faultline.envs import _loader as domain_loader
from faultline.envs.retail import Retail
from faultline.journal import Incoming, Journal, JournalReader
from faultline.journal import _verify as verify_module
from faultline.replay import Replayer, ReplayReport
from faultline.runtime import Config, agent_lookup
from tests.report.journals import write_journal

builtin = agent_lookup(Config())


class ChattierTool(ToolAgent):
    """The tool agent with one changed reply: its second message to the user."""

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        await super().on_message(msg, ctx)
        for i, out in enumerate(ctx.outputs):
            if isinstance(out.body, AssistantTurn):
                self.replies = getattr(self, "replies", 0) + 1
                if self.replies == 2:
                    ctx.outputs[i] = Envelope(
                        **{
                            **{f: getattr(out, f) for f in out.__struct_fields__},
                            "body": AssistantTurn(text=out.body.text + " Have a nice day!", done=out.body.done),
                        }
                    )


class PoliterTool(ToolAgent):
    """The tool agent with a changed prompt: every model request differs from the journal's."""

    def _request(self):  # type: ignore[no-untyped-def]
        request = super()._request()
        first = request.messages[0]
        import msgspec

        return msgspec.structs.replace(
            request,
            messages=[msgspec.structs.replace(first, content=first.content + " Be polite."), *request.messages[1:]],
        )


class ChangedWorld(EnvironmentHost):
    """The environment with a changed tool: every result says one more thing."""

    def _execute(self, call: ToolCall) -> ToolResult:
        result = super()._execute(call)
        return msgspec.structs.replace(result, output={"changed": True, "was": result.output})


def with_tool(cls: type[Agent]):  # type: ignore[no-untyped-def]
    return lambda name: cls if name == "tool" else builtin(name)


def with_env(cls: type[Agent]):  # type: ignore[no-untyped-def]
    return lambda name: cls if name == "env" else builtin(name)


def test_a_run_journal_replays_identical(sim_journal: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = Replayer(builtin).replay(sim_journal)
    assert report.identical, report.divergences[:1]
    assert report.episodes == 48 and report.messages > 48 * 10
    assert main(["replay", str(sim_journal)]) == 0
    assert capsys.readouterr().out.startswith("identical: 48 episodes")


def test_tools_are_served_by_default_and_reexecuted_on_request(sim_journal: Path) -> None:
    served = Replayer(builtin).replay(sim_journal)
    rerun = Replayer(builtin, reexecute_tools=True).replay(sim_journal)
    assert served.identical and rerun.identical
    assert served.served_agents == ["env"] and rerun.served_agents == []
    assert rerun.messages > served.messages


def test_a_changed_environment_is_found_only_when_tools_are_reexecuted(sim_journal: Path) -> None:
    assert Replayer(with_env(ChangedWorld)).replay(sim_journal).identical
    report = Replayer(with_env(ChangedWorld), reexecute_tools=True).replay(sim_journal)
    assert not report.identical
    first = report.divergences[0]
    assert (first.agent, first.input_kind, first.what) == ("env", "tool_call", "output #0 differs")


def test_a_changed_reply_is_reported_at_the_right_agent_and_input(sim_journal: Path) -> None:
    report = Replayer(with_tool(ChattierTool)).replay(sim_journal)
    assert not report.identical
    first = report.divergences[0]
    with JournalReader(sim_journal) as reader:
        rows = list(reader.episode_rows(first.episode))
    second_reply = [r for r in rows if r.sender == "tool" and r.kind == "assistant_turn"][1]
    handled = next(r for r in rows if r.id == second_reply.causation)
    assert (first.agent, first.input_pos, first.input_kind) == ("tool", handled.pos, handled.kind)
    assert first.what == "output #1 differs" or first.what.startswith("output #")
    diff = first.diff()
    assert "+" in diff and "Have a nice day!" in diff
    with JournalReader(sim_journal) as reader:
        two_replies = sum(
            1
            for _, rows in reader.by_episode()
            if sum(r.sender == "tool" and r.kind == "assistant_turn" for r in rows) >= 2
        )
    assert len(report.divergences) == two_replies
    assert {d.agent for d in report.divergences} == {"tool"}


def test_a_changed_model_request_is_caught_by_its_digest(sim_journal: Path) -> None:
    report = Replayer(with_tool(PoliterTool)).replay(sim_journal)
    first = report.divergences[0]
    assert first.agent == "tool"
    assert "made call #0 llm() that differs from the journal's llm()" in first.what
    # the diff shows the journal's request beside the code's, whole: replay itself reads requests as stored
    assert (first.expected["call"], first.expected["index"], first.got["index"]) == ("llm", 0, 0)
    changed = [line for line in first.diff().splitlines() if line.startswith(("-", "+")) and "content" in line]
    assert len(changed) == 2 and changed[1].endswith(' Be polite.",'), first.diff()
    assert changed[0].replace(" Be polite.", "", 1) == changed[0] and changed[0][1:] == changed[1][1:].replace(
        " Be polite.", "", 1
    )


class QuieterTool(ToolAgent):
    """The tool agent that answers the user's first turn without asking its model."""

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        if isinstance(msg.body, UserTurn):
            ctx.send(msg.sender, AssistantTurn(text="Hello."))
            return
        await super().on_message(msg, ctx)


def test_a_call_the_code_no_longer_makes_is_shown_whole(sim_journal: Path) -> None:
    """The missing call's request was shown as stored, its messages one key each: nothing a person could read."""
    first = Replayer(with_tool(QuieterTool)).replay(sim_journal).divergences[0]
    assert first.what == "the journal holds call #0 llm() that the code no longer makes"
    assert (first.expected["call"], first.expected["index"], first.got) == ("llm", 0, None)
    messages = first.expected["request"]["messages"]
    assert messages[0]["role"] == "system" and messages[-1]["role"] == "user", messages
    assert first.expected["response"]["content"] or first.expected["response"]["tool_calls"]


class CuriousTool(ToolAgent):
    """The tool agent that reads the clock once more after handling each input."""

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        await super().on_message(msg, ctx)
        await ctx.now()


def test_a_call_the_journal_does_not_hold_is_shown_as_that_call(sim_journal: Path) -> None:
    """The divergence showed no call, or the one served before it (which the journal does hold) as what the code
    made: its request was not kept."""
    first = Replayer(with_tool(CuriousTool)).replay(sim_journal).divergences[0]
    assert first.agent == "tool" and first.what.endswith("now() that the journal does not hold")
    assert first.got == {"call": "now", "index": int(first.what.split("#")[1].split()[0]), "request": None}
    assert first.expected is None


def test_a_tampered_journal_is_refused_with_its_row(journal_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = sqlite3.connect(journal_copy)
    for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        db.execute(f"DROP TRIGGER {name}")
    db.execute("UPDATE messages SET body = body || x'00' WHERE pos = 40")
    db.commit()
    db.close()
    with pytest.raises(ChainError) as info:
        Replayer(builtin).replay(journal_copy)
    assert info.value.position == 40
    assert main(["replay", str(journal_copy)]) == 1
    assert "row 40" in capsys.readouterr().err


def test_replay_in_several_processes_reports_what_one_process_does(sim_journal: Path) -> None:
    def fields(report: ReplayReport) -> dict[str, object]:
        data = msgspec.to_builtins(report)
        del data["seconds"]
        return data  # type: ignore[no-any-return]

    for lookup in (builtin, with_tool(ChattierTool)):
        one = Replayer(lookup).replay(sim_journal)
        assert fields(Replayer(lookup, jobs=3).replay(sim_journal)) == fields(one)
    assert not one.identical


@pytest.mark.parametrize("jobs", [1, 3])
def test_a_replay_tells_its_progress_as_episodes_are_done(sim_journal: Path, jobs: int) -> None:
    told: list[tuple[int, int]] = []
    report = Replayer(builtin, jobs=jobs).replay(sim_journal, progress=lambda done, total: told.append((done, total)))
    done = [d for d, _ in told]
    assert done == sorted(set(done)), "each report says more is done than the last"
    assert told[-1] == (report.episodes, report.episodes)
    assert {total for _, total in told} == {report.episodes}
    # One process tells every episode; in parallel the episodes go out in pieces, several per process, each told
    # as it comes back.
    if jobs == 1:
        assert len(told) == report.episodes
    else:
        assert jobs < len(told) < report.episodes


def test_replay_prints_how_far_it_got_where_stderr_is_a_log_and_nothing_with_json(
    sim_journal: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_text, "PROGRESS_LINE_S", 0.0)  # a line at every episode
    assert main(["replay", str(sim_journal), "--jobs", "2"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.endswith("episodes replayed")]
    assert lines and lines[-1] == "48 of 48 episodes replayed"  # the journal's 24 tasks x 2 trials
    assert main(["replay", str(sim_journal), "--json"]) == 0
    assert "replayed" not in capsys.readouterr().err


def test_a_parallel_replay_lists_a_domains_tasks_once_before_its_processes_fork(
    sim_journal: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    listed = tmp_path / "listed by"
    list_tasks = Retail.tasks

    def tasks(self: Retail) -> list[Task]:
        with listed.open("a") as out:
            out.write(f"{os.getpid()}\n")
        return list_tasks(self)

    monkeypatch.setattr(Retail, "tasks", tasks)
    monkeypatch.setattr(domain_loader, "_loaded", {})  # a retail domain that has listed nothing yet
    assert Replayer(builtin, jobs=3).replay(sim_journal).identical
    assert listed.read_text().split() == [str(os.getpid())]


def test_a_tampered_journal_is_refused_when_its_chain_is_checked_in_ranges_beside_the_replay(
    journal_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(verify_module, "PARALLEL_ROWS", 1)  # split even this small journal's chain check
    db = sqlite3.connect(journal_copy)
    for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        db.execute(f"DROP TRIGGER {name}")
    with JournalReader(journal_copy) as reader:
        last = reader.last_pos
    db.execute("UPDATE messages SET sender = 'mallory' WHERE pos = ?", (last - 3,))
    db.commit()
    db.close()
    with pytest.raises(ChainError) as info:
        Replayer(builtin, jobs=2).replay(journal_copy)
    assert info.value.position == last - 3


def test_replay_needs_only_the_file(sim_journal: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    moved = tmp_path / "elsewhere" / "j.sqlite"
    moved.parent.mkdir()
    moved.write_bytes(sim_journal.read_bytes())
    monkeypatch.chdir(moved.parent)
    assert Replayer(builtin).replay(moved).identical


def test_replaying_an_unknown_episode_says_it_does_not_exist(
    sim_journal: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with JournalReader(sim_journal) as reader:
        known = reader.episodes()[0].episode
    assert main(["replay", str(sim_journal), "-e", known, "-e", "no-such-episode"]) == 1
    out, err = capsys.readouterr()
    assert "identical" not in out
    assert err.strip().splitlines() == [
        f"faultline: error: {sim_journal}: no episode 'no-such-episode';"
        f" `faultline journal episodes {sim_journal}` lists them"
    ]
    assert main(["replay", str(sim_journal), "-e", known]) == 0
    assert "identical" in capsys.readouterr().out
    with pytest.raises(JournalError, match="no episode 'no-such-episode'"):
        Replayer(agent_lookup(Config())).replay(sim_journal, ["no-such-episode"])


FORGED = "forged-1"
FORGED_STARTS = {
    "an unknown domain": (
        EpisodeStarted(domain="nope", task="t1"),
        "cannot load domain 'nope': not a registered name (registered: phone, retail) nor a package.module:Name path",
    ),
    "an unknown system": (
        EpisodeStarted(system="nowhere.desk:Desk", task="t1"),
        f"episode {FORGED!r} ran on a system of its own, and cannot load system 'nowhere.desk:Desk': no module named"
        " 'nowhere' (is it installed, or in a --plugin-path folder?): install its package, or name the folder that"
        " holds it with --plugin-path (plugins.path in the configuration)",
    ),
}


def with_forged_start(journal: Path, started: EpisodeStarted) -> None:
    """Append to `journal` an episode that the tool agent's worker forged: a start naming `started`'s domain or
    system, and a Start for the environment, journaled as the stream held them after the run's."""
    with JournalReader(journal) as reader:
        (last,) = reader.tail(1)
    start = EpisodeSpec(domain=started.domain, task=started.task).start()
    forged = [
        Envelope(id="forged", episode=FORGED, sender="tool", body=started, ts=last.ts),
        Envelope(id="forged-env", episode=FORGED, sender="tool", recipient="env", body=start, ts=last.ts),
    ]
    subjects = Subjects()
    with Journal.open(journal) as writer:
        writer.append(
            [Incoming(last.stream, last.stream_seq + i, subjects.for_envelope(e), e) for i, e in enumerate(forged, 1)]
        )


@pytest.mark.parametrize(("started", "reason"), FORGED_STARTS.values(), ids=FORGED_STARTS.keys())
def test_an_episode_whose_forged_start_names_what_does_not_load_is_reported_and_the_others_replay(
    journal_copy: Path, capsys: pytest.CaptureFixture[str], started: EpisodeStarted, reason: str
) -> None:
    """A start that names a domain or a system this installation cannot load stopped the replay of the whole
    journal at that episode: it is reported as one replay cannot run, with why, after every other episode was
    replayed, and the replay exits 1 as for a divergence. Replayed alone, the episode is that error, in one line."""
    with_forged_start(journal_copy, started)
    for jobs in (1, 2):
        report = Replayer(builtin, jobs=jobs).replay(journal_copy)
        assert (report.episodes, report.divergences) == (48, [])
        assert [(u.episode, u.reason) for u in report.unreplayable] == [(FORGED, reason)]
        assert not report.identical
    assert main(["replay", str(journal_copy)]) == 1
    printed = " ".join(capsys.readouterr().out.split())
    assert printed.startswith("could not replay 1 episode(s): 48 episodes, ")
    assert f"episode {FORGED} — cannot be replayed here: {reason}" in printed
    assert main(["replay", str(journal_copy), "--json"]) == 1
    *rows, summary = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert rows == [{"type": "unreplayable", "episode": FORGED, "reason": reason}]
    assert (summary["type"], summary["episodes"], summary["identical"]) == ("summary", 48, False)
    assert main(["replay", str(journal_copy), "-e", FORGED]) == 1
    assert capsys.readouterr().err.splitlines() == [f"faultline: error: {reason}"]


class Crasher(Agent):
    name = "crasher"

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        raise RuntimeError("told to fail")


@pytest.mark.parametrize("layout", ["agent-completes", "runner-completes"])
def test_a_failed_handler_replays_identical_whoever_completed_its_episode(layout: str, tmp_path: Path) -> None:
    """Journals from before the runner completed failed episodes hold the failing agent's own completion:
    replay serves it as recorded, and expects only the error from today's code."""
    start = Envelope(id="m1", episode="e", sender=RUNNER, recipient="crasher", body=Note(text="go"), ts=1.0)
    [error] = failure_envelopes("crasher", start, RuntimeError("told to fail"))
    if layout == "agent-completes":
        cause = "RuntimeError in crasher: told to fail"
        completion = msgspec.structs.replace(
            error, id=derive_id(start.id, 1, "e"), body=EpisodeCompleted(outcome="error", cause=cause)
        )
    else:
        completion = error_completion(error)
    journal = write_journal(tmp_path / "j.sqlite", [start, error, completion])
    report = Replayer(lambda name: Crasher if name == "crasher" else None).replay(journal)
    assert report.identical, report.divergences
    assert report.agents == 1
    assert failed_by_agent(completion) == (layout == "agent-completes")
