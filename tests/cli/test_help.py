"""`faultline COMMAND --help` says what every option and argument is for: one without a help text shows only its
name, which a user cannot act on (`--seed SEED`, `journal`)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from faultline.cli import build_parser


def _unexplained(parser: argparse.ArgumentParser, command: str) -> Iterator[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _unexplained(sub, f"{command} {name}")
        elif action.help is None:
            yield f"{command} {'/'.join(action.option_strings) or action.dest}"


def test_every_option_and_argument_of_every_command_has_a_help_text() -> None:
    assert list(_unexplained(build_parser(), "faultline")) == []
