"""The `faultline` command: one thin layer over the package.

Each command group lives in its own module and registers itself through
`register(subparsers)`. Only the module of the command being run is imported
(all of them for the top-level help), so a worker process does not load FAISS
or SQLite tooling it never uses. Any FaultlineError becomes one readable line
on stderr and a non-zero exit code; tracebacks are for bugs only.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import os
import re
import sys
from collections.abc import Sequence

import faultline
from faultline._errors import FaultlineError, UsageError
from faultline._logging import ENV_LEVEL, configure, resolve_level

_COMMANDS = {
    "run": "_run",
    "campaign": "_campaign",
    "report": "_report",
    "replay": "_replay",
    "fork": "_fork",
    "attribute": "_fork",
    "diff": "_diff",
    "compare": "_compare",
    "view": "_view",
    "up": "_system",
    "worker": "_system",
    "status": "_system",
    "credentials": "_system",
    "inject": "_faults",
    "faults": "_faults",
    "helpers": "_helpers",
    "fama": "_fama",
    "config": "_config",
    "doctor": "_doctor",
    "journal": "_journal",
    "memory": "_memory",
}
"""Each command and the module that registers it, in the order the help lists them."""

_VERSION_FLAGS = ("-V", "--version")


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of printing usage and exiting."""

    def error(self, message: str) -> None:  # type: ignore[override]
        command = self.prog.removeprefix("faultline").strip()
        message = _with_suggestion(message)
        raise UsageError(f"{command}: {message}" if command else message)


_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)$")


def _with_suggestion(message: str) -> str:
    """argparse's invalid-choice message, with the closest choice named first (`replya`: did you mean `replay`?)."""
    match = _INVALID_CHOICE.search(message)
    if match is None:
        return message
    choices = re.findall(r"'([^']*)'", match.group(2))
    close = difflib.get_close_matches(match.group(1), choices, n=1)
    if not close:
        return message
    return f"{message[: match.start()]}invalid choice: {match.group(1)!r}: did you mean {close[0]!r}? (choose from {match.group(2)})"


class _Version(argparse.Action):
    """`--version`, which reads the installed version only when asked: every command would pay for the lookup."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object, option: str | None = None
    ) -> None:
        print(f"{parser.prog} {faultline.__version__}")
        parser.exit()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser with `command`'s module registered, or every module when it is not a known command."""
    parser = _Parser(
        prog="faultline",
        description="Event-sourced runtime for LLM multi-agent systems: run, journal, replay, inject faults.",
    )
    parser.add_argument(*_VERSION_FLAGS, action=_Version, help="print the installed version and exit")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="log more (-v: INFO, -vv: DEBUG); logs go to stderr"
    )
    parser.add_argument(
        "--log-level",
        metavar="LEVEL",
        help=f"DEBUG, INFO, WARNING (default) or ERROR; also ${ENV_LEVEL}, which child processes inherit",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    if command in _COMMANDS:
        modules = [_COMMANDS[command]]
    elif command in _VERSION_FLAGS:
        modules = []  # argparse prints the version and exits before it looks for a command
    else:
        modules = list(dict.fromkeys(_COMMANDS.values()))
    for name in modules:
        importlib.import_module(f"faultline.cli.{name}").register(sub)
    return parser


def _configure_logging(args: argparse.Namespace) -> None:
    """The level from the flags, exported so that every process this one starts logs alike."""
    level = args.log_level or {0: None, 1: "INFO"}.get(args.verbose, "DEBUG")
    try:
        configure(level)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if level is not None:
        os.environ[ENV_LEVEL] = logging.getLevelName(resolve_level(level))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv[0] if argv else None)
    try:
        args = parser.parse_args(argv)
        _configure_logging(args)
        return int(args.handler(args) or 0)
    except (FaultlineError, BaseExceptionGroup) as exc:
        failure = exc if isinstance(exc, FaultlineError) else _ours(exc)
        if failure is None:
            raise
        if isinstance(failure, UsageError):
            print(f"faultline: usage error: {failure}", file=sys.stderr)
            return 2
        print(f"faultline: error: {failure}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("faultline: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of stdout went away (`| head`): stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # a file the user named that cannot be written or read: theirs to fix, in one line
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"faultline: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 1


def _ours(group: BaseExceptionGroup[BaseException]) -> FaultlineError | None:
    """The error to report of a failure raised through task groups (a service that could not start):
    the first of its errors when all are ours, else None (a bug: its traceback is shown)."""
    ours, others = group.split(FaultlineError)
    if ours is None or others is not None:
        return None
    first: BaseException = ours
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    return first if isinstance(first, FaultlineError) else None


if __name__ == "__main__":
    sys.exit(main())
