"""`faultline view`: a journal as one HTML file to open in a browser, offline, or served live on a local port."""

from __future__ import annotations

import argparse
import signal
import webbrowser
from pathlib import Path

import anyio

from faultline._errors import UsageError
from faultline.cli import _jsonl
from faultline.cli._args import whole_number
from faultline.cli._filters import add_episode_filters, filtered_episodes, require_journal
from faultline.journal import ViewServer, write_view
from faultline.replay import forks_path


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "view",
        help="write one self-contained HTML file showing the journal's episodes as lanes of messages",
        description="The file needs no server and no network: the episode list with filters, and for each "
        "episode one lane per agent, model calls with their prompt and answer, tool calls, faults, the traceback of "
        "a handler that raised, a fork beside its original, and the decisive step of an attribution (read from the "
        "forks journal). Prints its path.",
    )
    p.add_argument("journal", type=Path, help="the journal file (or journal set) to show")
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
    p.add_argument(
        "--serve",
        action="store_true",
        help="serve the page on a local port instead of writing it; open pages update as episodes complete"
        " (they reload when the journal or its forks grow), until Ctrl-C",
    )
    p.add_argument(
        "--port", type=whole_number(0, 65_535), default=0, help="with --serve: the port (default: a free one)"
    )
    p.add_argument("--json", action="store_true", help="one summary object instead of the path")
    add_episode_filters(p)
    p.set_defaults(handler=_view)


def _view(args: argparse.Namespace) -> int:
    require_journal(args.journal)
    if args.forks is not None and not args.forks.is_file():
        raise UsageError(f"--forks {args.forks}: no such journal file")
    chosen = filtered_episodes(args.journal, args, args.episode)
    forks = args.forks or forks_path(args.journal)
    if args.serve:
        return _serve(args, forks)
    out = args.out or args.journal.with_suffix(".html")
    stats = write_view(
        args.journal,
        out,
        episodes=chosen,
        forks=forks,
        open_episode=chosen[0] if args.episode and chosen else "",
    )
    if args.json:
        _jsonl.summary(stats)
    else:
        print(stats.path)
    if args.open:
        webbrowser.open(out.resolve().as_uri())
    return 0


def _serve(args: argparse.Namespace, forks: Path) -> int:
    """Serve the live page until a stop signal; the episodes a filter picks are picked again as the journal grows."""
    if args.out or args.json:
        raise UsageError("--serve writes no file: leave out --out and --json")

    def episodes() -> list[str] | None:
        return filtered_episodes(args.journal, args, args.episode)

    try:
        server = ViewServer(args.journal, forks=forks, episodes=episodes, port=args.port).start()
    except OSError as exc:
        raise UsageError(f"--port {args.port}: cannot serve there ({exc.strerror or exc})") from None
    print(f"serving {args.journal} at {server.url} (updates as episodes complete; Ctrl-C stops)", flush=True)
    if args.open:
        webbrowser.open(server.url)
    try:
        anyio.run(_until_signal)
    finally:
        server.close()
    return 0


async def _until_signal() -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            return
