"""How long an episode took, from its rows' times, and where a fork's own time begins.

A fork copies its source's history before the fork point with the times the source
journaled, and then runs; its start records how many rows the copy is
(`EpisodeStarted.copied`). What it took is the time of what it ran, its live part: the
rows after the copy. Counted over every row, it would be the time between the source's run
and the fork's, however long ago that was.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from faultline.journal._rows import JournalRow


class _Copied(msgspec.Struct):
    """Only the copied rows of an episode-started body; its other fields are skipped unread."""

    copied: int = 0


_copied = msgspec.msgpack.Decoder(_Copied)


def copied_rows(started_body: bytes) -> int:
    """How many first rows of a fork are its copied history, from its episode-started body; 0 for an episode that
    is no fork, for a fork journaled before forks recorded it, and for a body this version cannot read."""
    try:
        return max(_copied.decode(started_body).copied, 0)
    except msgspec.DecodeError:  # a ValidationError too
        return 0


def live_part(rows: Sequence[JournalRow]) -> Sequence[JournalRow]:
    """The rows of an episode (in position order) that it ran itself: a fork's rows after its copied history, every
    row of any other episode."""
    started = next((row for row in rows if row.kind == "episode_started"), None)
    copied = copied_rows(started.body) if started is not None else 0
    return rows[copied:] if 0 < copied < len(rows) else rows


def elapsed(rows: Sequence[JournalRow]) -> list[float]:
    """Seconds since the episode began, for each of its rows (in position order).

    A fork's copied history keeps its times, and its live part follows on from the last of them: the time between
    the source's run and the fork's is left out, so the live part's offsets count what it took.
    """
    if not rows:
        return []
    t0 = rows[0].ts
    live = live_part(rows)
    if len(live) == len(rows):
        return [row.ts - t0 for row in rows]
    history = rows[: len(rows) - len(live)]
    resumed = max(row.ts for row in history) - t0
    began = min(row.ts for row in live)
    return [row.ts - t0 for row in history] + [resumed + row.ts - began for row in live]
