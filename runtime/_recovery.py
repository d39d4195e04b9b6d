"""Rebuilding an agent's state after a crash: read its episode history back from the stream."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from faultline._errors import DecodeError
from faultline.bus import Bus
from faultline.core import Envelope, Recording

HISTORY_TIMEOUT_S = 10.0


@dataclass
class History:
    """An (episode, agent)'s journaled inputs before a point, and all its recordings."""

    inputs: list[Envelope] = field(default_factory=list)
    recordings: dict[str, dict[int, Recording]] = field(default_factory=lambda: defaultdict(dict))


async def load_history(bus: Bus, episode: str, agent: str, topics: tuple[str, ...], before_seq: int) -> History:
    """Inputs of `agent` in `episode` stored before `before_seq`, and every recording it made.

    Recordings are read to the end of the stream: the message being recovered may
    already have some (the crash came in the middle of its handler).
    """
    s = bus.subjects
    rec_subject = s.rec(episode, agent)
    subjects = [s.direct(episode, agent), rec_subject, *(s.topic(episode, t) for t in topics)]
    history = History()
    for delivery in await bus.read_stored(subjects, HISTORY_TIMEOUT_S):
        try:
            env = delivery.envelope()
        except DecodeError:
            continue  # dead-lettered when it first arrived
        if delivery.subject == rec_subject:
            if isinstance(env.body, Recording):
                history.recordings[env.causation][env.body.index] = env.body
        elif delivery.stream_seq < before_seq and not (env.topic and env.sender == agent):
            history.inputs.append(env)
    return history
