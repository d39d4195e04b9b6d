"""`faultline memory ...`: rebuild the memory from a journal, look into it, search it, serve it."""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import msgspec
from rich.table import Table
from rich.text import Text

from faultline.cli import _jsonl
from faultline.cli._args import add_config_flag, connection_flags, whole_number
from faultline.cli._connect import login, nats_url, subject_prefix
from faultline.cli._filters import add_episode_filters, filtered_episodes
from faultline.cli._text import clip, table_console
from faultline.journal import JournalReader
from faultline.runtime import Config, load_config
from faultline.services.memory import (
    MemoryStore,
    RebuildReport,
    Retrieval,
    RetrievalMode,
    TopK,
    hidden_tools,
    open_memory,
    rebuild,
    retrieval_mode,
    serve_memory,
)

TEXT_WIDTH = 90
"""Longest request or reflection shown in a table cell; `--json` has them whole."""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("memory", help="the MemToolAgent memory: rebuild it from a journal, inspect, search, serve")
    commands = parser.add_subparsers(dest="memory_command", metavar="COMMAND")
    commands.required = True

    p = commands.add_parser("rebuild", help="add every completed episode of a journal to a memory store")
    p.add_argument("journal", type=Path, help="the journal file (or journal set) to learn from")
    p.add_argument("--out", type=Path, help="memory store file (default from config: runs/memory.sqlite)")
    add_config_flag(p)
    p.add_argument("--json", action="store_true", help="JSON lines (docs/json.md)")
    add_episode_filters(p)
    p.set_defaults(handler=_rebuild)

    p = commands.add_parser("stats", help="entries, outcomes and index kind per domain")
    p.add_argument("--store", type=Path, help="memory store file (default from config)")
    add_config_flag(p)
    p.add_argument("--json", action="store_true", help="JSON lines (docs/json.md)")
    p.set_defaults(handler=_stats)

    p = commands.add_parser("search", help="the entries the tool agent would be shown for a request")
    p.add_argument("text", help="the request to find similar entries for")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--k", type=whole_number(1), metavar="N", help="the N most similar entries")
    how.add_argument("--dynamic", action="store_true", help="dynamic n with the config's parameters")
    p.add_argument("--domain", default="", help="search one domain's entries (default: all)")
    p.add_argument("--user", default="", help="also name the tools this user's entries rule out")
    p.add_argument("--store", type=Path, help="memory store file (default from config)")
    add_config_flag(p)
    p.add_argument("--json", action="store_true", help="JSON lines (docs/json.md)")
    p.set_defaults(handler=_search)

    p = commands.add_parser("serve", help="run the memory service against a running NATS server until stopped")
    connection_flags(p, service="memory.json")
    p.add_argument("--store", type=Path, help="memory store file (default from config)")
    p.add_argument("--name", default="memory", help="process name announced to the supervisor")
    p.set_defaults(handler=_serve)


# -- rebuild -----------------------------------------------------------------------------------


def _rebuild(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    chosen = filtered_episodes(args.journal, args, [])

    async def run() -> tuple[RebuildReport, int]:
        with JournalReader(args.journal) as reader:
            async with open_memory(config.memory, args.out) as store:
                return await rebuild(reader, store, episodes=None if chosen is None else set(chosen)), len(store)

    report, total = anyio.run(run)
    if args.json:
        _jsonl.summary(msgspec.to_builtins(report) | {"entries": total})
        return 0
    print(
        f"{report.store}: {report.added} entries added from {report.completed} completed episodes of {report.journal}"
        f" ({report.present} already there, {report.skipped} without an entry);"
        f" reflections: {report.recorded_reflections} journaled, {report.offline_reflections} written offline;"
        f" {total} entries in all ({report.seconds:.2f}s)"
    )
    return 0


# -- stats -------------------------------------------------------------------------------------


def _stats(args: argparse.Namespace) -> int:
    config = load_config(args.config)

    async def run() -> dict[str, Any]:
        async with open_memory(config.memory, args.store, must_exist=True) as store:
            return _stats_data(store)

    data = anyio.run(run)
    if args.json:
        _jsonl.rows("domain", data.pop("domains"))
        _jsonl.summary(data)
        return 0
    console = table_console()
    console.print(
        Text(
            f"memory {data['path']}: {data['entries']} entries, embedder {data['embedder']} (dim {data['dim']})",
            style="bold",
        )
    )
    table = Table(header_style="bold")
    for name, justify in [
        ("domain", "left"),
        ("entries", "right"),
        ("successes", "right"),
        ("failures", "right"),
        ("index", "left"),
    ]:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for row in data["domains"]:
        table.add_row(row["domain"], str(row["entries"]), str(row["successes"]), str(row["failures"]), row["index"])
    console.print(table)
    return 0


def _stats_data(store: MemoryStore) -> dict[str, Any]:
    stats = store.stats()
    outcomes: Counter[tuple[str, int]] = Counter((e.domain, e.feedback) for e in store.entries())
    return {
        "path": stats.path,
        "entries": stats.entries,
        "embedder": stats.embedder,
        "dim": stats.dim,
        "hnsw_threshold": stats.settings.index.hnsw_threshold,
        "domains": [
            {
                "domain": p.domain,
                "entries": p.entries,
                "successes": outcomes[(p.domain, 1)],
                "failures": outcomes[(p.domain, 0)],
                "index": p.index,
            }
            for p in stats.partitions
        ],
    }


# -- search ------------------------------------------------------------------------------------


def _mode(args: argparse.Namespace, config: Config) -> RetrievalMode:
    if args.k is not None:
        return TopK(k=args.k)
    settings = msgspec.to_builtins(config.memory)
    if args.dynamic:
        settings["mode"] = "dynamic"
    return retrieval_mode(settings) or TopK(k=config.memory.k)


def _search(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    mode = _mode(args, config)
    domain = args.domain or None

    async def run() -> tuple[Retrieval, list[str]]:
        async with open_memory(config.memory, args.store, must_exist=True) as store:
            found = await store.retrieve(args.text, mode, domain=domain)
            hidden: set[str] = set()
            if args.user:
                entries = store.entries(domain=domain, user=args.user)
                hidden = hidden_tools(entries, min_zero_ratings=config.memory.zero_ratings)
            return found, sorted(hidden)

    found, hidden = anyio.run(run)
    if args.json:
        data = msgspec.to_builtins(found) | {"hidden_tools": hidden}
        _jsonl.rows("entry", data.pop("entries"))
        _jsonl.summary(data)
        return 0
    console = table_console()
    candidates = f" of {found.candidates} candidates" if found.candidates else ""
    console.print(Text(f"{found.n} entries for {args.text!r} ({found.reason}{candidates})", style="bold"))
    table = Table(header_style="bold")
    for name, justify in [
        ("#", "right"),
        ("score", "right"),
        ("episode", "left"),
        ("outcome", "left"),
        ("request", "left"),
        ("tool calls", "left"),
        ("reflection", "left"),
    ]:
        table.add_column(name, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for i, scored in enumerate(found.entries, start=1):
        entry = scored.entry
        outcome = Text("success", style="green") if entry.feedback else Text("failure", style="red")
        table.add_row(
            str(i),
            f"{scored.score:.3f}",
            f"{entry.domain}/{entry.episode}",
            outcome,
            clip(entry.query, TEXT_WIDTH),
            ", ".join(c.name for c in entry.calls) or "-",
            clip(entry.reflection, TEXT_WIDTH) or "-",
        )
    console.print(table)
    if hidden:
        console.print(Text(f"hidden for user {args.user}: {', '.join(hidden)}", style="yellow"))
    return 0


# -- serve -------------------------------------------------------------------------------------


def _serve(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    url = nats_url(args, config)
    anyio.run(
        serve_memory,
        config,
        url,
        subject_prefix(args, config, url),
        args.name,
        args.store,
        login(args, config, url, operator=False),
    )
    return 0
