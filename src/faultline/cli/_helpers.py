"""`faultline helpers set|list|clear`: the live roster of FAMA helpers on a running system.

Like `faultline inject`, these publish on `fl.ctl.>` (here `fl.ctl.helpers`), which
only the operator's credential may. Episodes started after a change take the new
roster; running episodes keep theirs, and `faultline up` keeps serving their
helpers until they complete.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table

from faultline._errors import ConfigError, UsageError
from faultline.bus import Bus
from faultline.cli import _jsonl
from faultline.cli._args import connection_flags
from faultline.cli._connect import config_of, run_on_system
from faultline.cli._text import table_console
from faultline.core import parse_roster
from faultline.envs import load_domain
from faultline.runtime import PoolState, helpers_served, publish_roster, read_rosters, roster_control

ASK_TIMEOUT_S = 1.0
"""How long `helpers list` waits for a running system to say which helpers it serves."""


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("helpers", help="the FAMA helper roster of a running system (set, list, clear)")
    commands = p.add_subparsers(dest="helpers_command", metavar="COMMAND", parser_class=type(p))
    commands.required = True

    s = commands.add_parser("set", help="the helpers new episodes of a domain take", description=__doc__)
    connection_flags(s)
    s.add_argument("domain", help="retail, phone, or package.module:Class")
    s.add_argument("helpers", help="dce,tsa,tor,planner,verifier,memory:K (comma-separated), or none")
    s.add_argument("--model", default="", metavar="NAME", help="only for episodes whose tool agent uses this model")
    s.add_argument("--json", action="store_true", help="JSON lines (docs/json.md)")
    s.set_defaults(handler=_set)

    listing = commands.add_parser("list", help="the rosters in force, and the helpers the system runs now")
    connection_flags(listing)
    listing.add_argument("--json", action="store_true", help="JSON lines (docs/json.md)")
    listing.set_defaults(handler=_list)

    clear = commands.add_parser("clear", help="remove the roster of one domain, or every roster")
    connection_flags(clear)
    clear.add_argument("domain", nargs="?", default="", help="the domain (default: all)")
    clear.add_argument("--json", action="store_true", help="JSON lines (docs/json.md)")
    clear.set_defaults(handler=_clear)


def _set(args: argparse.Namespace) -> int:
    try:
        roster = parse_roster(args.helpers)
    except ConfigError as exc:
        raise UsageError(f"helpers set: {exc}") from None
    load_domain(args.domain)  # an unknown domain is one line, before anything is published
    control = roster_control("set", domain=args.domain, model=args.model, helpers=roster)
    return _publish(args, control, f"{args.domain} ({args.model or 'any model'}): {', '.join(roster) or 'no helpers'}")


def _clear(args: argparse.Namespace) -> int:
    if args.domain:
        load_domain(args.domain)  # as `set`: a domain that is not one is one line, before anything is published
    control = roster_control("clear", domain=args.domain)
    return _publish(args, control, f"roster of {args.domain} cleared" if args.domain else "every roster cleared")


def _publish(args: argparse.Namespace, control: Any, what: str) -> int:
    timeout_s = config_of(args).helpers.confirm_timeout_s

    async def body(bus: Bus) -> tuple[PoolState | None, float]:
        return await publish_roster(bus, control, timeout_s)

    taken, seconds = run_on_system(args, body)
    if args.json:
        _jsonl.summary({"control": control.id, "taken": taken, "seconds": seconds})
    elif taken is None:
        print(f"{what}; no running `faultline up` answered within {timeout_s:g}s: episodes started from now take it")
    else:
        served = ", ".join(taken.served) or "none"
        print(f"{what}; helpers served now: {served} (taken in within {seconds * 1000:.0f} ms)")
    return 0


def _list(args: argparse.Namespace) -> int:
    async def body(bus: Bus) -> tuple[dict[str, dict[str, list[str]]], list[str] | None]:
        return (await read_rosters(bus)).domains, await helpers_served(bus, ASK_TIMEOUT_S)

    domains, served = run_on_system(args, body)
    if args.json:
        for domain, models in sorted(domains.items()):
            for model, roster in sorted(models.items()):
                _jsonl.row("roster", {"domain": domain, "model": model, "helpers": roster})
        _jsonl.summary({"rosters": domains, "served": served})
        return 0
    table = Table(title=f"helper rosters ({sum(len(m) for m in domains.values())})")
    for column in ("domain", "model", "helpers"):
        table.add_column(column)
    for domain, models in sorted(domains.items()):
        for model, roster in sorted(models.items()):
            table.add_row(domain, "any" if model == "*" else model, ", ".join(roster) or "none")
    table_console().print(table)
    running = "no running `faultline up` answered" if served is None else (", ".join(served) or "none")
    print(f"helpers served now: {running}")
    return 0
