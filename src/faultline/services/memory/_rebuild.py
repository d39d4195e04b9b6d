"""Rebuild the memory from a journal file: no bus, no model, the same entries the live service wrote."""

from __future__ import annotations

import time
from collections.abc import Collection, Iterator

import msgspec

from faultline._errors import DecodeError
from faultline.agents.memory import MemoryEntry
from faultline.core import Envelope
from faultline.journal import JournalReader, JournalRow
from faultline.services.memory._projection import entry_from_facts, episode_facts, recorded_reflection
from faultline.services.memory._store import MemoryStore

REBUILD_BATCH = 256
"""Entries embedded and written at once."""


class RebuildReport(msgspec.Struct, kw_only=True):
    """What `rebuild` did.

    `completed` counts episodes with a completed event; each of them was
    `added`, already `present` in the store, or `skipped` (no query, or an
    outcome that gives no entry). Reflections of new failures (and preference
    summaries of preference tasks) came from the journal (`recorded_reflections`,
    written by a model live) or were written offline (`offline_reflections`).
    """

    journal: str
    store: str
    completed: int = 0
    added: int = 0
    present: int = 0
    skipped: int = 0
    recorded_reflections: int = 0
    offline_reflections: int = 0
    seconds: float = 0.0


async def rebuild(
    reader: JournalReader,
    store: MemoryStore,
    *,
    batch: int = REBUILD_BATCH,
    episodes: Collection[str] | None = None,
) -> RebuildReport:
    """Add to `store` the entry of every completed episode in the journal (of `episodes`) that it does not hold yet.

    Episodes are taken in the order of their first completed event, the order
    in which the live service met them, so row ids and therefore the order of
    equal-score results match the live memory.
    """
    started = time.perf_counter()
    report = RebuildReport(journal=str(reader.path), store=store.path)
    pending: list[MemoryEntry] = []
    for episode in _completion_order(reader):
        if episodes is not None and episode not in episodes:
            continue
        report.completed += 1
        if episode in store:
            report.present += 1
            continue
        facts = episode_facts(_envelopes(reader.episode_rows(episode)))
        if facts is None:
            report.skipped += 1
            continue
        if facts.reflects:
            if facts.reflection is not None and recorded_reflection(facts.reflection) is not None:
                report.recorded_reflections += 1
            else:
                report.offline_reflections += 1
        pending.append(entry_from_facts(facts))
        if len(pending) >= batch:
            report.added += await store.add_many(pending)
            pending = []
    if pending:
        report.added += await store.add_many(pending)
    report.seconds = time.perf_counter() - started
    return report


def _completion_order(reader: JournalReader) -> Iterator[str]:
    """Episode ids in the order of their first completed event."""
    seen: set[str] = set()
    for row in reader.rows():
        if row.kind == "episode_completed" and row.episode not in seen:
            seen.add(row.episode)
            yield row.episode


def _envelopes(rows: Iterator[JournalRow]) -> Iterator[Envelope]:
    for row in rows:
        try:
            yield row.envelope()
        except DecodeError:
            continue  # a body kind this version does not know cannot be part of an entry
