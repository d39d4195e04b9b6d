"""What travels between the memory service and its callers: subjects, requests and replies (msgpack)."""

from __future__ import annotations

import msgspec

from faultline.agents.memory._entry import ScoredEntry
from faultline.agents.memory._modes import CutReason, RetrievalMode, TopK

MEMORY_SERVICE = "memory"
"""Retrieval requests go to `fl.svc.memory`."""

SYNC_SERVICE = "memory_sync"
"""`fl.svc.memory_sync`: wait until the memory has handled the completed events up to a stream sequence."""


class RetrievalRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Entries for `query` under `mode`, from one domain's memory (all domains when `domain` is empty).

    `mode` is written `{"type": "top_k", "k": 5}` or `{"type": "dynamic", "radius": 10, ...}`.
    With `user`, the reply also names the tools that user's entries rule out
    (hard preference guiding).
    """

    query: str
    domain: str = ""
    mode: RetrievalMode = TopK()
    user: str = ""


class RetrievalReply(msgspec.Struct, frozen=True, kw_only=True):
    """The answer: the first `n` entries of the ranking with their scores, why n, and tools to hide.

    A request that cannot be served is answered `{"error": "..."}` instead.
    """

    entries: list[ScoredEntry]
    n: int
    reason: CutReason
    peaks: list[int] = []
    candidates: int = 0
    hidden_tools: list[str] = []


class SyncRequest(msgspec.Struct, frozen=True, kw_only=True):
    until: int = 0


class MemorySync(msgspec.Struct, frozen=True, kw_only=True):
    """Where the memory stands: `caught_up` once every completed event up to the asked sequence is handled.

    `failures` and `last_error` say why it is not, when an entry keeps failing
    to be written (an embeddings endpoint that is down, for instance).
    """

    caught_up: bool
    last_seq: int
    entries: int
    failures: int = 0
    last_error: str = ""
