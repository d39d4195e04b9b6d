"""Argument types and flags that several commands share, kept apart from the commands' modules so that
a command imports only what it runs (`faultline replay` and `journal verify` load no runner and no bus)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import msgspec

from faultline import _numbers as numbers
from faultline._errors import UsageError
from faultline._numbers import LARGEST
from faultline.envs import use_plugin_path
from faultline.runtime import MAX_SECONDS

if TYPE_CHECKING:
    from faultline.runtime import Config


def whole_number(minimum: int, maximum: int = LARGEST) -> Callable[[str], int]:
    """An argparse type: an integer from `minimum` to `maximum`; every whole-number argument of the CLI takes one,
    so that each mistake reads the same wherever it is made."""
    return argument(lambda text: numbers.whole_number(text, minimum, maximum))


def number(minimum: float = -math.inf, maximum: float = math.inf) -> Callable[[str], float]:
    """An argparse type: a finite number from `minimum` to `maximum`, as `whole_number` is for integers."""
    return argument(lambda text: numbers.number(text, minimum, maximum))


T = TypeVar("T")


def argument(read: Callable[[str], T]) -> Callable[[str], T]:
    """An argparse type that reads its value with `read`, whose ValueError is the one line the user sees."""

    def parse(text: str) -> T:
        try:
            return read(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


rate = number(0.0, 1.0)
"""An argparse type: a probability, from 0 to 1."""
seconds_or_zero = number(0.0, MAX_SECONDS)
"""An argparse type: a number of seconds, 0 for "never" (`--stall-after`)."""


def seconds(text: str) -> float:
    """An argparse type: a finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (math.isfinite(value) and 0.0 < value <= MAX_SECONDS):
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0 and at most {MAX_SECONDS:g}, got {text}")
    return value


def add_plugin_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--plugin-path",
        action="append",
        default=[],
        type=Path,
        metavar="DIR",
        help="a folder to import domains and classes from, for this process and the workers it starts"
        " (repeatable; adds to the config's plugins.path)",
    )


def with_plugin_path(config: Config, folders: list[Path]) -> Config:
    """The config with the `--plugin-path` folders added to `plugins.path`, which are put on the import path."""
    for folder in folders:
        if not folder.is_dir():
            raise UsageError(f"--plugin-path {folder}: no such folder")
    path = (*config.plugins.path, *(str(folder.resolve()) for folder in folders))
    use_plugin_path(path)
    return msgspec.structs.replace(config, plugins=msgspec.structs.replace(config.plugins, path=path))


def add_config_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", type=Path, help="faultline.toml (default: ./faultline.toml if present)")


def connection_flags(parser: argparse.ArgumentParser, *, starts_nats: bool = False, service: str = "") -> None:
    """The flags of every command that talks to a system: where its NATS is, how to connect, its config. `service`:
    the command runs a service with an identity of its own, whose credential file this names."""
    nats_help = (
        "use this NATS server instead of starting one (default: nats.url)"
        if starts_nats
        else "the running system's NATS server (default: nats.url, else the `faultline up` running here)"
    )
    add_config_flag(parser)
    parser.add_argument("--nats", default="", metavar="URL", help=nats_help)
    parser.add_argument(
        "--prefix",
        default="",
        help="subject prefix (default: that of the `faultline up` running here when it is that server, else"
        " [nats] prefix, fl)",
    )
    parser.add_argument(
        "--creds",
        type=Path,
        metavar="FILE",
        help=f"NATS credential of the identity this service speaks as ({service}; `faultline up` and `faultline"
        " credentials` write them), which a system with access control wants (default: nats.credentials; never the"
        " operator's of the `up` running here)"
        if service
        else "NATS credential to connect with (default: nats.credentials, else the operator's of the `up` running"
        " here)",
    )
    parser.add_argument(
        "--tls-ca",
        type=Path,
        metavar="FILE",
        help="speak TLS, trusting the server certificates this CA signed (default: nats.tls_ca, else the `up` here's)",
    )


def otel_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--otel",
        metavar="URL",
        help="send each finished episode as OpenTelemetry traces to this OTLP/HTTP endpoint (e.g. "
        "http://localhost:4318/v1/traces) once its completion is journaled; an endpoint that fails is logged, "
        "never waited for",
    )
    p.add_argument("--otel-header", action="append", default=[], metavar="K=V", help="an HTTP header for --otel")


def otel_headers(items: list[str], flag: str) -> dict[str, str]:
    """KEY=VALUE flags as HTTP headers."""
    headers = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{flag} {item!r}: write KEY=VALUE")
        headers[key.strip()] = value.strip()
    return headers
