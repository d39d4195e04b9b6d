"""How a command reaches a running system: its configuration, NATS URL, subject prefix and credential.

Each comes from the command's flags first. The URL and the credential then come from faultline.toml, else
from what the `faultline up` running in this folder wrote of itself in STATE_FILE; the subject prefix comes
from that `up` when the URL is its server (it knows the prefix its system runs under), else from
faultline.toml. Every command that talks to a running system resolves them here,
so that they all find the same system in the same way.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import anyio

from faultline._errors import UsageError
from faultline.bus import Bus, Login, load_credential
from faultline.runtime import Config, connect, load_config

STATE_FILE = Path(".faultline/up.json")
"""What `faultline up` writes of itself while it runs (url, prefix, pid, credentials, tls_ca, journal, and its
workers' names, comma-separated)."""
T = TypeVar("T")


def config_of(args: argparse.Namespace) -> Config:
    """The configuration `--config` names, else ./faultline.toml, else the defaults."""
    return load_config(args.config)


def running_up() -> dict[str, str]:
    """What the `faultline up` running in this folder wrote of itself, or {} when none runs here (no state file,
    one that is not what `up` writes, or its process is gone)."""
    try:
        state = json.loads(STATE_FILE.read_text())
        os.kill(int(state["pid"]), 0)
    except (OSError, ValueError, KeyError, TypeError, OverflowError, RecursionError):
        return {}
    return {key: str(value) for key, value in state.items()}


def running_url() -> str:
    """The URL of the `faultline up` running in this folder, "" when none runs here."""
    return running_up().get("url", "")


def _up_at(url: str) -> dict[str, str]:
    """What the `faultline up` running here wrote of itself when `url` is its server, else {}."""
    up = running_up() if url else {}
    return up if up.get("url") == url else {}


def up_workers(url: str) -> tuple[list[str], Path | None]:
    """The names of the workers the `faultline up` running here runs when `url` is its server (else none), and
    the folder of their logs."""
    up = _up_at(url)
    journal = up.get("journal", "")
    return [name for name in up.get("workers", "").split(",") if name], Path(
        journal
    ).parent / "logs" if journal else None


def nats_url(args: argparse.Namespace, config: Config) -> str:
    """The running system's NATS: --nats, else `[nats] url`, else the `faultline up` running in this folder."""
    url = args.nats or config.nats.url or running_url()
    if not url:
        raise UsageError(
            "no NATS server given: pass --nats URL or set nats.url in faultline.toml (no `faultline up` is running here)"
        )
    return url


def subject_prefix(args: argparse.Namespace, config: Config, url: str = "") -> str:
    """--prefix, else that of the `faultline up` running here when `url` is its server, else `[nats] prefix`."""
    return args.prefix or _up_at(url).get("prefix", "") or config.nats.prefix


def login(args: argparse.Namespace, config: Config, url: str = "", *, operator: bool = True) -> Login:
    """How a command connects: its flags (--creds, --tls-ca), else the `[nats]` keys, else what the `faultline up`
    running here wrote when `url` is its server: its CA, and its operator's credential for a command that speaks
    as the operator. A service started by hand (`operator` false: a worker, a journal, memory or FAMA service)
    speaks as an identity of its own, so it never takes the operator's."""
    up = _up_at(url)
    if not operator:
        up.pop("credentials", None)

    def file(flag: Path | None, key: str) -> Path | None:
        value = flag or getattr(config.nats, key) or up.get(key, "")
        return Path(value) if value else None

    creds = file(args.creds, "credentials")
    return Login(load_credential(creds) if creds else None, file(args.tls_ca, "tls_ca"))


def run_on_system(args: argparse.Namespace, body: Callable[[Bus], Awaitable[T]]) -> T:
    """`body` run on a connection to the running system that the flags name, as the operator's commands connect."""
    config = config_of(args)
    url = nats_url(args, config)
    prefix = subject_prefix(args, config, url)
    connect_as = login(args, config, url)

    async def main() -> T:
        bus = await connect(config, url, prefix=prefix, name="faultline-operator", login=connect_as)
        try:
            return await body(bus)
        finally:
            await bus.close()

    return anyio.run(main)
