"""`faultline journal ...` against real journal files: output, exit codes, one-line errors."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from faultline.cli import _text as cli_text
from faultline.cli import main
from faultline.core import Envelope, EpisodeStarted, Recording, UserTurn
from faultline.faults import INJECTOR_ROLE
from faultline.journal import Journal, JournalReader
from tests import jsonl

from .conftest import episode_envelopes, incoming

Capsys = pytest.CaptureFixture[str]


def run(capsys: Capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["journal", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_verify_prints_one_summary_line_when_the_chain_holds(journal_file: Path, capsys: Capsys) -> None:
    code, out, err = run(capsys, "verify", str(journal_file))
    assert (code, err) == (0, "")
    assert out.startswith("ok: 18 rows, chain holds, head ") and out.count("\n") == 1
    assert out.endswith("; head record (18 rows) reached, so nothing was cut from the end\n")


def test_verify_prints_how_far_it_got_where_stderr_is_a_log_and_nothing_with_json(
    journal_file: Path, capsys: Capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cli_text, "PROGRESS_LINE_S", 0.0)  # a line each time the check tells its progress
    code, out, err = run(capsys, "verify", str(journal_file))
    assert (code, err) == (0, "18 of 18 rows checked\n")
    code, out, err = run(capsys, "verify", str(journal_file), "--json")
    assert (code, err) == (0, "")


def test_verify_finds_rows_cut_from_the_end_without_an_anchor(tamper: Callable[[str], Path], capsys: Capsys) -> None:
    cut = tamper("DELETE FROM messages WHERE pos > 15")
    code, out, err = run(capsys, "verify", str(cut))
    assert (code, out) == (1, "")
    assert err.startswith(f"faultline: error: {cut}: tail cut: the head record names 18 rows ending in chain ")
    assert err.endswith(", the journal holds 15\n") and err.count("\n") == 1


def test_verify_help_says_what_it_proves_and_what_it_cannot(capsys: Capsys) -> None:
    with pytest.raises(SystemExit):
        main(["journal", "verify", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "rows cut from the end" in text and "rewrites the rows and the head record together" in text


def test_verify_names_the_first_bad_row_on_one_line(tamper: Callable[[str], Path], capsys: Capsys) -> None:
    copy = tamper("UPDATE messages SET recipient = 'mallory' WHERE pos = 8; DELETE FROM messages WHERE pos = 12")
    code, out, err = run(capsys, "verify", str(copy))
    assert (code, out) == (1, "")
    assert err == f"faultline: error: {copy}: row 8: row digest mismatch (a column edited)\n"


def test_verify_with_an_anchor_that_is_gone_fails(journal_file: Path, capsys: Capsys) -> None:
    code, _, err = run(capsys, "verify", str(journal_file), "--anchor", "ab" * 16)
    assert code == 1 and "not in the chain" in err and err.count("\n") == 1


@pytest.mark.parametrize("command", [["verify"], ["tail"], ["show", "-e", "ep-a"], ["export"], ["episodes"]])
def test_a_missing_file_is_one_line_and_exit_1(tmp_path: Path, capsys: Capsys, command: list[str]) -> None:
    code, out, err = run(capsys, command[0], str(tmp_path / "absent.db"), *command[1:])
    assert (code, out) == (1, "")
    assert err == f"faultline: error: {tmp_path / 'absent.db'}: no such journal file\n"


def test_a_file_that_is_not_a_journal_is_one_line_and_exit_1(tmp_path: Path, capsys: Capsys) -> None:
    path = tmp_path / "readme.txt"
    path.write_text("hello\n" * 200)
    code, out, err = run(capsys, "verify", str(path))
    assert (code, out) == (1, "")
    assert err.startswith("faultline: error: ") and "not a Faultline journal" in err and err.count("\n") == 1


def test_tail_prints_the_last_rows_compactly(journal_file: Path, capsys: Capsys) -> None:
    code, out, _ = run(capsys, "tail", str(journal_file), "-n", "3")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 3
    assert lines[0].split()[0] == "16" and "defense_fired" in lines[0] and "dedup" in lines[0]
    assert "tool_agent → user assistant_turn 'Your order A1 has shipped.' [done]" in lines[1]
    assert lines[2].split()[0] == "18" and "failure reward 0" in lines[2]


def test_tail_follow_prints_new_rows_until_interrupted(
    journal_file: Path, capsys: Capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    polls: list[float] = []

    def poll(interval: float) -> None:
        polls.append(interval)
        if len(polls) == 1:
            with Journal.open(journal_file) as journal:
                journal.append(incoming(episode_envelopes("ep-c")[:2], first_seq=19))
        else:
            raise KeyboardInterrupt

    monkeypatch.setattr(time, "sleep", poll)
    code, out, _ = run(capsys, "tail", str(journal_file), "-n", "1", "--follow", "--interval", "0.25")
    assert code == 0 and polls == [0.25, 0.25]
    assert [line.split()[0] for line in out.splitlines()] == ["18", "19", "20"]
    assert "ep-c" in out.splitlines()[2] and "Where is my order A1?" in out


def test_show_renders_an_episode_timeline(journal_file: Path, capsys: Capsys) -> None:
    code, out, _ = run(capsys, "show", str(journal_file), "--episode", "ep-b")
    assert code == 0
    assert "episode ep-b" in out and "retail/t7" in out and "failure reward 0" in out
    for expected in [
        "user → tool_agent",
        "'Where is my order A1?'",
        'llm#0 sim-1 120+30 tok → get_order(order_id="A1")',
        'get_order(order_id="A1")',
        'get_order → {"status":"shipped"}',
        "message_storm (rule r1)",
        "dedup at tool_agent dropped x1",
        "episode_completed",
    ]:
        assert expected in out
    assert "ep-a" not in out
    assert out.index("user_turn") < out.index("tool_call") < out.index("episode_completed")


def test_show_names_the_system_of_ones_own_an_episode_ran_on(tmp_path: Path, capsys: Capsys) -> None:
    """Its episodes have no domain: the header and the start's line read "-/sum"."""
    started = EpisodeStarted(task="sum", system="desk:HelpDesk")
    with Journal.open(tmp_path / "j.db") as journal:
        journal.append(incoming([Envelope(id="s", episode="ep-s", sender="runner", body=started)]))
    code, out, _ = run(capsys, "show", str(tmp_path / "j.db"), "--episode", "ep-s")
    assert code == 0 and out.splitlines()[0].startswith("episode ep-s  desk:HelpDesk/sum trial 0"), out
    assert "-/sum" not in out


def test_show_tells_the_fault_injectors_model_calls_from_the_faulted_agents_own(tmp_path: Path, capsys: Capsys) -> None:
    """The injector's call is recorded under the agent whose message it rewrites, numbered from 0 as that agent's
    own first call is: the line says whose it is."""
    said = {"content": "Where is my order A1?", "model": "m"}
    rewritten = {"content": "<rewrite>Where is my order A7?</rewrite>", "model": "m"}
    own = Recording(call="llm", index=0, request_digest="a", request={"role": "user", "messages": []}, response=said)
    turn = UserTurn(text="Where is my order A7?")
    asked = {"role": INJECTOR_ROLE, "messages": []}
    injector = Recording(call="llm", index=0, request_digest="b", request=asked, response=rewritten)
    envelopes = [
        Envelope(id="own", episode="ep-i", sender="user", causation="start", body=own),
        Envelope(id="inj", episode="ep-i", sender="user", causation="turn", body=injector),
        Envelope(id="turn", episode="ep-i", sender="user", recipient="tool", causation="start", body=turn),
    ]
    with Journal.open(tmp_path / "j.db") as journal:
        journal.append(incoming(envelopes))
    code, out, _ = run(capsys, "show", str(tmp_path / "j.db"), "--episode", "ep-i")
    assert code == 0
    lines = [line for line in out.splitlines() if "recording" in line]
    assert "recording  llm#0 m 0+0 tok → 'Where is my order A1?'" in lines[0]
    assert "recording  fault injector llm#0 m 0+0 tok → '<rewrite>Where is my order A7?</rewrite>'" in lines[1]


def test_show_json_prints_the_episode_rows(journal_file: Path, capsys: Capsys) -> None:
    code, out, _ = run(capsys, "show", str(journal_file), "-e", "ep-a", "--json")
    rows, summary = jsonl.read(out)
    assert code == 0 and [row["pos"] for row in rows] == list(range(1, 10))
    assert {row["type"] for row in rows} == {"row"}
    assert summary == {"type": "summary", "episode": "ep-a", "rows": 9, "outcome": "success"}
    assert rows[3]["body"] == {
        "kind": "tool_call",
        "call_id": "c1",
        "name": "get_order",
        "arguments": {"order_id": "A1"},
    }


def test_show_of_an_unknown_episode_is_one_line_and_exit_1(journal_file: Path, capsys: Capsys) -> None:
    code, out, err = run(capsys, "show", str(journal_file), "-e", "nope")
    assert (code, out) == (1, "")
    assert err == (
        f"faultline: error: {journal_file}: no episode 'nope'; `faultline journal episodes {journal_file}` lists them\n"
    )


def test_show_requires_an_episode(journal_file: Path, capsys: Capsys) -> None:
    code, _, err = run(capsys, "show", str(journal_file))
    assert code == 2 and "--episode" in err


def test_export_to_stdout_and_to_a_file_then_import(journal_file: Path, tmp_path: Path, capsys: Capsys) -> None:
    code, out, _ = run(capsys, "export", str(journal_file))
    assert code == 0 and len(out.splitlines()) == 18
    target = tmp_path / "out.jsonl"
    code, said, _ = run(capsys, "export", str(journal_file), "-o", str(target))
    assert code == 0 and said == f"exported 18 rows to {target}\n"
    assert target.read_text() == out
    typed = tmp_path / "typed.jsonl"
    code, _, _ = run(capsys, "export", str(journal_file), "--json", "-o", str(typed))
    rows, summary = jsonl.read(typed.read_text())
    assert [row["pos"] for row in rows] == list(range(1, 19)) and summary["rows"] == 18
    for source, copy in ((target, tmp_path / "copy.db"), (typed, tmp_path / "typed.db")):
        code, said, _ = run(capsys, "import", str(source), str(copy))
        assert code == 0 and said.startswith(f"imported 18 rows into {copy}")
        with JournalReader(copy) as a, JournalReader(journal_file) as b:
            assert list(a.rows()) == list(b.rows())


def test_import_of_a_missing_file_is_one_line(tmp_path: Path, capsys: Capsys) -> None:
    code, _, err = run(capsys, "import", str(tmp_path / "none.jsonl"), str(tmp_path / "x.db"))
    assert code == 1 and err == f"faultline: error: {tmp_path / 'none.jsonl'}: no such exported journal file\n"


def test_episodes_table_and_json(journal_file: Path, capsys: Capsys) -> None:
    code, out, _ = run(capsys, "episodes", str(journal_file))
    assert code == 0
    lines = [line for line in out.splitlines() if "ep-" in line]
    assert len(lines) == 2
    assert "success" in lines[0] and "t7 #2" in lines[0] and "failure" in lines[1]
    assert "2 episodes of retail" in out
    code, out, _ = run(capsys, "episodes", str(journal_file), "--json")
    episodes, summary = jsonl.read(out)
    assert summary == {"type": "summary", "episodes": 2, "outcomes": {"success": 1, "failure": 1}}
    assert [(e["episode"], e["outcome"], e["reward"], e["turns"], e["messages"]) for e in episodes] == [
        ("ep-a", "success", 1.0, 2, 9),
        ("ep-b", "failure", 0.0, 2, 9),
    ]
    assert episodes[0]["duration_s"] == 4.0
    code, out, _ = run(capsys, "episodes", str(journal_file), "--status", "failed")
    assert code == 0 and "1 episode of retail" in out


@pytest.mark.parametrize("command", [["journal", "export", "{journal}"], ["config", "check"]])
def test_a_reader_that_goes_away_ends_the_command_quietly(journal_file: Path, command: list[str]) -> None:
    """`faultline ... | head` closes the pipe early: exit 0 and nothing on stderr, as Unix tools do."""
    argv = [arg.format(journal=journal_file) for arg in command]
    args = [sys.executable, "-m", "faultline.cli", *argv]
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        err = proc.stderr.read()
        assert (proc.wait(timeout=60), err) == (0, b"")


@pytest.mark.parametrize(
    ("offset", "shown"), [(-0.0001, "0.000"), (0.0, "0.000"), (-0.5, "-0.500"), (1.23456, "1.235")]
)
def test_show_times_never_read_negative_zero(offset: float, shown: str) -> None:
    """Processes stamp messages with their own clocks: a start a hair before the episode's reads 0.000."""
    from faultline.cli._journal import _seconds

    assert _seconds(offset) == shown


def test_a_damaged_journal_is_named_as_damaged_with_what_to_do(
    journal_file: Path, tmp_path: Path, capsys: Capsys
) -> None:
    """A journal cut short (a full disk, a copy stopped halfway) is a damaged journal, not some other file."""
    damaged = tmp_path / "cut.db"
    data = journal_file.read_bytes()
    damaged.write_bytes(data[:4096] + b"\0" * 100 + data[4096 + 100 : len(data) // 2])
    code, out, err = run(capsys, "verify", str(damaged))
    assert (code, out) == (1, "") and err.count("\n") == 1
    assert err.startswith(f"faultline: error: {damaged}: a damaged database file (")
    assert "faultline journal serve" in err and "faultline journal import" in err
