"""Faults and defenses in the runtime: a worker's interceptors, and the command-line forms of both.

A worker process installs a `DefenseInterceptor` (from `[defenses]`) and a
`FaultInterceptor` on its bus, loads the fault rules in force, and follows
`fl.ctl.faults` for as long as it runs. The tool-call faults that need the
task (its tools, its ground-truth calls) learn it from the episode's Start data
through `DomainCatalog`.
"""

from __future__ import annotations

import difflib
import functools
import os
import re
import time
import typing
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import msgspec

from faultline import _numbers as numbers
from faultline._errors import BusError, FaultlineError, FaultRuleError, UsageError
from faultline.bus import Bus, FollowSettings, WorkerId, follow_rules, publish_controls
from faultline.core import (
    ALL_AGENTS,
    Control,
    Envelope,
    ModelBackend,
    ModelCall,
    Recording,
    RequestFault,
    Services,
)
from faultline.envs import DomainCatalog
from faultline.faults import (
    DefenseInterceptor,
    DefenseSettings,
    FaultInterceptor,
    FaultRule,
    Injector,
    RuleSet,
    add_rule_control,
    check_defenses,
    context_injector,
    fault_type,
    remove_rule_control,
)
from faultline.runtime._config import Config, DefensesConfig
from faultline.runtime._episodes import recorded_run


def defense_settings(config: DefensesConfig) -> DefenseSettings:
    return DefenseSettings(
        max_hops=config.max_hops,
        echo=config.echo,
        rate_limit=config.rate_limit,
        rate_window_hops=config.rate_window_hops,
    )


def follow_settings(config: Config) -> FollowSettings:
    f = config.faults
    return FollowSettings(load_timeout_s=f.load_timeout_s, confirm_timeout_s=f.confirm_timeout_s)


@asynccontextmanager
async def faults_and_defenses(
    bus: Bus, config: Config, agents: Sequence[str], name: str
) -> AsyncIterator[FaultInterceptor]:
    """Install a worker's defenses and fault interceptor on `bus` and follow the rules until the block ends.

    The caller gives the interceptor its `injector` (`injector_for`) once the worker exists."""
    d = config.defenses
    per_agent: dict[str, Sequence[str]] = {ALL_AGENTS: d.enabled, **d.agents}
    if any(per_agent.values()):
        bus.interceptors.add(DefenseInterceptor(per_agent, defense_settings(d)))
    faults = FaultInterceptor(
        RuleSet(), agents=agents, catalog=DomainCatalog(), runs=functools.partial(recorded_run, bus)
    )
    bus.interceptors.add(faults)
    async with follow_rules(bus, faults.rules, name=name, settings=follow_settings(config)):
        yield faults


def injector_for(
    bus: Bus, services: Services, recorded: Callable[[Envelope], Mapping[int, Recording]] | None = None
) -> Injector:
    """The fault-injector model of a worker: a call made in the context of the agent that sent the
    faulted message, caused by that message, so its recording is journaled with the agent's own
    (replay, which compares the agent with the original message, never asks it again).

    `recorded` gives the recordings a worker before this one made for that cause (`Worker.recorded_for`):
    after a crash between the injector's answer and the faulted message, the answer is served, not asked again."""
    return context_injector(services, bus.publish, recorded)


def request_faults(bus: Bus, faults: FaultInterceptor) -> RequestFault:
    """The fault rules of a worker on its agents' own model requests: a faulted request goes
    out, its fault event (original and faulted messages) is published before the call."""
    return faults.request_fault(bus.publish)


@dataclass
class EntryModels:
    """The model backends of the process that starts episodes, for its fault injector (`Services`)."""

    backends: Callable[[str], ModelBackend]
    model_calls: set[ModelCall] = field(default_factory=set)
    made: dict[str, ModelBackend] = field(default_factory=dict)

    def backend_for(self, role: str) -> ModelBackend:
        if role not in self.made:
            self.made[role] = self.backends(role)
        return self.made[role]

    async def request(self, service: str, payload: bytes, timeout_s: float) -> bytes:
        raise FaultlineError("the entry point's fault injector calls no services")

    async def aclose(self) -> None:
        for backend in self.made.values():
            await backend.aclose()


@asynccontextmanager
async def rules_in_force(
    bus: Bus,
    rules: Sequence[FaultRule],
    *,
    workers: Collection[WorkerId] | None,
    settings: FollowSettings,
    models: Callable[[str], ModelBackend] | None = None,
) -> AsyncIterator[None]:
    """Put `rules` in force for the length of the block (confirmed by the workers), then remove them.

    Prompt faults act at the entry point: on the Starts this bus publishes (`entry_faults`); those
    the injector model rewrites ask it through `models` (the backend per role), recorded on the bus."""
    if not rules:
        yield
        return
    adds = [add_rule_control(r, os.urandom(8).hex()) for r in rules]
    entry = entry_faults([add for add, r in zip(adds, rules, strict=True) if fault_type(r.fault).mechanism == "prompt"])
    entry_models = EntryModels(models) if models is not None else None
    if entry is not None:
        if entry_models is not None:
            entry.injector = injector_for(bus, entry_models)
        bus.interceptors.add(entry)
    try:
        result = await publish_controls(bus, adds, workers=workers, settings=settings)
        if result["missing"]:
            raise BusError(
                f"{len(result['missing'])} of {len(workers or ())} workers did not confirm the fault rules within"
                f" {settings.confirm_timeout_s}s: {', '.join(result['missing'])}"
            )
        yield
    finally:
        if entry is not None:
            bus.interceptors.remove(entry)
        removes = [remove_rule_control(r.id, os.urandom(8).hex()) for r in rules]
        with anyio.CancelScope(shield=True):
            await publish_controls(bus, removes, workers=(), settings=settings)
            if entry_models is not None:
                await entry_models.aclose()


def entry_faults(adds: Sequence[Envelope]) -> FaultInterceptor | None:
    """The fault interceptor of the process that starts episodes, holding the prompt-fault rules
    of `adds` (their add controls): it rewrites the Start each agent gets. None without such rules."""
    if not adds:
        return None
    rules = RuleSet()
    for add in adds:
        assert isinstance(add.body, Control)
        rules.control(add.body)
    return FaultInterceptor(rules, catalog=DomainCatalog())


def scoped_to_run(rule: FaultRule, run_id: str) -> FaultRule:
    """A rule of `run --fault` matches that run's episodes only, unless it names episodes itself: those whose start
    records the run (`FaultRule.run`), since another run's ids may begin as its own do. Its episode pattern
    `<run>-*` keeps the rule off every other episode at no cost, and is what a worker without `FaultRule.run` reads."""
    return rule if rule.episode else msgspec.structs.replace(rule, episode=f"{run_id}-*", run=run_id)


# -- command-line forms ----------------------------------------------------------------------------


def apply_defense_flags(config: Config, flags: Sequence[str]) -> Config:
    """`--defense` values on top of `[defenses]`: `dedup,cycle` for every agent, `user=cycle` for one,
    `none` (or `user=none`) to switch them off."""
    if not flags:
        return config
    enabled = config.defenses.enabled
    agents = dict(config.defenses.agents)
    for flag in flags:
        agent, _, names = flag.rpartition("=")
        wanted = () if names.strip() == "none" else tuple(n.strip() for n in names.split(",") if n.strip())
        try:
            wanted = check_defenses(wanted)
        except FaultlineError as exc:
            raise UsageError(f"--defense {flag!r}: {exc}") from None
        if agent:
            agents[agent] = wanted
        else:
            enabled = wanted
    defenses = msgspec.structs.replace(config.defenses, enabled=enabled, agents=agents)
    return msgspec.structs.replace(config, defenses=defenses)


_MATCH_KEYS = {"to": "recipient", "from": "sender", "kind": "kind", "episode": "episode", "topic": "topic"}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")


def parse_duration(text: str) -> float:
    """Seconds from `30s`, `500ms`, `2m`, `1h` or a plain number of seconds."""
    m = _DURATION.match(text.strip())
    if not m:
        raise UsageError(f"duration {text!r}: use a number with ms, s, m or h, e.g. 30s")
    return float(m.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}[m.group(2)]


def new_rule_id() -> str:
    return f"f-{os.urandom(4).hex()}"


def make_rule(
    fault: str,
    *,
    match: Mapping[str, str] | None = None,
    params: Mapping[str, Any] | None = None,
    probability: float = 1.0,
    budget: int = 0,
    duration_s: float = 0.0,
    rule_id: str = "",
    named: str = "",
) -> FaultRule:
    """A validated rule; `match` uses the command-line names (to, from, kind, episode, topic). A wrong one is a
    UsageError naming the rule `named`, as its user wrote it (default: its fault type)."""
    now = time.time()
    fields: dict[str, Any] = {_MATCH_KEYS[k]: v for k, v in (match or {}).items() if v}
    try:
        return FaultRule(
            id=rule_id or new_rule_id(),
            fault=fault,
            params=dict(params or {}),
            probability=probability,
            budget=budget,
            expires_at=now + duration_s if duration_s else 0.0,
            created_at=now,
            **fields,
        ).validated(named)
    except FaultRuleError as exc:
        raise UsageError(str(exc)) from None


def parse_fault_spec(spec: str) -> FaultRule:
    """A rule from `TYPE[:key=value,...]`: match keys (to, from, kind, episode, topic), `probability`,
    `budget`, `for` (a duration), `id`, and the fault type's own parameters (a list value joins items with `+`)."""
    fault, _, rest = spec.partition(":")
    match: dict[str, str] = {}
    params: dict[str, Any] = {}
    options: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--fault {spec!r}: {item!r} is not key=value")
        if key in _MATCH_KEYS:
            match[key] = value
        elif key in ("probability", "budget", "for", "id"):
            options[key] = value
        else:
            params[key] = value.split("+") if _is_list_param(fault, key) else value
    _check_param_keys(spec, fault, params)
    probability = _option(spec, options, "probability", lambda text: numbers.number(text, 0.0, 1.0), 1.0)
    budget = _option(spec, options, "budget", lambda text: numbers.whole_number(text, 0), 0)
    duration = parse_duration(options["for"]) if "for" in options else 0.0
    return make_rule(
        fault, match=match, params=params, probability=probability, budget=budget, duration_s=duration,
        rule_id=options.get("id", ""), named=f"--fault {spec!r}",
    )  # fmt: skip


T = TypeVar("T")


def _option(spec: str, options: Mapping[str, str], key: str, read: Callable[[str], T], default: T) -> T:
    """Option `key` of a `--fault` spec read with `read` (as the CLI reads its numeric flags), else `default`."""
    if key not in options:
        return default
    try:
        return read(options[key])
    except ValueError as exc:
        raise UsageError(f"--fault {spec!r}: {key}: {exc}") from None


def _check_param_keys(spec: str, fault: str, params: Mapping[str, Any]) -> None:
    """A UsageError naming every key a rule of `fault` takes, where `params` holds one it does not (a misspelt
    `from` reads as a parameter); an unknown fault type is left to `make_rule`, which names the known ones."""
    try:
        own = [f.name for f in msgspec.structs.fields(fault_type(fault).Params)]
    except FaultRuleError:
        return
    unknown = next((key for key in params if key not in own), None)
    if unknown is not None:
        keys = [*_MATCH_KEYS, "probability", "budget", "for", "id"]
        close = difflib.get_close_matches(unknown, [*keys, *own], n=1)
        meant = f" (did you mean {close[0]!r}?)" if close else ""
        of_type = f"; {fault}'s own: {', '.join(own)}" if own else f"; {fault} has no parameters of its own"
        raise UsageError(f"--fault {spec!r}: unknown key {unknown!r}{meant}; a rule takes {', '.join(keys)}{of_type}")


def _is_list_param(fault: str, key: str) -> bool:
    try:
        params = fault_type(fault).Params
    except FaultRuleError:
        return False
    for f in msgspec.structs.fields(params):
        if f.name == key:
            hint = typing.get_args(f.type)[0] if typing.get_origin(f.type) is typing.Annotated else f.type
            return typing.get_origin(hint) is list
    return False
