"""`faultline view`: a journal as one HTML file to open in a browser, offline."""

from __future__ import annotations

import argparse
import webbrowser
from pathlib import Path

from faultline._errors import UsageError
from faultline.cli import _jsonl
from faultline.cli._filters import add_episode_filters, filtered_episodes, require_journal_file
from faultline.journal import JournalReader, write_view
from faultline.replay import forks_path


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "view",
        help="write one self-contained HTML file showing the journal's episodes as lanes of messages",
        description="The file needs no server and no network: the episode list with filters, and for each "
        "episode one lane per agent, model calls with their prompt and answer, tool calls, faults, a fork beside "
        "its original, and the decisive step of an attribution (read from the forks journal). Prints its path.",
    )
    p.add_argument("journal", type=Path)
    p.add_argument(
        "--episode", "-e", action="append", default=[], help="only these episodes (repeatable); the first opens"
    )
    p.add_argument(
        "--forks",
        type=Path,
        metavar="FILE",
        help="journal of forks shown beside their originals (default: JOURNAL's .forks.sqlite when it exists)",
    )
    p.add_argument("--out", "-o", type=Path, metavar="FILE", help="where to write it (default: JOURNAL with .html)")
    p.add_argument("--open", action="store_true", help="open it in the default browser")
    p.add_argument("--json", action="store_true", help="one summary object instead of the path")
    add_episode_filters(p)
    p.set_defaults(handler=_view)


def _view(args: argparse.Namespace) -> int:
    require_journal_file(args.journal)
    if args.forks is not None and not args.forks.is_file():
        raise UsageError(f"--forks {args.forks}: no such journal file")
    chosen = filtered_episodes(args.journal, args, args.episode)
    if args.episode:
        with JournalReader(args.journal) as reader:
            missing = [e for e in args.episode if not reader.has_episode(e)]
        if missing:
            raise UsageError(f"{args.journal}: no episode {missing[0]!r}")
    out = args.out or args.journal.with_suffix(".html")
    stats = write_view(
        args.journal,
        out,
        episodes=chosen,
        forks=args.forks or forks_path(args.journal),
        open_episode=chosen[0] if args.episode and chosen else "",
    )
    if args.json:
        _jsonl.summary(stats)
    else:
        print(stats.path)
    if args.open:
        webbrowser.open(out.resolve().as_uri())
    return 0
