"""The `faultline` command: one thin layer over the package.

Each command group lives in its own module and registers itself through
`register(subparsers)`. Any FaultlineError becomes one readable line on stderr
and a non-zero exit code; tracebacks are for bugs only.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from faultline._errors import FaultlineError, UsageError
from faultline.runtime.cli import _config, _faults, _fork, _journal, _memory, _replay, _run, _system

_COMMAND_MODULES = [_run, _replay, _fork, _system, _faults, _config, _journal, _memory]


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of printing usage and exiting."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="faultline",
        description="Event-sourced runtime for LLM multi-agent systems: run, journal, replay, inject faults.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for module in _COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        return int(args.handler(args) or 0)
    except UsageError as exc:
        print(f"faultline: usage error: {exc}", file=sys.stderr)
        return 2
    except FaultlineError as exc:
        print(f"faultline: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("faultline: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
