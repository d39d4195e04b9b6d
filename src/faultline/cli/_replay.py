"""`faultline replay`: re-run a journal against today's code and report the first divergence of each episode, and
the episodes it cannot replay here."""

from __future__ import annotations

import argparse
from pathlib import Path

import msgspec

from faultline.api import replay
from faultline.cli import _jsonl
from faultline.cli._args import add_plugin_flag, whole_number, with_plugin_path
from faultline.cli._filters import add_episode_filters, filtered_episodes, require_journal
from faultline.cli._progress import progress_shown
from faultline.cli._text import table_console
from faultline.replay import ReplayReport
from faultline.runtime import load_config


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "replay",
        help="re-execute a journal with no NATS and no model; report where each episode diverged; exit 1 if any",
        description="Feed every agent its journaled inputs, serve every recorded call from the journal, "
        "and compare every output. Needs only the journal file. The hash chain is checked first: in full the "
        "first time, then only the rows appended since the last check that held (JOURNAL.verified); "
        "`faultline journal verify` checks every row again.",
    )
    p.add_argument("journal", type=Path, help="the journal file (or journal set) to replay")
    p.add_argument("--episode", "-e", action="append", default=[], help="only these episodes (repeatable)")
    p.add_argument("--config", type=Path, help="faultline.toml naming custom agent classes")
    add_plugin_flag(p)
    p.add_argument(
        "--jobs", "-j", type=whole_number(1), default=1, help="replay in N processes (episodes are independent)"
    )
    p.add_argument(
        "--reexecute-tools",
        action="store_true",
        help="run the environment's tools again instead of serving their journaled results "
        "(slower; finds a changed environment)",
    )
    p.add_argument("--json", action="store_true", help="the report as JSON")
    add_episode_filters(p)
    p.set_defaults(handler=_replay)


def _replay(args: argparse.Namespace) -> int:
    require_journal(args.journal)
    config = with_plugin_path(load_config(args.config), args.plugin_path)
    chosen = filtered_episodes(args.journal, args, args.episode)
    with progress_shown("replaying", "episodes replayed", quiet=args.json) as progress:
        report = replay(
            args.journal,
            episodes=chosen or (),
            config=config,
            jobs=args.jobs,
            reexecute_tools=args.reexecute_tools,
            progress=progress,
        )
    if args.json:
        _jsonl.rows("divergence", report.divergences)
        _jsonl.rows("unreplayable", report.unreplayable)
        _jsonl.summary(_as_data(report))
    else:
        _print(report)
    return 0 if report.identical else 1


def _as_data(report: ReplayReport) -> dict[str, object]:
    """The report's fields but its divergences and the episodes it could not replay, which are rows of their own."""
    data = msgspec.to_builtins(report)
    del data["divergences"], data["unreplayable"]
    data["identical"] = report.identical
    return data  # type: ignore[no-any-return]


def _print(report: ReplayReport) -> None:
    from rich.syntax import Syntax
    from rich.text import Text

    console = table_console()
    rate = report.messages / report.seconds if report.seconds else 0.0
    summary = (
        f"{report.episodes} episodes, {report.agents} agent runs, {report.messages} messages "
        f"in {report.seconds:.2f}s ({rate:,.0f} messages/s)"
    )
    if report.skipped_agents:
        summary += f"; not replayed (unknown agents): {', '.join(report.skipped_agents)}"
    if report.served_agents:
        summary += f"; served from the journal: {', '.join(report.served_agents)} (--reexecute-tools runs them)"
    if report.unhandled:
        summary += (
            f"; {report.unhandled} input(s) not replayed: the journal shows no handling of them to compare with"
            " (their agent had not handled them when the run stopped, or a fork dropped all that handling one sent)"
        )
    if report.identical:
        console.print(Text.assemble(("identical", "green"), f": {summary}"))
        return
    head: list[str | tuple[str, str]] = []
    if report.divergences:
        head += [("diverged", "red"), f" in {len(report.divergences)} episode(s)"]
    if report.unreplayable:
        head += ["; " if head else "", ("could not replay", "red"), f" {len(report.unreplayable)} episode(s)"]
    console.print(Text.assemble(*head, f": {summary}"))
    for u in report.unreplayable:
        console.print(Text.assemble("\n", (f"episode {u.episode}", "bold"), " — cannot be replayed here: ", u.reason))
    for d in report.divergences:
        console.print(
            Text.assemble(
                "\n",
                (f"episode {d.episode}", "bold"),
                " — agent ",
                (d.agent, "bold"),
                f" handling {d.input_kind} at position {d.input_pos} (id {d.input_id})\n  {d.what}",
            )
        )
        diff = d.diff()
        if diff:
            console.print(Syntax(diff, "diff", theme="ansi_dark", background_color="default"))
