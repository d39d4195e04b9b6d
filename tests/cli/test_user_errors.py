"""A user's mistake is one readable line and a failing status, never a traceback: files that cannot be written or
read where the user pointed, folders where files go, numbers out of range."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import pytest

from faultline.cli import build_parser, main
from tests.journal.conftest import two_episode_journal

OWN_SYSTEM = ["--system", "tests.replay.test_fork_topics:Gossip", "--inputs", "{tmp}/in.jsonl"]
"""A system of one's own and its input records, which the test writes."""


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    return two_episode_journal(tmp_path / "journal.db")


@pytest.mark.parametrize(
    ("argv", "status", "said"),
    [
        (["view", "{j}", "-o", "{tmp}/no/such/folder/v.html"], 1, "v.html: No such file or directory"),
        (["view", "{j}", "-o", "{tmp}"], 1, ": Is a directory"),
        (["journal", "export", "{j}", "-o", "{tmp}"], 1, ": Is a directory"),
        (["report", "{j}"], 1, "journal.db is not a campaign folder: it has no manifest.json"),
        (["report", "{tmp}/nowhere"], 1, "nowhere: no such campaign folder"),
        (["inject", "role_ambiguity"], 2, "role_ambiguity is a prompt fault: it rewrites the first message of"),
        (["journal", "verify", "{tmp}"], 1, ": is a folder, not a journal file"),
        (["replay", "{tmp}"], 1, ": is a folder, but no journal set (it has no journal-set.json)"),
        (["journal", "import", "/dev/null", "{tmp}/x.sqlite"], 1, "/dev/null: is not a regular file"),
        (["journal", "tail", "{j}", "-n", "99999999999999999999"], 2, "argument -n: must be at most"),
        (["journal", "tail", "{j}", "-n", "-1"], 2, "argument -n: must be at least 0, got -1"),
        (["journal", "tail", "{j}", "-f", "--interval", "nan"], 2, "argument --interval: must be a number of seconds"),
        (["view", "{j}", "--serve", "--port", "99999"], 2, "argument --port: must be at most 65535, got 99999"),
        (["inject", "storm", "--to", "a.b", "--nats", "nats://127.0.0.1:9"], 2, "recipient 'a.b' can match nothing"),
        (["helpers", "clear", "nope", "--nats", "nats://127.0.0.1:9"], 1, "cannot load domain 'nope'"),
        (["run", "--tasks", "1", "--journal", "{tmp}"], 1, ": is a folder, not a journal file"),
        (["up", "--journal", "{tmp}"], 1, ": is a folder, not a journal file"),
        (
            ["journal", "serve", "{tmp}/j.sqlite", "--trim-after-s", "-1", "--nats", "nats://127.0.0.1:9"],
            2,
            "--trim-after-s -1: give the seconds the stream keeps a settled episode, 0 for ever",
        ),
        (
            ["journal", "serve", "{tmp}/j.sqlite", "--trim-every-s", "0", "--nats", "nats://127.0.0.1:9"],
            2,
            "--trim-every-s 0: give the seconds between two trims of the stream, above 0",
        ),
        (["run", "--tasks", "1", "--journal", "/dev/null"], 1, "/dev/null: is not a regular file, so not a journal"),
        (["run", "--tasks", "1", "--journal", "{tmp}/notes.txt"], 1, "notes.txt: not a Faultline journal"),
        (
            ["run", "--fault", "storm:probability=2", "--journal", "{tmp}/j.sqlite"],
            2,
            "--fault 'storm:probability=2': probability: must be at most 1, got 2",
        ),
        (
            ["inject", "storm", "--probability", "2", "--nats", "nats://127.0.0.1:9"],
            2,
            "--probability: must be at most",
        ),
        (
            ["run", "--fault", "storm:copies=3,frm=tool", "--journal", "{tmp}/j.sqlite"],
            2,
            "--fault 'storm:copies=3,frm=tool': unknown key 'frm' (did you mean 'from'?); a rule takes to, from,"
            " kind, episode, topic, probability, budget, for, id; storm's own: copies",
        ),
        (
            ["run", "--fault", "cycle:sender=tool", "--journal", "{tmp}/j.sqlite"],
            2,
            "--fault 'cycle:sender=tool': unknown key 'sender'; a rule takes to, from, kind, episode, topic,"
            " probability, budget, for, id; cycle has no parameters of its own",
        ),
        (
            ["run", "--fault", "role_ambiguity:agents=tol", "--tasks", "1", "--journal", "{tmp}/j.sqlite"],
            1,
            "--fault 'role_ambiguity:agents=tol': the system has no agent 'tol' (its agents: env, tool, user), so the"
            " rule would never apply",
        ),
        (
            ["run", *OWN_SYSTEM, "--fault", "storm:to=nobody", "--journal", "{tmp}/j.sqlite"],
            1,
            "--fault 'storm:to=nobody': the system has no agent 'nobody' (its agents: listener, scorer, speaker)",
        ),
        (["run", "--episode-timeout", "1e300"], 2, "argument --episode-timeout: must be a number of seconds above 0"),
        (
            [
                "run",
                "--system",
                "tests.replay.test_fork_topics:Gossip",
                "--inputs",
                "{tmp}/in.jsonl",
                "--task-ids",
                "zz",
            ],
            2,
            "--task-ids: inputs {tmp}/in.jsonl has no task 'zz'",
        ),
        (
            ["run", *OWN_SYSTEM, "--domain", "retail"],
            2,
            "--domain picks the tasks of the built-in tool-use agents; system tests.replay.test_fork_topics:Gossip runs"
            " its input records (inputs {tmp}/in.jsonl)",
        ),
        (
            ["campaign", *OWN_SYSTEM, "--domain", "phone", "--out", "{tmp}/c"],
            2,
            "--domain picks the tasks of the built-in tool-use agents",
        ),
    ],
)
def test_a_mistake_is_one_line_and_a_failing_status(
    argv: list[str], status: int, said: str, journal: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "notes.txt").write_text("not a journal\n")
    (tmp_path / "in.jsonl").write_text('{"id": "a", "secret": "42"}\n')
    filled = [a.format(j=journal, tmp=tmp_path) for a in argv]
    assert main(filled) == status
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and said.format(tmp=tmp_path) in err, err
    assert err.startswith("faultline: ")


def _numeric_arguments(parser: argparse.ArgumentParser, command: str) -> Iterator[tuple[str, object]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _numeric_arguments(sub, f"{command} {name}")
        elif action.type in (int, float):
            yield f"{command} {'/'.join(action.option_strings) or action.dest}", action.type


def test_no_argument_reads_a_number_with_argparse_s_own_words() -> None:
    """`type=int` says "invalid int value: 'abc'"; the shared parsers (cli/_args.py) say "expected a whole number"."""
    assert list(_numeric_arguments(build_parser(), "faultline")) == []


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["run", "--trials", "abc"], "run: argument --trials: expected a whole number, got 'abc'"),
        (["inject", "storm", "--copies", "abc"], "inject storm: argument --copies: expected a whole number, got 'abc'"),
        (["inject", "storm", "--budget", "abc"], "inject storm: argument --budget: expected a whole number, got 'abc'"),
        (["run", "--seed", "abc"], "run: argument --seed: expected a whole number, got 'abc'"),
        (["fork", "{j}", "-e", "ep-a", "--at", "abc", "--drop"], "fork: argument --at: expected a whole number"),
        (["attribute", "{j}", "--samples", "abc"], "attribute: argument --samples: expected a whole number, got 'abc'"),
        (["journal", "serve", "{j}", "--shards", "abc"], "journal serve: argument --shards: expected a whole number"),
        (["inject", "storm", "--copies", "0"], "inject storm: argument --copies: must be at least 1, got 0"),
        (["inject", "storm", "--copies", "101"], "inject storm: argument --copies: must be at most 100, got 101"),
        (
            ["run", "--fault", "storm:copies=abc"],
            "--fault 'storm:copies=abc': copies: expected a whole number, got 'abc'",
        ),
        (["run", "--fault", "storm:copies=101"], "--fault 'storm:copies=101': copies: must be at most 100, got 101"),
        (
            ["run", "--fault", "memory_loss:turns=1.5"],
            "--fault 'memory_loss:turns=1.5': turns: expected a whole number",
        ),
        (
            ["run", "--fault", "context_length_violation:keep_chars=-1"],
            "--fault 'context_length_violation:keep_chars=-1': keep_chars: must be at least 0, got -1",
        ),
        (["run", "--fault", "storm:probability=x"], "--fault 'storm:probability=x': probability: expected a number"),
        (["run", "--fault", "storm:budget=two"], "--fault 'storm:budget=two': budget: expected a whole number, got"),
        (["inject", "storm", "--probability", "abc"], "inject storm: argument --probability: expected a number, got"),
        (["run", "--error-rates", "abc"], "run: argument --error-rates: expected a number, got 'abc'"),
        (["fama", "loop", "--error-rates", "2"], "fama loop: argument --error-rates: must be at most 1, got 2"),
        (
            ["journal", "serve", "{j}", "--trim-after-s", "nan"],
            "journal serve: argument --trim-after-s: expected a finite number",
        ),
    ],
)
def test_a_number_that_is_none_reads_the_same_in_every_command(
    argv: list[str], said: str, journal: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([a.format(j=journal) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"faultline: usage error: {said}") and len(err.splitlines()) == 1, err
