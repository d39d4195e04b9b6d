"""Rebuilding an agent's state after a crash: read its episode history, and the timers it lost, back from the stream."""

from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import dataclass, field

from faultline.bus import Bus, asked_again
from faultline.core import Envelope, EpisodeCompleted, FaultApplied, Recording, Timer, TimerFired

HISTORY_TIMEOUT_S = 10.0


@dataclass
class History:
    """An (episode, agent)'s journaled inputs, all its recordings, and what it left of each input."""

    inputs: list[tuple[int, Envelope]] = field(default_factory=list)
    """Every input the stream holds, with its stream sequence, in stream order."""
    recordings: dict[str, dict[int, Recording]] = field(default_factory=lambda: defaultdict(dict))
    completed_by: str = ""
    """Who completed the episode, where the stream holds a completion of it (the first counts); "" if none."""
    stored: set[str] = field(default_factory=set)
    """The ids of the agent's outputs the stream holds (a faulted output's original among them), when read."""
    answered: set[str] = field(default_factory=set)
    """The inputs that left evidence of their handling: an output, a `NoOutput` marker, a defense's drop."""

    def handled_through(self, seq: int) -> int:
        """The stream sequence of the last input handled before, at or after `seq`: those before `seq` were
        acknowledged (the consumer delivers from its floor), and handling is in order, so an input before one
        that left evidence was handled whole. The last one with evidence may have been cut off by a crash; it is
        handled again, and sends only what the stream lacks (`stored`)."""
        last = max((s for s, env in self.inputs if env.id in self.answered), default=0)
        return max((s for s, _ in self.inputs if s < max(seq, last)), default=0)


async def load_history(bus: Bus, episode: str, agent: str, topics: tuple[str, ...], *, outputs: bool) -> History:
    """Every input of `agent` in `episode`, every recording it made, who completed it, and with `outputs` what
    it left of each input (what a worker before this one, or this one before it forgot the episode, may have
    handled and had its acknowledgement lost: nats-server keeps a consumer's state lazily, docs/reliability.md).

    Read to the end of the stream: the message being recovered may already have recordings and outputs (the
    crash came in the middle of its handler, or after it), and the episode may have ended while no worker ran.
    """
    s = bus.subjects
    rec_subject = s.rec(episode, agent)
    completions = s.event("completed", episode)
    subjects = [s.direct(episode, agent), rec_subject, completions, *(s.topic(episode, t) for t in topics)]
    if outputs:
        subjects += [s.direct(episode, "*", agent), s.topic(episode, "*", agent), s.event("*", episode, agent)]
    history = History()
    taken = 0  # the reads overlap (an agent's message to itself, its completion): each message counts once
    for delivery, env in await asked_again(functools.partial(bus.read_envelopes, subjects, HISTORY_TIMEOUT_S)):
        if delivery.stream_seq == taken:
            continue
        taken = delivery.stream_seq
        if delivery.subject == rec_subject:
            if isinstance(env.body, Recording):
                history.recordings[env.causation][env.body.index] = env.body
            continue
        if env.sender == agent:
            _left(history, env)
        if isinstance(env.body, EpisodeCompleted):
            history.completed_by = history.completed_by or env.sender
        elif env.recipient == agent or (env.topic in topics and env.sender != agent):
            history.inputs.append((delivery.stream_seq, env))
    return history


def _left(history: History, output: Envelope) -> None:
    """Note `output` of the agent, and the input it answers (a defense's drop answers the input it dropped)."""
    history.stored.add(output.id)
    body = output.body
    if not isinstance(body, FaultApplied):
        history.answered.add(output.causation)
    elif body.model_call < 0:  # an output the fault replaced: the input it answers was handled
        history.stored.add(str(body.original.get("id", "")))
        history.answered.add(str(body.original.get("causation", "")))
    # a faulted model request was made while its input was handled, which may have been cut off after it


async def pending_timers(bus: Bus, agent: str, shard: int = 0, shards: int = 1) -> list[Envelope]:
    """The timers `agent` set that have not fired, in episodes not completed: those a worker that died held.

    A timer fires as a `TimerFired` the agent sends itself, caused by the timer; the
    stream holds every timer, every firing and every completion, so the three tell
    which waits are still open. Shard `shard` of `shards` reads its own partitions' timers, firings and
    completions (`Subjects.in_shard`), all its credential may read where the subjects are partitioned.
    """
    s = bus.subjects
    read = [s.event("timer", "*", agent), s.direct("*", agent, agent), s.event("completed", "*")]
    subjects = [narrowed for subject in read for narrowed in s.in_shard(subject, shard, shards)]
    timers: list[Envelope] = []
    fired: set[str] = set()
    completed: set[str] = set()
    for _, env in await bus.read_envelopes(subjects, HISTORY_TIMEOUT_S):
        if isinstance(env.body, Timer):
            timers.append(env)
        elif isinstance(env.body, TimerFired):
            fired.add(env.causation)
        elif isinstance(env.body, EpisodeCompleted):
            completed.add(env.episode)
    return [t for t in timers if t.id not in fired and t.episode not in completed]
