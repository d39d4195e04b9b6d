"""Which faults are in force: the rule set a worker rebuilds from the `fl.ctl.faults` controls
it reads from the stream and then follows live, the control envelopes that add, remove and
clear rules, the seeded draw that decides whether a rule faults a given message, and the
check that the agents a rule names are those of the system it is for.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import msgspec

from faultline._errors import FaultRuleError
from faultline.core import CONTROL_EPISODE, OPERATOR, RUNNER, Control, Envelope, FaultApplied, body_kind
from faultline.faults._registry import MATCH_FIELDS, FaultRule, FaultType, fault_type

FAULTS_CONTROL = "faults"
"""The control name of fault rules: they travel on `fl.ctl.faults`."""
MATCH_CACHE_SIZE = 4096
"""How many (episode, sender, recipient, kind, topic) combinations keep their matching rules cached."""


def _pattern(text: str) -> Callable[[str], bool] | None:
    if not text:
        return None
    if not any(c in text for c in "*?["):
        return text.__eq__
    return re.compile(fnmatch.translate(text)).match  # type: ignore[return-value]


@dataclass
class ActiveRule:
    """A rule in force, with its parameters converted and its match compiled.

    `checks` are (index into `_match_values`, predicate) pairs, the fault type's
    kinds first. What matches depends on those five values only, so the rule set
    caches it per combination.
    """

    rule: FaultRule
    type: FaultType
    params: Any
    checks: tuple[tuple[int, Callable[[str], bool]], ...]

    @classmethod
    def of(cls, rule: FaultRule) -> ActiveRule:
        kind = fault_type(rule.fault)
        checks = [(i, check) for i, name in enumerate(MATCH_FIELDS) if (check := _pattern(getattr(rule, name)))]
        if kind.kinds:
            checks.insert(0, (MATCH_FIELDS.index("kind"), kind.kinds.__contains__))
        return cls(rule, kind, kind.params(rule.params), tuple(checks))


def _match_values(env: Envelope) -> tuple[str, ...]:
    """The envelope's values for MATCH_FIELDS, in that order."""
    return (env.episode, env.sender, env.recipient, body_kind(env.body), env.topic)


def draw(rule_id: str, message_id: str) -> float:
    """A number in [0, 1) fixed by (rule, message): the same campaign faults the same messages."""
    h = hashlib.blake2b(f"{rule_id}/{message_id}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "big") / 2**64


def check_agents(rule: FaultRule, agents: Collection[str], named: str = "") -> None:
    """FaultRuleError when `rule` names an agent not among `agents`, those of the system it is for: in a parameter
    that names agents, or as a `to` or `from` pattern that matches none of them (the runner, which sends the
    Starts, is a sender too). Such a rule would never apply. `named` as for `FaultRule.validated`."""
    given = [str(agent) for name in fault_type(rule.fault).agent_params for agent in rule.params.get(name, ())]
    unknown = [agent for agent in given if agent not in agents]
    for pattern, among in ((rule.recipient, agents), (rule.sender, (*agents, RUNNER))):
        match = _pattern(pattern)
        if match is not None and not any(match(agent) for agent in among):
            unknown.append(pattern)
    if unknown:
        names = list(dict.fromkeys(unknown))
        raise FaultRuleError(
            f"{named or rule.fault}: the system has no agent{'s' if len(names) > 1 else ''}"
            f" {', '.join(map(repr, names))} (its agents: {', '.join(sorted(agents))}), so the rule would never apply"
        )


class RuleSet:
    """The rules in force, rebuilt from `fl.ctl.faults` controls, with the budget each has used.

    The controls are journaled like every other message, so a worker rebuilds the set by reading
    that subject from the stream, then follows it live.

    Applications are counted per rule by original message id, from this worker's own
    faults and from the fault events of every worker, so a budget holds across workers
    (a few messages faulted at the same instant by two workers may overshoot it).
    """

    def __init__(self) -> None:
        self._active: dict[str, ActiveRule] = {}
        self.in_force: tuple[ActiveRule, ...] = ()
        """The rules in force in the order they were added (empty: nothing to do)."""
        self._matching: dict[tuple[str, ...], tuple[ActiveRule, ...]] = {}
        self._applied: dict[str, set[str]] = {}
        self.seen: dict[str, int] = {}
        """Fault events seen per rule id (what `faults list` reports)."""
        self.last_seq = 0
        """Stream sequence of the last control or fault event taken in."""

    def __len__(self) -> int:
        return len(self._active)

    @property
    def rules(self) -> list[FaultRule]:
        return [a.rule for a in self._active.values()]

    def control(self, body: Control) -> None:
        """Take in one `fl.ctl.faults` command; a malformed or unknown one is ignored."""
        op = body.data.get("op")
        if op == "add":
            try:
                rule = msgspec.convert(body.data.get("rule"), FaultRule)
                active = ActiveRule.of(rule.validated())
            except (msgspec.ValidationError, FaultRuleError):
                return
            self._active.pop(rule.id, None)  # re-adding moves it to the end and resets its budget
            self._active[rule.id] = active
            self._applied[rule.id] = set()
            self.seen[rule.id] = 0
        elif op == "remove":
            rule_id = str(body.data.get("id", ""))
            self._active.pop(rule_id, None)
            self._applied.pop(rule_id, None)
        elif op == "clear":
            self._active.clear()
            self._applied.clear()
        self.in_force = tuple(self._active.values())
        self._matching.clear()

    def count(self, event: FaultApplied) -> None:
        """Take in a fault event (this worker's or another's)."""
        if event.rule_id in self._active:
            self.seen[event.rule_id] = self.seen.get(event.rule_id, 0) + 1
            original = event.original.get("id")
            if self._active[event.rule_id].rule.budget and isinstance(original, str):
                self._applied[event.rule_id].add(original)

    def applied(self, rule_id: str) -> int:
        return len(self._applied.get(rule_id, ()))

    def candidates(self, env: Envelope, now: float) -> list[ActiveRule]:
        """Rules that match `env`, are in force at `now`, draw under their probability and have budget."""
        return self.matching(_match_values(env), env.id, now)

    def matching(self, values: tuple[str, ...], message_id: str, now: float) -> list[ActiveRule]:
        """`candidates` for what has the match `values` (in `MATCH_FIELDS` order) and id `message_id`."""
        matching = self._matching.get(values)
        if matching is None:
            if len(self._matching) >= MATCH_CACHE_SIZE:
                self._matching.clear()
            matching = self._matching[values] = tuple(
                a for a in self.in_force if all(check(values[i]) for i, check in a.checks)
            )
        hits = []
        for active in matching:
            rule = active.rule
            if rule.expires_at and now >= rule.expires_at:
                continue
            if (rule.message and rule.message != message_id) or message_id in rule.spare:
                continue
            if rule.probability < 1.0 and draw(rule.id, message_id) >= rule.probability:
                continue
            if rule.budget and len(self._applied[rule.id]) >= rule.budget:
                continue
            hits.append(active)
        return hits

    def use(self, rule_id: str, message_id: str) -> None:
        if self._active[rule_id].rule.budget:
            self._applied[rule_id].add(message_id)


# -- control-plane messages ------------------------------------------------------------------------


def _control(data: dict[str, Any], nonce: str) -> Envelope:
    return Envelope(
        id=f"ctl-{nonce}",
        episode=CONTROL_EPISODE,
        sender=OPERATOR,
        body=Control(name=FAULTS_CONTROL, data=data),
        ts=time.time(),
    )


def add_rule_control(rule: FaultRule, nonce: str) -> Envelope:
    """The control envelope that puts `rule` in force (`nonce` makes its id unique)."""
    return _control({"op": "add", "rule": msgspec.to_builtins(rule.validated())}, nonce)


def remove_rule_control(rule_id: str, nonce: str) -> Envelope:
    return _control({"op": "remove", "id": rule_id}, nonce)


def clear_rules_control(nonce: str) -> Envelope:
    return _control({"op": "clear"}, nonce)
