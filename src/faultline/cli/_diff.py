"""`faultline diff A B`: two episodes aligned message by message, the first difference marked."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from faultline._errors import JournalError, UsageError
from faultline.cli import _jsonl
from faultline.cli._text import table_console
from faultline.journal import (
    DESCRIBE_WIDTH,
    EpisodeDiff,
    JournalReader,
    JournalRow,
    diff_episodes,
    forked_from,
    is_sqlite_file,
)
from faultline.replay import forks_path

CONTEXT = 3
"""Identical steps shown before the first difference (`--all` shows every step)."""

WIDTH = 70
"""Characters of each message the table shows; `--json` has them up to the journal's usual width."""

_MARK = {"same": "=", "changed": "≠", "only_a": "A", "only_b": "B"}
_STYLE = {"same": "dim", "changed": "bold yellow", "only_a": "red", "only_b": "green"}


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "diff",
        help="align two episodes message by message and show where they part ways",
        description="Compare two episodes: an episode and its fork, two trials of a task, or one task in two "
        "journals. Messages are matched by sender, receiver, kind and content (never by id or time); model "
        "answers by their text and tool calls only. Exit 0 when they say the same, 1 when they differ.",
    )
    p.add_argument("a", metavar="A", help="JOURNAL:EPISODE")
    p.add_argument(
        "b",
        metavar="B",
        nargs="?",
        help="[JOURNAL:]EPISODE (the journal defaults to A's); omitted when A is a fork: the episode it was forked "
        "from, in A's journal or the one its forks journal belongs to",
    )
    p.add_argument("--all", action="store_true", help="show every step, not only from just before the first difference")
    p.add_argument("--json", action="store_true", help="one JSON object per step, then one with type 'summary'")
    p.set_defaults(handler=_diff)


def _diff(args: argparse.Namespace) -> int:
    a_journal, a_episode = _reference(args.a, None)
    a_rows = _rows(a_journal, a_episode)
    if args.b:
        b_journal, b_episode = _reference(args.b, a_journal)
    else:
        b_episode = forked_from(a_rows)
        if not b_episode:
            raise UsageError(f"diff: {a_episode} is not a fork; name the episode to compare it with")
        b_journal = _source_of(a_journal, b_episode)
    width = DESCRIBE_WIDTH if args.json else WIDTH
    b_rows = _rows(b_journal, b_episode)
    result = diff_episodes(f"{a_journal}:{a_episode}", a_rows, f"{b_journal}:{b_episode}", b_rows, width=width)
    if args.json:
        _jsonl.rows("step", result.steps)
        summary = {
            "a": result.a,
            "b": result.b,
            "identical": result.identical,
            "first_difference": result.first_difference,
            "a_outcome": result.a_outcome,
            "b_outcome": result.b_outcome,
        }
        _jsonl.summary(summary)
    else:
        _print(result, show_all=args.all)
    return 0 if result.identical else 1


def _reference(text: str, default_journal: Path | None) -> tuple[Path, str]:
    journal, sep, episode = text.rpartition(":")
    if not sep:
        if default_journal is None:
            raise UsageError(f"diff: {text!r}: write JOURNAL:EPISODE")
        return default_journal, text
    if not journal or not episode:
        raise UsageError(f"diff: {text!r}: write JOURNAL:EPISODE")
    return Path(journal), episode


def _rows(journal: Path, episode: str) -> list[JournalRow]:
    with JournalReader(journal) as reader:
        reader.check_episodes([episode])
        return list(reader.episode_rows(episode))


def _source_of(fork_journal: Path, episode: str) -> Path:
    """The journal holding `episode`: the fork's own, or a journal whose forks go to `fork_journal`."""
    stem = fork_journal.name.removesuffix(".forks.sqlite")
    candidates = [fork_journal] + sorted(
        path
        for path in fork_journal.parent.glob(f"{stem}.*")
        if path != fork_journal and forks_path(path) == fork_journal and is_sqlite_file(path)  # not `view`'s HTML
    )
    for journal in candidates:
        if journal.is_file():
            with JournalReader(journal) as reader:
                if reader.has_episode(episode):
                    return journal
    raise JournalError(
        f"the episode {episode!r} this fork was made from is in none of: {', '.join(map(str, candidates))}"
    )


def _print(result: EpisodeDiff, *, show_all: bool) -> None:
    console = table_console()
    first = result.first_difference
    start = 0 if show_all or not first else max(first - 1 - CONTEXT, 0)
    table = Table(title=f"A = {result.a}\nB = {result.b}", title_justify="left")
    for column in ("step", "", "from → to", "kind", "A", "B"):
        table.add_column(column, overflow="fold")
    for number, step in enumerate(result.steps[start:], start=start + 1):
        same = step.status == "same"
        table.add_row(
            str(number),
            _MARK[step.status],
            f"{step.sender} → {step.to}",
            step.kind,
            step.a,
            "" if same else step.b,
            style=_STYLE[step.status],
        )
    if start:
        console.print(f"{start} identical steps before these (--all shows them)")
    console.print(table)
    if result.identical:
        console.print(f"identical: {len(result.steps)} steps say the same; outcome {result.a_outcome}")
    else:
        console.print(
            f"first difference at step {first}; outcome A: {result.a_outcome}; outcome B: {result.b_outcome}",
            soft_wrap=True,
        )
