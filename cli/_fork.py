"""`faultline fork` and `faultline attribute`: counterfactual runs of a journaled episode."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import anyio
import msgspec
from rich.console import Console
from rich.table import Table

from faultline._errors import JournalError, UsageError
from faultline.cli._filters import add_episode_filters, episode_filter, filtered_episodes
from faultline.cli._run import add_model_flags, effective_config
from faultline.core import EpisodeCompleted, FollowsGroundTruth, MessageBody
from faultline.journal import JournalReader
from faultline.replay import (
    Attribution,
    Change,
    Drop,
    ForkResult,
    Keep,
    Replace,
    UndoFault,
    attribute,
    fork_episode,
    forks_path,
)
from faultline.runtime import agent_lookup, make_backend


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "fork",
        help="re-run an episode from a position with one message changed",
        description="History before POS is served from the journal (no model is called again); "
        "the message at POS is changed; the rest runs live as a new episode. The fork is written, "
        "all at once when it ends, to JOURNAL's forks file (JOURNAL with the suffix .forks.sqlite) "
        "or --out, never to JOURNAL unless --into-source; a fork already there is reported, not run again.",
    )
    p.add_argument("journal", type=Path)
    p.add_argument("--episode", "-e", required=True)
    p.add_argument("--at", type=int, required=True, metavar="POS", help="journal position of the message to change")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--drop", action="store_true", help="the message never arrives")
    how.add_argument(
        "--replace", type=Path, metavar="FILE.json", help='deliver this body instead (JSON with its "kind")'
    )
    how.add_argument("--undo-fault", action="store_true", help="POS is a fault event: deliver the original message")
    how.add_argument("--keep", action="store_true", help="deliver the message as it was (re-run the rest live)")
    _add_destination(p, "the fork")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=JSON", help="override an episode setting in the fork"
    )
    p.add_argument("--json", action="store_true")
    add_model_flags(p)
    p.set_defaults(handler=_fork)

    p = sub.add_parser(
        "attribute",
        help="find the decision that made a failed episode fail (by forks with repairs)",
        description="Bisects over one agent's decisions: a repair replaces a decision by the ground-truth "
        "action and lets the rest run with the agent's model following the ground truth. Needs a model backend "
        "that can follow it (sim can; openai cannot yet).",
    )
    p.add_argument("journal", type=Path)
    p.add_argument("--episode", "-e", action="append", default=[], help="episode to attribute (repeatable)")
    p.add_argument("--agent", default="tool", help="the agent whose decisions are repaired (default: tool)")
    p.add_argument("--all-failed", action="store_true", help="every failed episode of the journal")
    _add_destination(p, "the repair forks", "--scratch")
    p.add_argument("--json", action="store_true")
    add_model_flags(p)
    add_episode_filters(p, "the failed episodes that match, or narrow --episode/--all-failed down")
    p.set_defaults(handler=_attribute)


def _add_destination(parser: argparse.ArgumentParser, what: str, *aliases: str) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--out",
        *aliases,
        type=Path,
        metavar="FILE",
        help=f"journal to write {what} to (default: JOURNAL with the suffix .forks.sqlite, beside it)",
    )
    where.add_argument(
        "--into-source",
        action="store_true",
        help=f"append {what} to JOURNAL itself (one transaction per fork; a fork already there is reported, "
        "not written again)",
    )


def _destination(args: argparse.Namespace) -> Path:
    if args.into_source:
        return Path(args.journal)
    return args.out or forks_path(args.journal)


def _change(args: argparse.Namespace) -> Change:
    if args.drop:
        return Drop()
    if args.undo_fault:
        return UndoFault()
    if args.keep:
        return Keep()
    try:
        return Replace(body=msgspec.json.decode(args.replace.read_bytes(), type=MessageBody))
    except FileNotFoundError:
        raise UsageError(f"--replace {args.replace}: no such file") from None
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise UsageError(f"--replace {args.replace}: not a message body ({exc})") from None


def _settings(items: list[str]) -> dict[str, Any]:
    settings = {}
    for item in items:
        key, _, value = item.partition("=")
        try:
            settings[key] = json.loads(value)
        except json.JSONDecodeError:
            raise UsageError(f"--set {item!r}: the value must be JSON (quote strings)") from None
    return settings


def _check_journal(path: Path) -> None:
    if not path.is_file():
        raise JournalError(f"{path}: no such journal file")


def _fork(args: argparse.Namespace) -> int:
    _check_journal(args.journal)
    config = effective_config(args)
    result = anyio.run(
        lambda: fork_episode(
            args.journal,
            args.episode,
            args.at,
            _change(args),
            lookup=agent_lookup(config),
            backends=lambda role: make_backend(config, role),
            out=_destination(args),
            settings=_settings(args.set) or None,
        )
    )
    if args.json:
        print(msgspec.json.encode(result).decode())
        return 0
    console = Console()
    console.print(_fork_table(result))
    if result.existing:
        console.print(
            f"{result.journal} holds this fork already ({result.rows} rows): nothing run or written", soft_wrap=True
        )
    else:
        console.print(f"{result.rows} rows written to {result.journal}", soft_wrap=True)
    return 0


def _fork_table(result: ForkResult) -> Table:
    table = Table(title=f"fork of {result.forked_from} at position {result.at} ({result.change})")
    table.add_column("")
    table.add_column("original")
    table.add_column("fork")
    original = result.original or EpisodeCompleted(outcome="failure", cause="(not completed)")
    table.add_row("episode", result.forked_from, result.episode)
    table.add_row("outcome", original.outcome, result.outcome.outcome)
    table.add_row("reward", f"{original.reward:g}", f"{result.outcome.reward:g}")
    table.add_row("cause", original.cause or "-", result.outcome.cause or "-")
    if not result.existing:
        table.add_row("live messages", "", str(result.live_messages))
        table.add_row("seconds", "", f"{result.seconds:.3f}")
    return table


def _attribute(args: argparse.Namespace) -> int:
    _check_journal(args.journal)
    episodes = list(args.episode)
    if args.all_failed or (not episodes and episode_filter(args) is not None):
        with JournalReader(args.journal) as reader:
            episodes += [
                e.episode for e in reader.episodes() if e.outcome not in (None, "success") and not e.forked_from
            ]
        if not episodes:
            raise UsageError(f"{args.journal}: no failed episode to attribute")
    if not episodes:
        raise UsageError("name an episode with --episode E, pass --all-failed, or filter episodes (--status ...)")
    episodes = filtered_episodes(args.journal, args, episodes) or episodes
    config = effective_config(args)
    scratch = _destination(args)

    role = config.role_of(args.agent)
    repair = make_backend(config, role)
    if not isinstance(repair, FollowsGroundTruth):
        raise UsageError(
            f"attribution by repair needs a model that can be told to follow the ground truth; the backend for "
            f"role {role!r} ({type(repair).__name__}) cannot: attribute with --model sim"
        )

    async def main() -> list[Attribution]:
        lookup, backends = agent_lookup(config), (lambda role: make_backend(config, role))
        return [
            await attribute(
                args.journal, e, lookup=lookup, backends=backends, agent=args.agent, repair=repair, scratch=scratch
            )
            for e in episodes
        ]

    results = anyio.run(main)
    if args.json:
        for result in results:
            print(msgspec.json.encode(result).decode())
        return 0
    console = Console()
    for r in results:
        if r.decision is None:
            console.print(
                f"[bold]{r.episode}[/bold]: no single decision decides it ({r.forks} forks in {r.journal})"
                f" — {'; '.join(r.evidence)}"
            )
            continue
        console.print(
            f"[bold]{r.episode}[/bold]: decisive step = agent [bold]{r.agent}[/bold], decision {r.decision} of {r.decisions} "
            f"(position {r.position}), category [bold]{r.category or '?'}[/bold]; {r.forks} forks in {r.journal}\n"
            f"  wrong: {json.dumps(r.wrong, sort_keys=True)}\n  right: {json.dumps(r.right, sort_keys=True)}"
        )
    return 0
