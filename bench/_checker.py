"""The chaos checker: after a schedule, what the runner started against what the journal holds.

Nothing lost: every episode the runner started completed, or is named with its cause. Nothing twice:
each episode's completion is journaled once, and each stored stream message once, in stream order
with no gap. The journal verifies (`faultline journal verify`) and replays identically (`faultline replay`).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import msgspec

from faultline.api import RunResult, replay
from faultline.bus import StreamState
from faultline.core import EpisodeCompleted
from faultline.journal import JournalReader, verify

COMPLETED = "episode_completed"


class Verdict(msgspec.Struct, kw_only=True):
    episodes: int
    """Planned."""
    started: int
    completed: int
    outcomes: dict[str, int]
    lost: dict[str, str]
    """Episodes started whose completion the runner or the journal lacks, with what is known of why."""
    duplicated: dict[str, int]
    """Episodes whose completion the journal holds more than once, with how many times."""
    differing: dict[str, str]
    """Episodes the runner saw end otherwise than the journal says."""
    not_success: dict[str, str]
    """Episodes that completed but not as a success, with their cause (the sim model solves every task)."""
    stream: str
    """What is wrong with the journal's copy of the stream (a gap, a message twice), or ""."""
    verify: str
    replay: str

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.differing or self.stream or self.verify or self.replay)


def check(
    journal: Path, result: RunResult, stored: StreamState, runner_error: str = "", trimmed: bool = False
) -> Verdict:
    """Compare `result` (what the runner started and saw complete) and `stored` (the stream at the end) with
    `journal`; `runner_error` is why the runner stopped early, if it did, and names what it left running.
    `trimmed`: the journal trimmed the stream, which then holds fewer messages than it stored."""
    started = set(result.completed) | set(result.running)
    with JournalReader(journal) as reader:
        rows = list(reader.rows())
    completions: dict[str, list[EpisodeCompleted]] = {}
    for row in rows:
        if row.kind == COMPLETED:
            body = row.envelope().body
            assert isinstance(body, EpisodeCompleted)
            completions.setdefault(row.episode, []).append(body)
    lost = {}
    for episode in sorted(started):
        if episode not in result.completed:
            lost[episode] = f"the runner saw no completion ({runner_error or result.waiting_in(episode)})"
        elif episode not in completions:
            lost[episode] = "the runner saw it complete, the journal holds no completion"
    duplicated = {episode: len(bodies) for episode, bodies in completions.items() if len(bodies) > 1}
    differing = {
        episode: f"runner {done.outcome!r}, journal {completions[episode][0].outcome!r}"
        for episode, done in result.completed.items()
        if episode in completions and completions[episode][0].outcome != done.outcome
    }
    checked = verify(journal)
    replayed = replay(journal)
    first = replayed.divergences[0] if replayed.divergences else None
    return Verdict(
        episodes=len(result.planned),
        started=len(started),
        completed=len(result.completed),
        outcomes=dict(Counter(done.outcome for done in result.completed.values())),
        lost=lost,
        duplicated=duplicated,
        differing=differing,
        not_success={e: d.cause or d.outcome for e, d in sorted(result.completed.items()) if d.outcome != "success"},
        stream=_stream_problem([row.stream_seq for row in rows], len({row.id for row in rows}), stored, trimmed),
        verify=checked.problem,
        replay=f"{first.episode}: {first.agent} at input {first.input_pos}: {first.what}" if first else "",
    )


def _stream_problem(seqs: list[int], distinct_ids: int, stored: StreamState, trimmed: bool = False) -> str:
    """Each stored message once, in stream order: journal sequences 1..n, n ids, at least what the stream holds
    (every message it stored, unless `trimmed`).

    Messages published while the system stopped, after the last look at the stream, are journaled too.
    """
    if seqs != list(range(1, len(seqs) + 1)):
        gaps = sorted(set(range(1, max(seqs, default=0) + 1)) - set(seqs))
        twice = sorted(s for s, n in Counter(seqs).items() if n > 1)
        return f"journal sequences are not 1..{len(seqs)}: missing {gaps[:10]}, twice {twice[:10]}"
    if distinct_ids != len(seqs):
        return f"{len(seqs) - distinct_ids} message ids stored twice"
    held = stored.messages <= stored.last_seq if trimmed else stored.messages == stored.last_seq
    if not (len(seqs) >= stored.last_seq and held):
        return f"the journal holds {len(seqs)} rows, the stream {stored.messages} messages up to {stored.last_seq}"
    return ""
