"""A journal as one self-contained HTML file: the episode list, and each episode as lanes of messages.

No server and no network: the page carries its data and a small script. The episode
list is one compact JSON array; each episode's messages are a separate gzip-compressed
chunk, inflated by the browser only when the episode is opened, and within an episode a
model prompt's messages are stored once and referred to by index, so a prompt that
repeats the conversation so far costs little. A fork is shown beside the episode it was
forked from, from the fork point on. When the forks journal holds the repair forks of an
attribution, the decisive step is marked: the last input whose repair (a fault undone, a
step given its gold action, a step resampled) still rescued the episode, and what the
agent made of it.
"""

from __future__ import annotations

import base64
import gzip
import html
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec

from faultline.core import (
    EpisodeCompleted,
    EpisodeStarted,
    ErrorRaised,
    FaultApplied,
    Recording,
    Tally,
    ToolCall,
    ToolResult,
)
from faultline.journal._describe import describe_body
from faultline.journal._reader import JournalReader
from faultline.journal._rows import JournalRow
from faultline.journal._timing import elapsed, live_part
from faultline.journal._view_page import PAGE

SUMMARY_WIDTH = 160
"""Characters of a message's one-line summary in its box; the whole body opens on click."""

FAULT, DECISIVE, REPAIRED_INPUT = 1, 2, 4
"""Flags of a message in the page's data."""


class ViewStats(msgspec.Struct, frozen=True, kw_only=True):
    """What a written view holds."""

    path: str
    episodes: int
    messages: int
    bytes: int


class _Episode(msgspec.Struct, kw_only=True):
    """What the page's episode list knows of one episode; its messages are in chunk `chunk`."""

    id: str
    source: str
    domain: str = ""
    task: str = ""
    trial: int = 0
    outcome: str = ""
    reward: float | None = None
    cause: str = ""
    traceback: str = ""
    """Of the first handler that raised in the episode (its `error_raised` row), shown under the cause."""
    messages: int = 0
    faults: list[str] = []
    first_ts: float = 0.0
    seconds: float = 0.0
    """From its first message to its last; a fork's, those of its live part (`live_part`), as `journal episodes`."""
    forked_from: str = ""
    forked_at: int = 0
    fork_change: str = ""
    fork_point: int = 0
    """Index of the first message after the copied history (a fork) or of the forked one (an original)."""
    attribution: dict[str, Any] = {}
    agents: dict[str, dict[str, float]] = {}
    """Per agent, its model use in the episode: calls, tokens, seconds waiting for the model; a fork's, the calls it
    made (its live part), as `JournalReader.agent_costs` counts them."""
    sim: bool = False
    chunk: int = 0


_json = msgspec.json.Encoder(order="deterministic")


def _builtins(value: Any) -> Any:
    return msgspec.to_builtins(value)


class _Chunk:
    """One episode's messages as the page reads them: rows of arrays and a table of prompt messages.

    A row is [position, seconds since the episode began (`elapsed`), sender, receiver, kind, summary, detail,
    flags, seconds since the message that caused it (None: no cause in the episode), for a recording
    the position of the message its handling sent (None: it sent none)].
    """

    def __init__(self) -> None:
        self.rows: list[list[Any]] = []
        self.parts: list[Any] = []
        self._part_index: dict[bytes, int] = {}

    def part(self, value: Any) -> int:
        key = _json.encode(value)
        index = self._part_index.get(key)
        if index is None:
            index = self._part_index[key] = len(self.parts)
            self.parts.append(value)
        return index

    def encoded(self) -> str:
        data = _json.encode({"rows": self.rows, "parts": self.parts})
        return base64.b64encode(gzip.compress(data, compresslevel=6, mtime=0)).decode("ascii")


def _detail(body: Any, chunk: _Chunk) -> Any:
    """What a click on the message shows; prompt messages go to the chunk's table."""
    if isinstance(body, Recording) and body.call == "llm":
        request = _builtins(body.request) if isinstance(body.request, dict) else {}
        response = _builtins(body.response) if isinstance(body.response, dict) else {}
        messages = request.get("messages") or []
        return {
            "llm": 1,
            "prompt": [chunk.part(m) for m in messages if isinstance(m, dict)],
            "tools": [_tool_name(t) for t in request.get("tools") or []],
            "answer": response.get("content", ""),
            "tool_calls": response.get("tool_calls") or [],
            "model": response.get("model", ""),
            "usage": response.get("usage") or {},
            "latency_s": response.get("latency_s", 0.0),
            "error": body.error,
        }
    if isinstance(body, ToolCall):
        return {"tool": body.name, "call_id": body.call_id, "arguments": _builtins(body.arguments)}
    if isinstance(body, ToolResult):
        return {"tool": body.name, "call_id": body.call_id, "output": _builtins(body.output), "error": body.error}
    if isinstance(body, Tally):
        return {"kind": "tally", "tokens": body.tokens}  # the simulator's own mistake labels are not shown
    return _builtins(body)


def _tool_name(schema: Any) -> str:
    """The name in a tool schema, flat or OpenAI's {"type": "function", "function": {...}}."""
    if not isinstance(schema, dict):
        return str(schema)
    inner = schema.get("function")
    return str((inner if isinstance(inner, dict) else schema).get("name", ""))


def _is_sim(body: Any) -> bool:
    return (
        isinstance(body, Recording)
        and body.call == "llm"
        and isinstance(body.response, dict)
        and str(body.response.get("model", "")).startswith("sim")
    )


def _episode(episode: str, rows: Sequence[JournalRow], source: str, chunk: _Chunk) -> _Episode:
    """The list entry of one episode, its rows added to `chunk`."""
    entry = _Episode(id=episode, source=source)
    offsets = elapsed(rows)
    sent_at = {row.id: offset for row, offset in zip(rows, offsets, strict=True)}
    made = _made_by_call(rows)
    live = live_part(rows)
    ran_from = len(rows) - len(live)
    for i, (row, offset) in enumerate(zip(rows, offsets, strict=True)):
        body = row.decoded_body()
        flags = 0
        if isinstance(body, EpisodeStarted):
            entry.domain, entry.task, entry.trial = body.domain, body.task, body.trial
            entry.forked_from, entry.forked_at = body.forked_from, body.forked_at
            entry.fork_change = body.fork.get("change", "")
        elif isinstance(body, EpisodeCompleted):
            entry.outcome, entry.reward, entry.cause = body.outcome, body.reward, body.cause
        elif isinstance(body, ErrorRaised):
            entry.traceback = entry.traceback or body.traceback
        elif isinstance(body, FaultApplied):
            flags |= FAULT
            if body.fault not in entry.faults:
                entry.faults.append(body.fault)
        entry.sim = entry.sim or _is_sim(body)
        if isinstance(body, Recording) and body.call == "llm" and i >= ran_from:
            _count_call(entry.agents.setdefault(row.sender, {"calls": 0, "tokens": 0, "latency_s": 0.0}), body)
        to = row.recipient or (f"#{row.topic}" if row.topic else "")
        summary = describe_body(body, SUMMARY_WIDTH)
        after = round(offset - sent_at[row.causation], 3) if row.causation in sent_at else None
        chunk.rows.append(
            [
                *(row.pos, round(offset, 3), row.sender, to, row.kind, summary, _detail(body, chunk), flags),
                *(after, made.get(row.pos)),
            ]
        )
    entry.messages = len(rows)
    if live:
        entry.first_ts = min(row.ts for row in live)
        entry.seconds = round(max(row.ts for row in live) - entry.first_ts, 3)
    return entry


def _made_by_call(rows: Sequence[JournalRow]) -> dict[int, int]:
    """For each model call's recording, the position of the message its handling sent (where the page shows it)."""
    first_output: dict[tuple[str, str], int] = {}
    for row in rows:
        if row.kind not in _NOT_OUTPUTS and (row.recipient or row.topic):
            first_output.setdefault((row.sender, row.causation), row.pos)
    return {
        row.pos: first_output[(row.sender, row.causation)]
        for row in rows
        if row.kind == "recording" and (row.sender, row.causation) in first_output
    }


_NOT_OUTPUTS = frozenset({"recording", "no_output", "tally"})


def _count_call(totals: dict[str, float], call: Recording) -> None:
    response: dict[str, Any] = call.response if isinstance(call.response, dict) else {}
    usage: dict[str, Any] = response["usage"] if isinstance(response.get("usage"), dict) else {}
    totals["calls"] += 1
    totals["tokens"] += int(usage.get("prompt_tokens", 0) or 0) + int(usage.get("completion_tokens", 0) or 0)
    totals["latency_s"] = round(totals["latency_s"] + float(response.get("latency_s", 0.0) or 0.0), 3)


def _repair_forks(forks: Path, originals: dict[str, list[JournalRow]]) -> Iterator[tuple[str, str, list[JournalRow]]]:
    """(fork id, original id, fork rows) of every fork in `forks` of an episode in `originals`."""
    with JournalReader(forks) as reader:
        for summary in reader.episodes():
            if summary.forked_from in originals:
                yield summary.episode, summary.forked_from, list(reader.episode_rows(summary.episode))


def _starts(rows: Sequence[JournalRow]) -> list[bytes]:
    return [r.body for r in rows if r.kind == "start"]


def _attribution(original: list[JournalRow], forks: list[tuple[str, list[JournalRow]]]) -> dict[str, Any]:
    """The decisive step, read from the repair forks an attribution left: {} when there are none or none rescued.

    A repair fork undoes a fault, or keeps the message it forks at and either gives its
    handler an answer (`fork["answer"]`), changes the episode's settings (its `start`
    messages differ) or draws its continuation afresh (`fork["draw"]`); the decisive input is the latest one whose repair succeeded. For an
    undone fault it is the input whose handling sent the faulted message.
    """
    starts = _starts(original)
    rescued: list[tuple[int, str]] = []
    repairs = 0
    for fork_id, rows in forks:
        started = next((r.decoded_body() for r in rows if r.kind == "episode_started"), None)
        if not isinstance(started, EpisodeStarted) or started.fork.get("change") not in (
            "keep",
            "undo_fault",
            "undo_rule",
        ):
            continue
        drawn = started.fork.get("answer") or started.fork.get("draw")
        if started.fork.get("change") == "keep" and _starts(rows) == starts and not drawn:
            continue
        repairs += 1
        completed = next((r.decoded_body() for r in reversed(rows) if r.kind == "episode_completed"), None)
        if isinstance(completed, EpisodeCompleted) and completed.outcome == "success":
            rescued.append((started.forked_at, fork_id))
    if not rescued:
        return {"repairs": repairs} if repairs else {}
    at, fork_id = max(rescued)
    target = next((r for r in original if r.pos == at), None)
    if target is None:
        return {}
    applied = target.decoded_body()
    if isinstance(applied, FaultApplied):
        sender, cause = str(applied.original.get("sender", "")), str(applied.original.get("causation", ""))
        return {"pos": at, "agent": sender, "fork": fork_id, "repairs": repairs, "input": cause}
    return {"pos": at, "agent": target.recipient, "fork": fork_id, "repairs": repairs, "input": target.id}


def attributed_steps(journal: str | Path, forks: str | Path) -> dict[str, tuple[str, int]]:
    """For each episode of `journal` that the repair forks in `forks` rescued: the agent and the journal position
    of its decisive step, as the viewer marks it and `faultline attribute` names it."""
    if not Path(forks).exists():
        return {}
    with JournalReader(forks) as reader:
        sources = {s.forked_from for s in reader.episodes() if s.forked_from}
    with JournalReader(journal) as reader:
        originals = {episode: rows for episode, rows in reader.by_episode(sorted(sources)) if rows}
    by_original: dict[str, list[tuple[str, list[JournalRow]]]] = {}
    for fork_id, original_id, rows in _repair_forks(Path(forks), originals):
        by_original.setdefault(original_id, []).append((fork_id, rows))
    found = {episode: _attribution(rows, by_original.get(episode, [])) for episode, rows in originals.items()}
    return {episode: (a["agent"], a["pos"]) for episode, a in found.items() if "pos" in a}


def _mark_attribution(chunk: _Chunk, rows: Sequence[JournalRow], attribution: dict[str, Any]) -> None:
    """Flag the repaired input and the agent's outputs made while handling it."""
    for i, row in enumerate(rows):
        if row.pos == attribution["pos"]:
            chunk.rows[i][7] |= REPAIRED_INPUT
        elif row.causation == attribution["input"] and row.sender == attribution["agent"]:
            chunk.rows[i][7] |= DECISIVE


def _fork_point(fork_rows: Sequence[JournalRow], original: Sequence[JournalRow], at: int) -> int:
    """Index of the fork's first message after its copy of the original's history before `at`.

    The copies keep their ids; so may live messages that come out as before (ids derive from inputs).
    """
    copied = {r.id for r in original if r.pos < at}
    last = max((i for i, row in enumerate(fork_rows) if row.id in copied), default=0)
    return last + 1


def write_view(
    journal: str | Path,
    out: str | Path,
    *,
    episodes: Sequence[str] | None = None,
    forks: str | Path | None = None,
    open_episode: str = "",
) -> ViewStats:
    """Write the HTML view of `journal` (the `episodes` named, else all) to `out`.

    `forks`, a journal of forks of these episodes (e.g. the one attribution wrote), adds
    them beside their originals and marks the attribution's step. `open_episode` is shown
    when the page opens.
    """
    journal, out = Path(journal), Path(out)
    entries: list[_Episode] = []
    chunks: list[str] = []
    originals: dict[str, list[JournalRow]] = {}
    pending: dict[str, tuple[_Episode, _Chunk]] = {}
    with JournalReader(journal) as reader:
        wanted = list(episodes) if episodes is not None else [e.episode for e in reader.episodes()]
        for episode, rows in reader.by_episode(wanted):
            if not rows:
                continue
            chunk = _Chunk()
            entry = _episode(episode, rows, journal.name, chunk)
            originals[episode] = rows
            pending[episode] = (entry, chunk)
    fork_entries: list[tuple[_Episode, _Chunk]] = []
    by_original: dict[str, list[tuple[str, list[JournalRow]]]] = {}
    if forks is not None and Path(forks).exists():
        forks = Path(forks)
        for fork_id, original_id, rows in _repair_forks(forks, originals):
            if fork_id in originals:
                continue
            chunk = _Chunk()
            entry = _episode(fork_id, rows, forks.name, chunk)
            entry.fork_point = _fork_point(rows, originals[original_id], entry.forked_at)
            by_original.setdefault(original_id, []).append((fork_id, rows))
            fork_entries.append((entry, chunk))
    for episode, (entry, chunk) in pending.items():
        rows = originals[episode]
        if entry.forked_from in originals:
            entry.fork_point = _fork_point(rows, originals[entry.forked_from], entry.forked_at)
        attribution = _attribution(rows, by_original.get(episode, []))
        if "pos" in attribution:
            _mark_attribution(chunk, rows, attribution)
        entry.attribution = {k: v for k, v in attribution.items() if k != "input"}
    messages = 0
    for entry, chunk in [*pending.values(), *fork_entries]:
        entry.chunk = len(chunks)
        chunks.append(chunk.encoded())
        entries.append(entry)
        messages += entry.messages
    out.write_text(_page(journal.name, entries, chunks, open_episode), encoding="utf-8")
    return ViewStats(path=str(out), episodes=len(entries), messages=messages, bytes=out.stat().st_size)


def _script_json(value: Any) -> str:
    """JSON that is safe inside a <script> element."""
    return json.dumps(value, separators=(",", ":")).replace("</", "<\\/")


def _page(title: str, entries: list[_Episode], chunks: list[str], open_episode: str) -> str:
    meta = {
        "title": title,
        "open": open_episode,
        "flags": {"fault": FAULT, "decisive": DECISIVE, "input": REPAIRED_INPUT},
    }
    index = _script_json([_builtins(e) for e in entries])
    chunk_tags = "\n".join(f'<script type="text/plain" id="c{i}">{c}</script>' for i, c in enumerate(chunks))
    return (
        PAGE.replace("__TITLE__", html.escape(title))
        .replace("__META__", _script_json(meta))
        .replace("__INDEX__", index)
        .replace("__CHUNKS__", chunk_tags)
    )
