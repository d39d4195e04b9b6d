"""`faultline journal ...`: verify, tail, show, export, import and list episodes of a journal file."""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from faultline._errors import DecodeError, JournalError
from faultline._files import not_a_file
from faultline.cli import _jsonl
from faultline.cli._args import connection_flags, number, otel_flags, otel_headers, seconds, whole_number
from faultline.cli._filters import add_episode_filters, filtered_episodes, journal_filter
from faultline.cli._progress import progress_shown
from faultline.cli._text import Column, counted, fitted_table, table_console
from faultline.core import EpisodeCompleted, EpisodeStarted, ToolResult
from faultline.journal import (
    EpisodeSummary,
    JournalReader,
    JournalRow,
    attributed_steps,
    describe_body,
    elapsed,
    export_jsonl,
    export_row,
    import_jsonl,
    verify,
)
from faultline.replay import forks_path

TAIL_ROWS = 20
"""Rows `tail` prints when -n is not given."""

FOLLOW_INTERVAL_S = 0.5
"""How often `tail --follow` polls the file for new rows."""

_KIND_STYLES = {
    "episode_started": "bold cyan",
    "episode_completed": "bold",
    "error_raised": "bold red",
    "fault_applied": "bold magenta",
    "fault_skipped": "magenta",
    "defense_fired": "bold yellow",
    "dead_letter": "red",
    "control": "cyan",
    "recording": "dim",
    "tool_call": "blue",
    "context_request": "dim",
    "context_reply": "dim",
}


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("journal", help="inspect, verify and export a journal file")
    commands = parser.add_subparsers(dest="journal_command", metavar="COMMAND")
    commands.required = True

    p = commands.add_parser(
        "verify",
        help="recompute the hash chain; name the first bad row",
        description="Finds any row edited, removed, inserted or reordered, and, through the head record the "
        "writer keeps beside the file (FILE.head), rows cut from the end. Someone who rewrites the rows and the "
        "head record together is caught only by a head value saved elsewhere: pass it with --anchor.",
    )
    p.add_argument("file", type=Path, help="the journal file (or journal set)")
    p.add_argument(
        "--anchor", default="", metavar="HEX", help="a head value saved earlier that must still be in the chain"
    )
    p.add_argument(
        "--jobs",
        type=whole_number(1),
        default=os.cpu_count() or 1,
        metavar="N",
        help="check ranges of a large journal in N processes (default: the number of CPUs)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="check only the rows after the last check that held (FILE.verified), as replay does;"
        " without it every row is checked",
    )
    p.add_argument("--json", action="store_true", help="JSON lines (docs/json.md)")
    p.set_defaults(handler=_verify)

    p = commands.add_parser(
        "otel",
        help="send episodes as OpenTelemetry traces (OTLP/HTTP) to Jaeger, Tempo, Langfuse, Phoenix ...",
        description="One trace per episode: the episode, an invoke_agent span per agent, a chat span per model call "
        "and an execute_tool span per tool call (OpenTelemetry GenAI conventions), injected faults as events. Ids "
        "derive from the journal, so sending twice sends the same spans.",
    )
    p.add_argument("file", type=Path, help="the journal file (or journal set)")
    p.add_argument(
        "--endpoint", required=True, metavar="URL", help="the traces endpoint, e.g. http://localhost:4318/v1/traces"
    )
    p.add_argument("--episode", "-e", action="append", default=[], help="only these episodes (repeatable)")
    p.add_argument("--header", action="append", default=[], metavar="K=V", help="an HTTP header to send (repeatable)")
    p.add_argument("--timeout", type=seconds, default=10.0, metavar="S", help="give up on the endpoint after S seconds")
    add_episode_filters(p)
    p.add_argument("--json", action="store_true", help="JSON lines (docs/json.md)")
    p.set_defaults(handler=_otel)

    p = commands.add_parser("tail", help="print the last rows, optionally following new ones")
    p.add_argument("file", type=Path, help="the journal file (or journal set)")
    p.add_argument(
        "-n", type=whole_number(0), default=TAIL_ROWS, metavar="N", help=f"rows to print (default {TAIL_ROWS})"
    )
    p.add_argument("--follow", "-f", action="store_true", help="keep printing new rows until Ctrl-C")
    p.add_argument(
        "--interval", type=seconds, default=FOLLOW_INTERVAL_S, metavar="S", help="poll interval for --follow"
    )
    p.set_defaults(handler=_tail)

    p = commands.add_parser(
        "show",
        help="an episode's timeline",
        description="An episode's messages with the seconds since it began (+s). A fork's live part follows its"
        " copied history on: the time between its source's run and its own is left out, and its seconds are those of"
        " its live part.",
    )
    p.add_argument("file", type=Path, help="the journal file (or journal set)")
    p.add_argument("--episode", "-e", required=True, help="the episode (`faultline journal episodes` lists them)")
    p.add_argument("--json", action="store_true", help="the episode's rows as JSON lines")
    p.set_defaults(handler=_show)

    p = commands.add_parser(
        "export",
        help="every row as JSON lines, which `journal import` rebuilds exactly",
        description="One JSON object per row: every column, the body decoded, and the stored body bytes "
        "(base64) that rebuild the row exactly.",
    )
    p.add_argument("file", type=Path, help="the journal file (or journal set)")
    p.add_argument(
        "--json",
        action="store_true",
        help='each row with "type": "row", then a summary line, as every --json (journal import reads both)',
    )
    p.add_argument(
        "--raw",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="include the stored body bytes (the default); without them an export imports back only if "
        "every body survives JSON",
    )
    p.add_argument("-o", "--output", type=Path, help="write to this file instead of stdout")
    p.add_argument("--episode", "-e", action="append", default=[], help="only the rows of these episodes (repeatable)")
    add_episode_filters(p)
    p.set_defaults(handler=_export)

    p = commands.add_parser("import", help="rebuild a journal file from exported JSON lines")
    p.add_argument("source", type=Path, help="exported JSON lines")
    p.add_argument("file", type=Path, help="journal file to create")
    p.add_argument("--json", action="store_true", help="JSON lines (docs/json.md)")
    p.set_defaults(handler=_import)

    _add_serve(commands)
    _add_health(commands)

    p = commands.add_parser(
        "episodes",
        help="episodes with outcome, reward, counts and seconds",
        description="Episodes with their outcome, reward, counts and seconds: from an episode's first message to its"
        " last; for a fork, from the first to the last message of its live part (what it ran after the copy of its"
        " source's history, which keeps its source's times).",
    )
    p.add_argument("file", type=Path, help="the journal file (or journal set)")
    p.add_argument("--json", action="store_true", help="one JSON object per episode")
    add_episode_filters(p)
    p.set_defaults(handler=_episodes)


def _add_serve(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "serve", help="copy the stream into a journal file (or a shard of a journal set) until stopped"
    )
    p.add_argument("file", type=Path, help="the journal file; with --shards, the journal set's folder")
    connection_flags(p, service="journal.json, or its shard's with --shards")
    p.add_argument("--name", default="journal", help="process name announced to the supervisor")
    p.add_argument(
        "--shards",
        type=whole_number(1),
        default=1,
        metavar="N",
        help="write shard --shard of a journal set of N shards at FILE (a folder): the episodes that hash to it",
    )
    p.add_argument(
        "--shard", type=whole_number(0), default=0, metavar="K", help="which shard of --shards this service writes"
    )
    p.add_argument(
        "--partitions",
        type=whole_number(1),
        metavar="P",
        help="into how many partitions the system's subjects divide its episodes (`up` and `run` pass the"
        " configuration's; default: from the configuration, the least common multiple of [journal] shards and every"
        " [workers.*] count)",
    )
    p.add_argument(
        "--trim-after-s",
        type=number(),
        metavar="SECONDS",
        help="trim from the stream what the journal holds of episodes silent this long; 0: never (default:"
        " [journal] trim_after_s, which `up` and `run` pass too)",
    )
    p.add_argument(
        "--trim-every-s",
        type=number(),
        metavar="SECONDS",
        help="how often to trim the stream of settled episodes and of the dead letters every journal shard holds"
        " (default: [journal] trim_every_s)",
    )
    p.add_argument(
        "--completers",
        metavar="AGENTS",
        help="agents that may complete an episode besides the runner, comma-separated; any other's completion is"
        " dead-lettered (default: the configuration's system's, which `up` and `run` pass too; '*': anyone's)",
    )
    otel_flags(p)
    p.set_defaults(handler=_serve)


def _add_health(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = commands.add_parser(
        "health", help="ask the running journal service how far it is; exit 1 if it cannot write or does not answer"
    )
    connection_flags(p)
    p.add_argument("--json", action="store_true", help="JSON lines (docs/json.md)")
    p.set_defaults(handler=_health)


def _serve(args: argparse.Namespace) -> int:
    from faultline.cli._system import journal_serve  # the journal service talks to NATS; the rest of `journal` does not

    return journal_serve(args)


def _health(args: argparse.Namespace) -> int:
    from faultline.cli._system import journal_health

    return journal_health(args)


# -- otel --------------------------------------------------------------------------------------


def _otel(args: argparse.Namespace) -> int:
    headers = otel_headers(args.header, "journal otel: --header")
    chosen = filtered_episodes(args.file, args, args.episode)
    from faultline.journal.otel import export_otel  # OpenTelemetry loads only for this command

    episodes, spans = export_otel(args.file, args.endpoint, episodes=chosen, headers=headers, timeout_s=args.timeout)
    if args.json:
        _jsonl.summary({"episodes": episodes, "spans": spans, "endpoint": args.endpoint})
    else:
        print(f"{spans} spans of {episodes} episodes sent to {args.endpoint}")
    return 0


# -- verify ------------------------------------------------------------------------------------


def _verify(args: argparse.Namespace) -> int:
    with progress_shown("checking", "rows checked", quiet=args.json) as progress:
        report = verify(args.file, anchor=args.anchor, jobs=args.jobs, resume=args.resume, progress=progress)
    if args.json:
        _jsonl.summary(msgspec.to_builtins(report) | {"ok": report.ok})
    report.raise_if_broken()
    if not args.json:
        print(report.summary())
    return 0


# -- rendering rows ----------------------------------------------------------------------------


def _route(row: JournalRow) -> str:
    if row.recipient:
        return f"{row.sender} → {row.recipient}"
    if row.topic:
        return f"{row.sender} → #{row.topic}"
    return row.sender


def _summary(row: JournalRow, width: int) -> tuple[str, str]:
    """(one-line body, style) for a row; a body this version cannot decode is said so, not fatal."""
    style = _KIND_STYLES.get(row.kind, "")
    try:
        body = row.decoded_body()
    except DecodeError as exc:
        return f"<body not decodable by this version: {exc}>", "red"
    if isinstance(body, EpisodeCompleted):
        style = "bold green" if body.outcome == "success" else "bold red"
    elif isinstance(body, ToolResult) and body.error:
        style = "red"
    return describe_body(body, width), style


def _clock(ts: float) -> str:
    if not ts:
        return "-" * 12
    return datetime.fromtimestamp(ts).strftime("%H:%M:%S.%f")[:12]


def _tail_line(row: JournalRow) -> Text:
    summary, style = _summary(row, 120)
    line = Text(f"{row.pos:>7} {_clock(row.ts)} ", style="dim")
    line.append(f"{row.episode} {_route(row)} ")
    line.append(row.kind, style=style or "bold")
    line.append(f" {summary}", style=style)
    return line


# -- tail --------------------------------------------------------------------------------------


def _tail(args: argparse.Namespace) -> int:
    console = table_console()
    with JournalReader(args.file) as reader:
        rows = reader.tail(args.n)
        for row in rows:
            console.print(_tail_line(row), soft_wrap=True)
        if not args.follow:
            return 0
        last = rows[-1].pos if rows else reader.last_pos
        try:
            while True:
                time.sleep(args.interval)
                for row in reader.rows(last + 1):
                    console.print(_tail_line(row), soft_wrap=True)
                    last = row.pos
        except KeyboardInterrupt:
            return 0


# -- show --------------------------------------------------------------------------------------


def _episode_header(summary: EpisodeSummary | None, episode: str, rows: list[JournalRow]) -> Text:
    header = Text(f"episode {episode}", style="bold")
    if summary is None:
        return header.append(f"  ({len(rows)} rows, no lifecycle events)", style="dim")
    started = next((r.decoded_body() for r in rows if r.kind == "episode_started"), None)
    system = started.system if isinstance(started, EpisodeStarted) else ""
    header.append(f"  {summary.domain or system or '-'}/{summary.task or '-'} trial {summary.trial}")
    if summary.outcome is None:
        header.append("  incomplete", style="yellow")
    else:
        header.append(
            f"  {summary.outcome} reward {summary.reward:g}",
            style="green" if summary.outcome == "success" else "red",
        )
    header.append(
        f"  {summary.messages} messages, {summary.tool_calls} tool calls, "
        f"{summary.faults} faults, {summary.defenses} defenses, {summary.duration_s:.2f}s",
        style="dim",
    )
    return header


def _show(args: argparse.Namespace) -> int:
    with JournalReader(args.file) as reader:
        reader.check_episodes([args.episode])
        rows = list(reader.episode_rows(args.episode))
        summary = reader.episode(args.episode)
        if args.json:
            for row in rows:
                _jsonl.row("row", msgspec.json.decode(export_row(row)))
            _jsonl.summary(
                {"episode": args.episode, "rows": len(rows), "outcome": summary.outcome if summary else None}
            )
            return 0
    console = table_console()
    console.print(_episode_header(summary, args.episode, rows))
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold dim")
    table.add_column("pos", justify="right", style="dim")
    table.add_column("+s", justify="right", style="dim")
    table.add_column("route")
    table.add_column("kind")
    table.add_column("body", overflow="fold")
    for row, offset in zip(rows, elapsed(rows), strict=True):
        summary_text, style = _summary(row, 400)
        table.add_row(
            str(row.pos),
            _seconds(offset),
            _route(row),
            Text(row.kind, style=style),
            Text(summary_text, style=style),
        )
    console.print(table)
    return 0


# -- export / import ---------------------------------------------------------------------------


def _export(args: argparse.Namespace) -> int:
    chosen = filtered_episodes(args.file, args, args.episode)
    if args.output is None:
        export_jsonl(args.file, sys.stdout, raw=args.raw, episodes=chosen, typed=args.json)
        return 0
    with args.output.open("w", encoding="utf-8") as out:
        count = export_jsonl(args.file, out, raw=args.raw, episodes=chosen, typed=args.json)
    print(f"exported {count} rows to {args.output}")
    return 0


def _import(args: argparse.Namespace) -> int:
    if not args.source.is_file():
        raise JournalError(not_a_file(args.source, "an exported journal file"))
    with args.source.open("rb") as lines:
        count = import_jsonl(lines, args.file)
    with JournalReader(args.file) as reader:
        head = reader.head
    if args.json:
        _jsonl.summary({"rows": count, "journal": str(args.file), "head": head})
    else:
        print(f"imported {count} rows into {args.file}; digests and chain match the export, head {head}")
    return 0


# -- episodes ----------------------------------------------------------------------------------


def _episodes(args: argparse.Namespace) -> int:
    wanted = journal_filter(args.file, args)
    with JournalReader(args.file) as reader:
        episodes = reader.episodes() if wanted is None else reader.select(wanted)
    if args.json:
        _jsonl.rows("episode", (_episode_json(episode) for episode in episodes))
        outcomes: dict[str, int] = {}
        for episode in episodes:
            outcomes[episode.outcome or "incomplete"] = outcomes.get(episode.outcome or "incomplete", 0) + 1
        _jsonl.summary({"episodes": len(episodes), "outcomes": outcomes})
        return 0
    blamed = attributed_steps(args.file, forks_path(args.file))
    columns = [
        Column("episode", max((len(e.episode) for e in episodes), default=7)),
        Column("task", 10, drop=3, wrap=True),
        Column("outcome", 11),
        Column("cause", 16, wrap=True),
        Column("turns", 5, drop=4, justify="right"),
        Column("tokens", 6, drop=5, justify="right"),
        Column("s", 5, drop=2, justify="right"),
        *([Column("attributed to", 14, drop=1, wrap=True)] if blamed else []),
    ]
    rows: list[list[RenderableType]] = []
    for e in episodes:
        outcome = Text(e.outcome or "incomplete", style={"success": "green", None: "yellow"}.get(e.outcome, "red"))
        if e.reward is not None and 0 < e.reward < 1:
            outcome.append(f" {e.reward:.2g}")
        agent, pos = blamed.get(e.episode, ("", 0))
        rows.append(
            [
                e.episode,
                _task(e),
                outcome,
                e.cause or "",
                str(e.turns) if e.turns else "-",
                str(e.tokens),
                f"{e.duration_s:.2f}",
                f"{agent} at {pos}" if agent else "",
            ]
        )
    console = table_console()
    caption = _episodes_caption(episodes, blamed, args.file)
    console.print(
        fitted_table(columns, rows, console.width, caption=caption, caption_justify="left", header_style="bold")
    )
    return 0


def _task(e: EpisodeSummary) -> str:
    """The task, with its trial past the first, and whether the episode is a fork (the caption names the domains)."""
    return f"{e.task or '-'}" + (f" #{e.trial}" if e.trial else "") + (" (fork)" if e.forked_from else "")


def _episodes_caption(episodes: list[EpisodeSummary], blamed: dict[str, tuple[str, int]], journal: Path) -> str:
    domains = sorted({e.domain for e in episodes if e.domain})
    counts = counted(len(episodes), "episode") + (f" of {', '.join(domains)}" if domains else "")
    if blamed:
        return f"{counts}; attributed from the forks in {forks_path(journal).name} (faultline attribute)"
    return counts


def _episode_json(episode: EpisodeSummary) -> dict[str, Any]:
    return msgspec.structs.asdict(episode) | {"duration_s": episode.duration_s}


def _seconds(offset: float) -> str:
    """An offset in seconds to the millisecond; one that rounds to zero reads 0.000, never -0.000."""
    text = f"{offset:.3f}"
    return "0.000" if text == "-0.000" else text
