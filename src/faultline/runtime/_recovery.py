"""Rebuilding an agent's state after a crash: read its episode history, and the timers it lost, back from the stream."""

from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import dataclass, field

from faultline.bus import Bus, asked_again
from faultline.core import Envelope, EpisodeCompleted, Recording, Timer, TimerFired

HISTORY_TIMEOUT_S = 10.0


@dataclass
class History:
    """An (episode, agent)'s journaled inputs before a point, and all its recordings."""

    inputs: list[Envelope] = field(default_factory=list)
    recordings: dict[str, dict[int, Recording]] = field(default_factory=lambda: defaultdict(dict))
    completed_by: str = ""
    """Who completed the episode, where the stream holds a completion of it (the first counts); "" if none."""


async def load_history(bus: Bus, episode: str, agent: str, topics: tuple[str, ...], before_seq: int) -> History:
    """Inputs of `agent` in `episode` stored before `before_seq`, every recording it made, and who completed it.

    Recordings and completions are read to the end of the stream: the message being recovered may
    already have some (the crash came in the middle of its handler), and the episode may have ended
    while no worker ran.
    """
    s = bus.subjects
    rec_subject = s.rec(episode, agent)
    completions = s.event("completed", episode)
    subjects = [s.direct(episode, agent), rec_subject, completions, *(s.topic(episode, t) for t in topics)]
    history = History()
    for delivery, env in await asked_again(functools.partial(bus.read_envelopes, subjects, HISTORY_TIMEOUT_S)):
        if isinstance(env.body, EpisodeCompleted):
            history.completed_by = history.completed_by or env.sender
        elif delivery.subject == rec_subject:
            if isinstance(env.body, Recording):
                history.recordings[env.causation][env.body.index] = env.body
        elif delivery.stream_seq < before_seq and not (env.topic and env.sender == agent):
            history.inputs.append(env)
    return history


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
