"""A journal as OpenTelemetry traces, so the tools people already use for LLM traces can show an episode.

One trace per episode, its root span the episode. Under it one `invoke_agent {agent}`
span per agent, from its first message to its last, and under those a `chat {model}`
span per model call and an `execute_tool {tool}` span per tool call (from the call to
its result; a call that got none, as where its tool raised, ends with the episode, as
an error). Names and `gen_ai.*` attributes follow the OpenTelemetry GenAI semantic
conventions; Faultline's own are under `faultline.*`, and injected faults are events
of the root span. A fork's trace holds what it ran, its live part (`live_part`): the
history it copied is its source's, in its source's trace, to which its root span links.

Trace and span ids are digests of the episode and the journal rows, so exporting a
journal twice sends the same ids and a backend can deduplicate them. A public module
of its own, not re-exported by `faultline.journal`: OpenTelemetry loads only when used.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from faultline._errors import JournalError
from faultline.core import (
    NON_AGENT_SENDERS,
    EpisodeCompleted,
    EpisodeStarted,
    FaultApplied,
    Recording,
    ToolCall,
    ToolResult,
)
from faultline.journal._reader import JournalReader
from faultline.journal._rows import JournalRow
from faultline.journal._timing import live_part

_SAID_CHARS = 300
"""How much of what the OTLP exporter logged an error line keeps."""
_OS_ERROR = re.compile(r"\[Errno -?\d+\] [^'\")]+")

_NO_RESULT = "no result before the episode ended"
"""The status of a tool call's span that got no result (its tool's handler raised, the episode timed out)."""

_SCOPE = InstrumentationScope("faultline.journal")
_RESOURCE = Resource.create({"service.name": "faultline"})

Attributes = dict[str, Any]


def _id(key: str, size: int) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=size).digest(), "big")


def _context(trace_id: int, key: str) -> SpanContext:
    return SpanContext(trace_id, _id(key, 8), is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))


def _ns(ts: float) -> int:
    return int(ts * 1e9)


def _root(episode: str) -> SpanContext:
    """The context of an episode's root span: the trace is the episode's."""
    return _context(_id(f"trace/{episode}", 16), f"{episode}/episode")


def episode_spans(episode: str, rows: Sequence[JournalRow], journal: str = "") -> list[ReadableSpan]:
    """The spans of one episode, from its rows in position order; a fork's, of what it ran (`live_part`)."""
    if not rows:
        return []
    root = _root(episode)
    trace_id = root.trace_id
    spans: list[ReadableSpan] = []
    started = _started(rows)
    ran = live_part(rows)
    completed: EpisodeCompleted | None = None
    faults: list[Event] = []
    agents: dict[str, list[float]] = {}
    calls: dict[str, tuple[JournalRow, ToolCall]] = {}

    def agent_context(agent: str) -> SpanContext:
        return _context(trace_id, f"{episode}/agent/{agent}")

    def add(name: str, context: SpanContext, parent: SpanContext, start: float, end: float, attributes: Attributes,
            kind: SpanKind = SpanKind.INTERNAL, status: Status | None = None) -> None:  # fmt: skip
        spans.append(
            ReadableSpan(
                name,
                context=context,
                parent=parent,
                resource=_RESOURCE,
                attributes=attributes,
                kind=kind,
                instrumentation_scope=_SCOPE,
                status=status or Status(StatusCode.UNSET),
                start_time=_ns(start),
                end_time=_ns(max(end, start)),
            )
        )

    for row in ran:
        if row.sender not in NON_AGENT_SENDERS:
            agents.setdefault(row.sender, [row.ts, row.ts])[1] = row.ts
        if row.kind not in (
            "episode_completed",
            "fault_applied",
            "recording",
            "tool_call",
            "tool_result",
        ):
            continue
        body = row.decoded_body()
        where: Attributes = {"faultline.journal.pos": row.pos, "faultline.agent": row.sender}
        if isinstance(body, EpisodeCompleted):
            completed = body
        elif isinstance(body, FaultApplied):
            faults.append(
                Event(
                    "faultline.fault_applied",
                    {"faultline.fault": body.fault, "faultline.rule_id": body.rule_id, **where},
                    _ns(row.ts),
                )
            )
        elif isinstance(body, Recording) and body.call == "llm":
            add(*_chat(trace_id, row, body, agent_context(row.sender), where))
        elif isinstance(body, ToolCall):
            calls[body.call_id] = (row, body)
        elif isinstance(body, ToolResult) and body.call_id in calls:
            call_row, call = calls.pop(body.call_id)
            add(*_tool(trace_id, call_row, call, agent_context(call_row.sender), row.sender, row.ts, body.error))

    first, last = ran[0].ts, ran[-1].ts
    for call_row, call in calls.values():  # no result came: often the very call the episode ended on
        parent = agent_context(call_row.sender)
        add(*_tool(trace_id, call_row, call, parent, call_row.recipient, last, _NO_RESULT, error_type="no_result"))
    for agent, (begin, end) in agents.items():
        agent_attributes: Attributes = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent,
            "faultline.episode": episode,
        }
        add(f"invoke_agent {agent}", agent_context(agent), root, begin, end, agent_attributes)
    attributes: Attributes = {"faultline.episode": episode, "faultline.journal": journal}
    if started is not None:
        attributes |= {
            "faultline.domain": started.domain,
            "faultline.task": started.task,
            "faultline.trial": started.trial,
        }
        if started.system:
            attributes["faultline.system"] = started.system
        if started.forked_from:
            attributes |= {"faultline.forked_from": started.forked_from, "faultline.forked_at": started.forked_at}
    status = None
    if completed is not None:
        attributes |= {"faultline.outcome": completed.outcome, "faultline.reward": completed.reward}
        if completed.cause:
            attributes["faultline.cause"] = completed.cause
        if completed.outcome in ("error", "timeout"):
            status = Status(StatusCode.ERROR, completed.cause or completed.outcome)
    ran_on = (started.domain or started.system) if started is not None else ""
    name = f"episode {ran_on}/{started.task}" if started is not None else f"episode {episode}"
    spans.append(
        ReadableSpan(
            name,
            context=root,
            resource=_RESOURCE,
            attributes=attributes,
            events=faults,
            links=[Link(_root(started.forked_from))] if started is not None and started.forked_from else [],
            kind=SpanKind.INTERNAL,
            instrumentation_scope=_SCOPE,
            status=status or Status(StatusCode.UNSET),
            start_time=_ns(first),
            end_time=_ns(last),
        )
    )
    return spans


def _started(rows: Sequence[JournalRow]) -> EpisodeStarted | None:
    """How the episode started (its first start), where it has a start this version reads."""
    row = next((row for row in rows if row.kind == "episode_started"), None)
    body = row.decoded_body() if row is not None else None
    return body if isinstance(body, EpisodeStarted) else None


def _tool(
    trace_id: int,
    call_row: JournalRow,
    call: ToolCall,
    parent: SpanContext,
    agent: str,
    end: float,
    error: str,
    error_type: str = "tool_error",
) -> tuple[str, SpanContext, SpanContext, float, float, Attributes, SpanKind, Status | None]:
    """The `execute_tool` span of a call, from the call to `end` (its result's time), an error when `error` says one."""
    attributes: Attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": call.name,
        "gen_ai.tool.call.id": call.call_id,
        "faultline.journal.pos": call_row.pos,
        "faultline.agent": agent,
    }
    if error:
        attributes["error.type"] = error_type
    status = Status(StatusCode.ERROR, error) if error else None
    context = _context(trace_id, call_row.id)
    return f"execute_tool {call.name}", context, parent, call_row.ts, end, attributes, SpanKind.INTERNAL, status


def _chat(
    trace_id: int, row: JournalRow, body: Recording, parent: SpanContext, where: Attributes
) -> tuple[str, SpanContext, SpanContext, float, float, Attributes, SpanKind]:
    response: Mapping[str, Any] = body.response if isinstance(body.response, dict) else {}
    model = str(response.get("model") or "unknown")
    usage: Mapping[str, Any] = response.get("usage") or {}
    latency = float(response.get("latency_s") or 0.0)
    attributes: Attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "faultline.sim" if model.startswith("sim") else "openai",
        "gen_ai.request.model": model,
        "gen_ai.response.model": model,
        "gen_ai.usage.input_tokens": int(usage.get("prompt_tokens") or 0),
        "gen_ai.usage.output_tokens": int(usage.get("completion_tokens") or 0),
        "faultline.call_index": body.index,
        **where,
    }
    if body.error:
        attributes["error.type"] = body.error.partition(":")[0]
    return f"chat {model}", _context(trace_id, row.id), parent, row.ts - latency, row.ts, attributes, SpanKind.CLIENT


def export_otel(
    path: str | Path,
    endpoint: str,
    *,
    episodes: Iterable[str] | None = None,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 10.0,
) -> tuple[int, int]:
    """Send the episodes of the journal at `path` to an OTLP/HTTP endpoint; (episodes, spans) sent.

    JournalError when the endpoint refuses or cannot be reached within `timeout_s`.
    """
    exporter = OTLPSpanExporter(endpoint=endpoint, headers=dict(headers or {}), timeout=timeout_s)
    sent = spans_sent = 0
    try:
        with JournalReader(path) as reader, _exporter_says() as said:
            for episode, rows in reader.by_episode(list(episodes) if episodes else None):
                spans = episode_spans(episode, rows, str(path))
                if not spans:
                    continue
                before = len(said)
                if exporter.export(spans) is not SpanExportResult.SUCCESS:
                    now = said[before:]  # what it said of these spans (a retry that went through says something too)
                    why = f": {_reason(now[0])}" if now else ""  # the first thing: why it failed
                    raise JournalError(
                        f"{endpoint}: the OTLP endpoint did not take the spans of episode {episode!r}{why}"
                    )
                sent += 1
                spans_sent += len(spans)
    finally:
        exporter.shutdown()  # type: ignore[no-untyped-call]
    return sent, spans_sent


def _reason(said: str) -> str:
    """The operating system's error in what the exporter said (`[Errno 111] Connection refused`), or all it said."""
    found = _OS_ERROR.search(said)
    return found.group(0) if found else said


@contextlib.contextmanager
def _exporter_says() -> Iterator[list[str]]:
    """What the OTLP exporter logs while the block runs (its retries, why it failed), kept for the one error line
    that says so instead of printed beside it."""
    said: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage()[:_SAID_CHARS])

    logger = logging.getLogger("opentelemetry")  # the exporter's modules log under it
    handler, propagated = Keep(), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield said
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagated
