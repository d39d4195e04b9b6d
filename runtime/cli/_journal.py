"""`faultline journal ...`: verify, tail, show and export a journal file."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("journal", help="inspect a journal file")
    parser.set_defaults(handler=lambda args: parser.print_help())
