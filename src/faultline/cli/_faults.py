"""`faultline inject`, `faultline faults list` and `faultline faults clear`: fault rules on a live system.

These commands (and `faultline run --fault`) are the only ones that publish on
`fl.ctl.>`. With NATS accounts, give that right to an operator user only; see
docs/faults.md.
"""

from __future__ import annotations

import argparse
import os
import time
import typing
from typing import Any

import msgspec
from rich.table import Table

from faultline import _numbers as numbers
from faultline._errors import FaultRuleError, PluginError, SubscribeRefusedError, UsageError
from faultline.bus import Bus, publish_controls, read_rules
from faultline.cli import _jsonl
from faultline.cli._args import argument, connection_flags, rate, whole_number
from faultline.cli._connect import config_of, nats_url, run_on_system, up_workers
from faultline.cli._text import table_console
from faultline.core import Envelope
from faultline.faults import (
    FaultRule,
    RuleSet,
    add_rule_control,
    check_agents,
    clear_rules_control,
    fault_type,
    fault_types,
    remove_rule_control,
    why_not_on,
)
from faultline.runtime import (
    Config,
    follow_settings,
    make_rule,
    parse_duration,
    system_agents,
    system_of,
    worker_statuses,
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "inject",
        help="put a fault rule in force on a running system (see `faultline inject TYPE -h`)",
        description="Publish a fault rule on fl.ctl.faults; every worker applies it within milliseconds.",
    )
    types = p.add_subparsers(dest="fault", metavar="TYPE", parser_class=type(p))
    types.required = True
    for name, kind in sorted(fault_types().items()):
        t = types.add_parser(name, help=kind.summary, description=kind.summary)
        connection_flags(t)
        _match_flags(t)
        _param_flags(t, kind.Params)
        t.set_defaults(handler=_inject, params_of=kind.Params)

    p = sub.add_parser("faults", help="the fault rules in force on a running system")
    commands = p.add_subparsers(dest="faults_command", metavar="COMMAND", parser_class=type(p))
    commands.required = True
    listing = commands.add_parser("list", help="the rules in force, with how often each was applied")
    connection_flags(listing)
    listing.add_argument("--json", action="store_true", help="JSON lines (docs/json.md)")
    listing.set_defaults(handler=_list)
    clear = commands.add_parser("clear", help="remove one rule, or every rule")
    connection_flags(clear)
    clear.add_argument("id", nargs="?", default="", help="the rule to remove (default: all)")
    clear.add_argument("--json", action="store_true", help="JSON lines (docs/json.md)")
    clear.set_defaults(handler=_clear)


def _match_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--to", default="", metavar="AGENT", help="messages to this agent (a pattern: tool, he*)")
    p.add_argument("--from", dest="sender", default="", metavar="AGENT", help="messages from this agent")
    p.add_argument("--kind", default="", help="messages of this kind (user_turn, tool_call, ...)")
    p.add_argument("--topic", default="", help="messages on this topic")
    p.add_argument("--episode", default="", metavar="E", help="messages of these episodes (a pattern: r12-*)")
    p.add_argument("--probability", type=rate, default=1.0, metavar="P", help="chance per message (default 1)")
    p.add_argument(
        "--budget", type=whole_number(0), default=0, metavar="N", help="apply at most N times (default: no limit)"
    )
    p.add_argument("--for", dest="duration", default="", metavar="DURATION", help="expire after this long (30s, 5m)")
    p.add_argument("--id", default="", help="the rule's id (default: a new one)")
    p.add_argument("--json", action="store_true", help="print the rule and the confirmation as JSON")


def _param_flags(p: argparse.ArgumentParser, params: type[msgspec.Struct]) -> None:
    """One `--name` option per field of the fault type's parameters."""
    for f in msgspec.structs.fields(params):
        hint = typing.get_args(f.type)[0] if typing.get_origin(f.type) is typing.Annotated else f.type
        default = f.default_factory() if f.default is msgspec.NODEFAULT else f.default
        flag, dest, shown = "--" + f.name.replace("_", "-"), f"param_{f.name}", f"default {default!r}"
        if typing.get_origin(hint) is typing.Literal:
            p.add_argument(flag, dest=dest, choices=typing.get_args(hint), default=None, help=shown)
        elif typing.get_origin(hint) is list:
            p.add_argument(flag, dest=dest, default=None, metavar="A,B", help=f"comma-separated; {shown}")
        else:
            read = numbers.reader(f.type)  # a number as every numeric argument of the CLI reads one
            parse = argument(read) if read is not None else hint
            p.add_argument(flag, dest=dest, type=parse, default=None, metavar=f.name.upper(), help=shown)


def _params(args: argparse.Namespace) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for f in msgspec.structs.fields(args.params_of):
        value = getattr(args, f"param_{f.name}")
        if value is None:
            continue
        hint = typing.get_args(f.type)[0] if typing.get_origin(f.type) is typing.Annotated else f.type
        is_list = typing.get_origin(hint) is list
        params[f.name] = [v.strip() for v in value.split(",") if v.strip()] if is_list else value
    return params


def _confirmation(result: dict[str, Any]) -> str:
    if not result["workers"]:
        return "no worker answered; running workers pick it up when they start"
    return f"taken in by {result['confirmed']}/{result['workers']} worker(s) within {result['seconds'] * 1000:.0f} ms"


def _inject(args: argparse.Namespace) -> int:
    rule = make_rule(
        args.fault,
        match={"to": args.to, "from": args.sender, "kind": args.kind, "topic": args.topic, "episode": args.episode},
        params=_params(args),
        probability=args.probability,
        budget=args.budget,
        duration_s=parse_duration(args.duration) if args.duration else 0.0,
        rule_id=args.id,
    )
    config = config_of(args)
    _check_applies(args.fault, config)
    if fault_type(rule.fault).mechanism == "prompt":  # its workers would take it in, and it would change nothing
        raise UsageError(
            f"{rule.fault} is a prompt fault: it rewrites the first message of the episodes a run starts, so it"
            " applies through `faultline run --fault` (and campaigns), not through inject on a running system"
        )
    settings = follow_settings(config)
    expected, _ = up_workers(nats_url(args, config))

    async def body(bus: Bus) -> dict[str, Any]:
        agents = await _running_agents(bus, expected)
        if agents:  # else no worker told what it runs: nothing to check the rule against
            check_agents(rule, agents)
        return await publish_controls(bus, [add_rule_control(rule, _nonce())], settings=settings)

    result = run_on_system(args, body)
    if args.json:
        _jsonl.row("rule", rule)
        _jsonl.summary(result)
    else:
        print(f"rule {rule.id}: {_describe(rule)}; {_confirmation(result)}")
    return 0


def _check_applies(fault: str, config: Config) -> None:
    """FaultRuleError, as `run --fault` gives, for a fault that cannot apply to the configuration's system of one's
    own: its workers would take the rule in and it would change nothing. Where the system's code is not installed
    the check is left to that: nothing here can tell."""
    try:
        system = system_of(config)
    except PluginError:
        return
    why = why_not_on(fault, system.system) if system.is_user_system else ""
    if why:
        raise FaultRuleError(f"fault {fault!r}: {why}")


async def _running_agents(bus: Bus, expected: list[str]) -> set[str]:
    """The agents of the system running on `bus` (`system_agents`), as its workers tell them: at once when the
    `expected` ones (the workers of the `faultline up` here) have told, else after the status window. None (an empty
    set) where this credential may not hear the workers."""
    try:
        return system_agents(await worker_statuses(bus, expected=expected))
    except SubscribeRefusedError:
        return set()


def _nonce() -> str:
    return os.urandom(8).hex()


def _describe(rule: FaultRule) -> str:
    params = " ".join(f"{k}={v}" for k, v in rule.params.items())
    text = f"{rule.fault}{' ' + params if params else ''} on {rule.matches()}"
    if rule.probability < 1.0:
        text += f", p={rule.probability:g}"
    if rule.budget:
        text += f", budget {rule.budget}"
    if rule.expires_at:
        text += f", for {max(rule.expires_at - time.time(), 0):.0f}s"
    return text


def _list(args: argparse.Namespace) -> int:
    async def body(bus: Bus) -> RuleSet:
        return await read_rules(bus, follow_settings(config_of(args)))

    rules = run_on_system(args, body)
    now = time.time()
    rows = [
        {
            **msgspec.to_builtins(rule),
            "applied": rules.seen.get(rule.id, 0),
            "expired": bool(rule.expires_at and now >= rule.expires_at),
        }
        for rule in rules.rules
    ]
    if args.json:
        _jsonl.rows("rule", rows)
        _jsonl.summary({"rules": len(rows), "applied": sum(r["applied"] for r in rows)})
        return 0
    table = Table(title=f"{len(rows)} fault rule(s)")
    for column in ("id", "fault", "match", "params", "p", "applied", "budget", "expires"):
        table.add_column(column)
    for rule, row in zip(rules.rules, rows, strict=True):
        expires = "-" if not rule.expires_at else ("expired" if row["expired"] else f"in {rule.expires_at - now:.0f}s")
        table.add_row(
            rule.id, rule.fault, rule.matches(), " ".join(f"{k}={v}" for k, v in rule.params.items()) or "-",
            f"{rule.probability:g}", str(row["applied"]), str(rule.budget or "-"), expires,
        )  # fmt: skip
    table_console().print(table)
    return 0


def _clear(args: argparse.Namespace) -> int:
    control: Envelope = remove_rule_control(args.id, _nonce()) if args.id else clear_rules_control(_nonce())
    settings = follow_settings(config_of(args))

    async def body(bus: Bus) -> tuple[bool, dict[str, Any]]:
        known = not args.id or any(r.id == args.id for r in (await read_rules(bus, settings)).rules)
        return known, await publish_controls(bus, [control], settings=settings) if known else {}

    known, result = run_on_system(args, body)
    if not known:
        raise UsageError(f"no rule {args.id!r} is in force (see `faultline faults list`)")
    if args.json:
        _jsonl.summary({"removed": args.id or "*", **result})
    else:
        print(f"{'rule ' + args.id + ' removed' if args.id else 'every rule removed'}; {_confirmation(result)}")
    return 0
