"""Fault-tolerant behaviours, detected from journal evidence after an episode's first fault.

A detector reads one episode's messages and names each behaviour it sees, the tier
it belongs to (MAS-FIRE's four: mechanism, rule, prompt, reasoning) and whether it
repaired the fault locally. Only evidence at or after the first applied fault counts,
and only evidence the fault caused: a behaviour is a response to the fault, not the
episode's ordinary course. What the fault caused is read from the causation ids (each
message names the message its sender was handling). Given the fault-free run of the
same unit, evidence that run holds too is not counted either: doing what the system
does without the fault is no response to it. What an agent did in answer to a copy a
fault delivered beside the message (a storm's duplicate, a broadcast's stray delivery)
is the fault's effect, never a repair: MAS-FIRE's Table 2 marks an unfiltered copy that
changes what the agents do as failed in both the rule and the reasoning tier. No
detector reads the simulator's own mistake labels (the `tally` notes).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from faultline.core import (
    AssistantTurn,
    ContextReply,
    DefenseFired,
    Envelope,
    FaultApplied,
    ToolResult,
    UserTurn,
    body_digest,
)

Tier = Literal["mechanism", "rule", "prompt", "reasoning"]
TIERS: tuple[Tier, ...] = ("mechanism", "rule", "prompt", "reasoning")
"""MAS-FIRE's fault-tolerance tiers, lowest first."""

VERIFIER = "verifier"
RECHECK = "RECHECK"


class Behaviour(msgspec.Struct, frozen=True, kw_only=True):
    """One fault-tolerant behaviour seen in an episode: which detector, its tier, where, and whether it repaired."""

    name: str
    tier: Tier
    pos: int
    """Journal position of the evidence."""
    repaired: bool
    """Whether it repaired the fault: in every tier it belongs to."""
    tiers: list[Tier] = []
    """Every tier the behaviour belongs to when it is more than `tier` (a judged behaviour may name several)."""
    failed_in: list[Tier] = []
    """The tiers where it was activated and failed while it succeeded in others (MAS-FIRE marks one behaviour
    ✓ in one tier and ✗ in another); `repaired` is then False. Empty: one outcome in every tier."""

    @property
    def all_tiers(self) -> list[Tier]:
        return self.tiers or [self.tier]

    def repaired_in(self, tier: Tier | None) -> bool:
        """Whether it repaired the fault in `tier`; None: overall (in every tier)."""
        return self.repaired if tier is None or not self.failed_in else tier not in self.failed_in


@dataclass
class EpisodeTrace:
    """One episode's messages with their journal positions, and what its faults changed."""

    steps: list[tuple[int, Envelope]]
    fault_pos: int = 0
    """Position of the first applied fault; 0 when none was applied."""
    faulted_ids: set[str] = field(default_factory=set)
    """Ids of the messages the faults sent out instead of the originals."""
    copy_ids: set[str] = field(default_factory=set)
    """Of those, the ones with an id of their own: copies delivered beside the original (a storm's duplicates, a
    broadcast's deliveries to other agents), not the original rewritten or rerouted."""
    echo_ids: set[str] = field(default_factory=set)
    """Of those, the ones that kept the original's id and went elsewhere: a cycle's echo back to its sender."""
    echo_going: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Per echo, where its original was going (recipient, topic)."""
    strays: dict[str, tuple[int, str]] = field(default_factory=dict)
    """Every copy and echo (`copy_ids`, `echo_ids`): where the journal holds it as delivered (its fault's position
    where it does not) and the agent it went to ("" where the fault event does not say)."""
    touched_ids: set[str] = field(default_factory=set)
    """Those, the originals' ids and what an agent sent from a faulted model call: a message handled with one
    of them as its cause answers the fault."""
    on_course: dict[str, set[str]] = field(default_factory=dict)
    """Per message a fault sent out, the ids of that fault's messages that went where its original was going (the
    original rewritten or let through, a storm's duplicates); none for a fault that sent the message elsewhere
    (a cycle's echo to its sender), whose recipient never gets it."""
    removed: list[str] = field(default_factory=list)
    """Text the faults took out of the messages they rewrote (turns dropped or cut from a transcript)."""
    by_id: dict[str, Envelope] = field(default_factory=dict)
    """The episode's messages by id, to walk a causal chain back."""
    ordinary: set[int] = field(default_factory=set)
    """Positions of the steps the fault-free run of the same unit holds too (`also_in`), set by `detect`."""

    @classmethod
    def of(cls, steps: Iterable[tuple[int, Envelope]]) -> EpisodeTrace:
        trace = cls(list(steps))
        calls: list[tuple[int, str, str]] = []
        for pos, env in trace.steps:
            trace.by_id.setdefault(env.id, env)
            if isinstance(env.body, FaultApplied):
                trace.fault_pos = trace.fault_pos or pos
                original = str(env.body.original.get("id", ""))
                results = {str(r.get("id", "")) for r in env.body.results}
                trace.faulted_ids |= results
                trace.copy_ids |= results - {original}
                going = _destination(env.body.original)
                course = {str(r.get("id", "")) for r in env.body.results if _destination(r) == going}
                for result in results:
                    trace.on_course[result] = course
                for r in env.body.results:
                    rid = str(r.get("id", ""))
                    if rid == original and _destination(r) != going:
                        trace.echo_ids.add(rid)
                        trace.echo_going[rid] = going
                    if rid and (rid != original or _destination(r) != going):
                        trace.strays.setdefault(rid, (pos, str(r.get("recipient", ""))))
                trace.touched_ids.add(original)
                trace.removed += removed_texts(env.body)
                if env.body.model_call >= 0:
                    calls.append((pos, str(env.body.original.get("sender", "")), env.causation))
        trace.touched_ids |= trace.faulted_ids
        trace.touched_ids |= {
            env.id
            for pos, env in trace.steps
            if any(pos > at and env.sender == agent and env.causation == handling for at, agent, handling in calls)
        }
        trace.touched_ids.discard("")
        trace.copy_ids.discard("")
        delivered = {(env.id, env.recipient): pos for pos, env in trace.steps}
        for rid, (at, agent) in trace.strays.items():
            trace.strays[rid] = (delivered.get((rid, agent), at), agent)
        return trace

    def act(self, env: Envelope) -> str:
        """What `env` records was done, comparable with another run of the same unit (`message_act`); for a
        defense's drop, which defense dropped what at which agent (the dropped message's id differs from run to
        run, its act does not)."""
        body = env.body
        if not isinstance(body, DefenseFired):
            return message_act(env)
        dropped = self.by_id.get(body.message_id)
        what = body.message_id if dropped is None else message_act(dropped)
        return f"{env.sender}|{env.kind}|{body.defense}|{body.agent}|{what}"

    def acts(self) -> list[str]:
        """The act of every step, in journal order: what a faulted run of the same unit is compared with."""
        return [self.act(env) for _, env in self.steps]

    def also_in(self, baseline: Iterable[str]) -> set[int]:
        """Positions of the steps whose act `baseline` (another run's `acts`) holds too; of an act this run did
        more often than that one, the first as many as that one did."""
        left = Counter(baseline)
        same = set()
        for pos, env in self.steps:
            act = self.act(env)
            if left[act] > 0:
                left[act] -= 1
                same.add(pos)
        return same

    def after_fault(self) -> list[tuple[int, Envelope]]:
        return [(pos, env) for pos, env in self.steps if self.fault_pos and pos >= self.fault_pos]

    def chain(self, message_id: str) -> Iterator[str]:
        """`message_id`, the id of the message its sender was handling, and so on back, to the first id this
        episode's steps do not hold."""
        seen: set[str] = set()
        while message_id and message_id not in seen:
            yield message_id
            seen.add(message_id)
            env = self.by_id.get(message_id)
            if env is None:
                return
            message_id = env.causation

    def passes_on(self, env: Envelope) -> bool:
        """Whether `env` passes a cycle's echo on: sent in answer to the echo, of its kind, to where its original was
        going, carrying its text (its body, where it has none): the sender sent its message again, as the fault-free
        run sent it once."""
        echo = self.by_id.get(env.causation)
        if echo is None or env.causation not in self.echo_ids or env.kind != echo.kind:
            return False
        if self.echo_going[env.causation] != (env.recipient, env.topic):
            return False
        said, says = getattr(echo.body, "text", None), getattr(env.body, "text", None)
        if isinstance(said, str) and isinstance(says, str):
            return said.strip() in says
        return body_digest(echo.body) == body_digest(env.body)

    def stray_on_chain(self, message_id: str) -> str:
        """The first copy or echo a fault delivered (`strays`) that the causal chain back from `message_id` meets; ""
        when it meets none: what was sent in answer to a misrouted message, or to what one set off, is its doing."""
        return next((c for c in self.chain(message_id) if c in self.strays), "")

    def caused_by_fault(self, message_id: str) -> bool:
        """Whether the causal chain back from `message_id` passes through a message the faults touched."""
        return any(c in self.touched_ids for c in self.chain(message_id))

    def answers_faulted_turn(self, question: Envelope) -> bool:
        """Whether `question` was sent in answer to a turn the fault touched: its chain meets a touched message
        before the last turn of the one it asks, or that turn was said while handling one (the user speaking an
        instruction a fault rewrote in their Start)."""
        for c in self.chain(question.causation):
            if c in self.touched_ids:
                return True
            env = self.by_id.get(c)
            if env is not None and env.sender == question.recipient:
                return env.causation in self.touched_ids
        return False


def _destination(message: Mapping[str, Any]) -> tuple[str, str]:
    """Where a message a fault event records was addressed: its recipient and topic."""
    return str(message.get("recipient", "")), str(message.get("topic", ""))


def message_act(env: Envelope) -> str:
    """Who sent what kind of message to whom on which topic, with its body's digest: ids and times left out, so the
    same message of two runs of a unit reads the same."""
    return f"{env.sender}|{env.kind}|{env.recipient}|{env.topic}|{body_digest(env.body)}"


MIN_RESTORED_CHARS = 12
"""The shortest removed text whose reappearance counts as restoring it (shorter text recurs by chance)."""


def _contents(message: Mapping[str, Any]) -> list[str]:
    """The transcript turns of a message a fault event records: none where it records no such message (a model
    request, or what an agent's credential sent as a fault event of its own)."""
    body = message.get("body")
    transcript = body.get("transcript") if isinstance(body, dict) else None
    if not isinstance(transcript, list):
        return []
    return [str(turn.get("content", "")) for turn in transcript if isinstance(turn, dict)]


def removed_texts(fault: FaultApplied) -> list[str]:
    """The transcript turns of the original that no message the fault sent out carries whole."""
    kept = {content for result in fault.results for content in _contents(result)}
    return [c for c in _contents(fault.original) if len(c) >= MIN_RESTORED_CHARS and c not in kept]


Sighting = tuple[int, bool]
"""Where a detector saw its behaviour (journal position) and whether it repaired the fault there."""
Detect = Callable[[EpisodeTrace], list[Sighting]]


@dataclass(frozen=True)
class Detector:
    name: str
    tier: Tier
    summary: str
    detect: Detect
    tiers: tuple[Tier, ...] = ()
    """Every tier its behaviour counts in when more than `tier` (the first of them), with one outcome in all but
    `failed_in`."""
    failed_in: tuple[Tier, ...] = ()
    """Tiers its behaviour fails in whatever a sighting says; a repaired sighting succeeds in the others (MAS-FIRE's
    "fails to filter, and it does not affect behaviour": ✗ rule, ✓ reasoning), a failed one fails in all."""

    @property
    def all_tiers(self) -> tuple[Tier, ...]:
        return self.tiers or (self.tier,)


def _defense_filtered(trace: EpisodeTrace) -> list[Sighting]:
    """A defense dropped a delivery; it repaired the fault when the drop was a message the fault sent and the
    message still reached the agent it was meant for: another of the fault's messages on its course got through
    there (a storm's duplicate dropped, its original delivered; a broadcast's stray delivery dropped). Dropping
    what a fault sent elsewhere (a cycle's echo) stops the echo but leaves the recipient without the message: the
    defense fired and did not resolve the fault (MAS-FIRE's ✗)."""
    drops = [(pos, env.body) for pos, env in trace.after_fault() if isinstance(env.body, DefenseFired)]
    dropped = {(drop.message_id, drop.agent) for _, drop in drops}
    return [
        (pos, any((i, drop.agent) not in dropped for i in trace.on_course.get(drop.message_id, ())))
        for pos, drop in drops
    ]


def cancelled_by_defense(steps: Sequence[tuple[int, Envelope]]) -> bool:
    """Whether a defense dropped a message the faults sent (`defense_filtered`, repaired or not): the fault met a
    defense."""
    trace = EpisodeTrace.of(steps)
    return any(
        isinstance(env.body, DefenseFired) and env.body.message_id in trace.faulted_ids for _, env in trace.steps
    )


def _tool_error_corrected(trace: EpisodeTrace) -> list[Sighting]:
    """A tool call the fault caused failed (the faulted call, or one whose causal chain passes through a faulted
    message) and the agent called again; repaired when its next call succeeded (the same tool with other
    arguments, or the right tool instead of a wrong one). A call made in answer to a copy is `acted_on_copy`."""
    steps = trace.after_fault()
    found = []
    for i, (pos, env) in enumerate(steps):
        failed = isinstance(env.body, ToolResult) and env.body.error
        if failed and trace.caused_by_fault(env.causation) and not trace.stray_on_chain(env.causation):
            after = next((e.body for _, e in steps[i + 1 :] if isinstance(e.body, ToolResult)), None)
            if after is not None:
                found.append((pos, not after.error))
    return found


def _asked_user(trace: EpisodeTrace) -> list[Sighting]:
    """The agent put a question back to the user in answer to a faulted message or to the user's turn that
    spoke a faulted instruction; repaired when the user answered it. (A question in the ordinary course of the
    episode, after the user spoke again, is not a response to the fault; one asked in answer to a copy the fault
    delivered is its effect, `acted_on_copy`.)"""
    steps = trace.after_fault()
    found = []
    for i, (pos, env) in enumerate(steps):
        body = env.body
        question = isinstance(body, AssistantTurn) and "?" in body.text
        if question and trace.answers_faulted_turn(env) and not trace.stray_on_chain(env.causation):
            answered = any(isinstance(e.body, UserTurn) and e.sender == "user" for _, e in steps[i + 1 :])
            found.append((pos, answered))
    return found


def _verifier_recheck(trace: EpisodeTrace) -> list[Sighting]:
    """The verifier answered RECHECK on a proposal the fault touched (the request it reviewed, or a message
    on that request's causal chain, was faulted); repaired when the next tool result is not an error."""
    steps = trace.after_fault()
    found = []
    for i, (pos, env) in enumerate(steps):
        body = env.body
        recheck = isinstance(body, ContextReply) and body.helper == VERIFIER and body.verdict == RECHECK
        if recheck and trace.caused_by_fault(env.causation):
            after = next((e.body for _, e in steps[i + 1 :] if isinstance(e.body, ToolResult)), None)
            repaired = after is not None and not after.error
            found.append((pos, repaired))
    return found


def _acted_on_copy(trace: EpisodeTrace) -> list[Sighting]:
    """An agent acted on a copy the fault delivered beside the message, or on a cycle's echo, that no defense
    dropped: of what was sent in answer to it or to what it set off, the first message the fault-free run did not
    send too (`ordinary`). The fault's effect, never a repair: the message got through (rule failed) and changed
    what the agents did (reasoning failed). One sighting per copy or echo."""
    first: dict[str, int] = {}
    for pos, env in trace.after_fault():
        if pos in trace.ordinary or isinstance(env.body, (FaultApplied, DefenseFired)) or trace.passes_on(env):
            continue
        if stray := trace.stray_on_chain(env.causation):
            first.setdefault(stray, pos)
    return [(pos, False) for pos in sorted(first.values())]


def _echo_received(trace: EpisodeTrace) -> list[Sighting]:
    """A cycle's echo (`echo_ids`) got through: no defense dropped it at the sender it went back to. Where its sender
    passed it on (`passes_on`) and everything else sent in answer to it the fault-free run sent too (`ordinary`), it
    did not affect behaviour: MAS-FIRE's "receives cyclic messages without impact", failed in the rule tier (nothing
    filtered it) and repaired in reasoning. Where nothing was sent in answer, the message never reached where it was
    going: failed in both. What was sent in answer that the fault-free run did not send is `acted_on_copy`'s. (A
    copy its recipient ignored is no behaviour: its original got through, and the unit is one of no effect.)"""
    dropped = {
        (env.body.message_id, env.body.agent) for _, env in trace.after_fault() if isinstance(env.body, DefenseFired)
    }
    answered: dict[str, bool] = {}
    for pos, env in trace.after_fault():
        if not isinstance(env.body, (FaultApplied, DefenseFired)) and (stray := trace.stray_on_chain(env.causation)):
            answered[stray] = answered.get(stray, True) and (pos in trace.ordinary or trace.passes_on(env))
    return [
        (trace.strays[echo][0], echo in answered)
        for echo in sorted(trace.echo_ids)
        if (echo, trace.strays[echo][1]) not in dropped and answered.get(echo, True)
    ]


def _helper_restored(trace: EpisodeTrace) -> list[Sighting]:
    """A helper's reply carries text the fault removed from the conversation: the state is restored."""
    return [
        (pos, True)
        for pos, env in trace.after_fault()
        if isinstance(env.body, ContextReply) and any(text in env.body.text for text in trace.removed)
    ]


DETECTORS: dict[str, Detector] = {
    d.name: d
    for d in (
        Detector(
            "defense_filtered",
            "rule",
            "a defense dropped a delivery (a faulted one, with the message still delivered where it was going:"
            " repaired; a cycle's echo dropped leaves the recipient without it: not repaired)",
            _defense_filtered,
        ),
        Detector(
            "tool_error_corrected",
            "mechanism",
            "a tool call the fault caused failed and the agent called again (the next call succeeded: repaired)",
            _tool_error_corrected,
        ),
        Detector(
            "asked_user",
            "reasoning",
            "the agent answered a faulted message, or the user's turn speaking a faulted instruction, with a"
            " question to the user (the user answered: repaired)",
            _asked_user,
        ),
        Detector(
            "verifier_recheck",
            "mechanism",
            "the verifier answered RECHECK on a proposal the fault touched (the next tool result is no error:"
            " repaired)",
            _verifier_recheck,
        ),
        Detector(
            "helper_restored",
            "mechanism",
            "a helper's reply carries a turn the fault dropped or cut from the conversation (repaired)",
            _helper_restored,
        ),
        Detector(
            "acted_on_copy",
            "rule",
            "an agent acted on a copy the fault delivered (a storm's duplicate, a broadcast's stray delivery) or on a"
            " cycle's echo, and did what the fault-free run did not: the fault's effect (failed in rule and reasoning,"
            " never repaired)",
            _acted_on_copy,
            tiers=("rule", "reasoning"),
        ),
        Detector(
            "echo_received",
            "rule",
            "a cycle's echo got through and its sender passed the message on as the fault-free run sent it (failed in"
            " rule, repaired in reasoning), or sent nothing and the message never arrived (failed in both)",
            _echo_received,
            tiers=("rule", "reasoning"),
            failed_in=("rule",),
        ),
    )
}
"""Every behaviour detector by name, each with its tiers."""


def detect(
    steps: Sequence[tuple[int, Envelope]], detectors: Iterable[Detector] | None = None, baseline: Iterable[str] = ()
) -> list[Behaviour]:
    """Every behaviour the detectors find in one episode's (position, envelope) steps, in position order. `baseline`
    is what the fault-free run of the same unit did (its `EpisodeTrace.acts`): a sighting whose evidence that run
    holds too is the system's ordinary course, not a response to the fault, and is left out."""
    trace = EpisodeTrace.of(steps)
    if not trace.fault_pos:
        return []
    trace.ordinary = trace.also_in(baseline)
    found = [
        Behaviour(
            name=d.name,
            tier=d.tier,
            tiers=list(d.tiers),
            pos=pos,
            repaired=repaired and not d.failed_in,
            failed_in=list(d.failed_in) if repaired else [],
        )
        for d in (DETECTORS.values() if detectors is None else detectors)
        for pos, repaired in d.detect(trace)
        if pos not in trace.ordinary
    ]
    return sorted(found, key=lambda b: (b.pos, b.name))
