"""Which journal and which of its episodes a command works on: the same checks and filters everywhere."""

from __future__ import annotations

import argparse
from datetime import datetime
from pathlib import Path

from faultline._errors import JournalError, UsageError
from faultline.journal import EpisodeFilter, JournalReader, absent_journal, journal_exists

STATUSES = ("passed", "failed", "errored", "incomplete")


def require_journal(path: Path) -> None:
    """JournalError for a journal (file or set) that is not there, before anything opens (or creates) it."""
    if not journal_exists(path):
        raise JournalError(absent_journal(path))


def add_episode_filters(
    parser: argparse.ArgumentParser, which: str = "all when none is given; several narrow it down", *, run: bool = True
) -> None:
    """The filter flags; `run=False` leaves `--run` to a command that gives it a meaning of its own (`compare`)."""
    group = parser.add_argument_group(f"which episodes ({which})")
    if run:
        group.add_argument(
            "--run",
            dest="run_filter",
            metavar="RUN_ID",
            help="only this run's episodes (`run --run-id`, a campaign's cells), as their starts record it; in a"
            " journal written before starts did, those whose ids begin RUN_ID-",
        )
    group.add_argument("--status", choices=STATUSES, help="passed, failed (failure or timeout), errored, incomplete")
    group.add_argument("--task", help="only this task id")
    group.add_argument("--domain", help="only this domain")
    group.add_argument("--fault", metavar="TYPE", help="only episodes where a fault of this type was applied")
    group.add_argument(
        "--since",
        metavar="TIME",
        help="only episodes begun at or after TIME (ISO 8601, e.g. 2026-11-23T10:00; local time); a fork begins when"
        " it ran, not when the episode it copies did",
    )


def episode_filter(args: argparse.Namespace) -> EpisodeFilter | None:
    """The filter the flags ask for, or None when none was given."""
    since = None
    if args.since:
        try:
            since = datetime.fromisoformat(args.since).timestamp()
        except ValueError:
            raise UsageError(f"--since {args.since!r}: expected a time like 2026-11-23T10:00") from None
    wanted = EpisodeFilter(
        status=args.status,
        task=args.task,
        domain=args.domain,
        fault=args.fault,
        since=since,
        run=getattr(args, "run_filter", None),
    )
    return None if wanted == EpisodeFilter() else wanted


def journal_filter(journal: Path, args: argparse.Namespace) -> EpisodeFilter | None:
    """`episode_filter`, with a run the journal holds no episode of as its error (`JournalReader.check_runs`)."""
    wanted = episode_filter(args)
    if wanted is not None and wanted.run:
        with JournalReader(journal) as reader:
            reader.check_runs([wanted.run])
    return wanted


def filtered_episodes(journal: Path, args: argparse.Namespace, named: list[str]) -> list[str] | None:
    """The episodes named and matching the filter flags; None when neither narrows anything (all of them). A named
    episode the journal does not hold is its error (`JournalReader.check_episodes`), whatever the filters."""
    if named:
        with JournalReader(journal) as reader:
            reader.check_episodes(named)
    wanted = journal_filter(journal, args)
    if wanted is None:
        return named or None
    with JournalReader(journal) as reader:
        chosen = [e.episode for e in reader.select(wanted)]
    if named:
        chosen = [episode for episode in named if episode in set(chosen)]
    if not chosen:
        raise UsageError(f"{journal}: no episode matches the filters")
    return chosen
