"""From one finished episode's messages to its memory entry: the code the live service and rebuild share.

The memory is a projection of the journal. `entry_from_episode` is a pure
function of an episode's envelopes in stream order, so the memory service
(reading the stream) and `rebuild` (reading a journal file) write identical
entries. What it takes:

- the query: the text of the first user turn addressed to the tool agent;
- the tool calls, in order, with the environment's answers (for the extractor);
- the first `episode completed` event: feedback is 1 when its reward is at
  least 1, else 0; `details` may carry `user`, `preference` and `tool_ratings`;
- the reflection, for failures only: the memory extractor's reply as
  journaled in a `Recording` by the memory service on
  `fl.rec.<episode>.memory`, or, when none is journaled, the offline critique
  `sim_reflection` of the calls, the environment's answers and the last reply;
- on preference tasks (`details["preference"]`), successes included, the
  reflection is the user's preference summary instead: the journaled reply of
  the extractor asked for preferences, else `sim_preferences` of the ratings;
- no reflection at all when the `[memory]` table the episode's started event
  recorded has `extractor = "off"` (the paper's "w/o memory extractor").

What an offline simulator recorded about its own mistakes (`details["mistakes"]`, its tallies and
model answers) is never read: an entry is what a run with a real model would give too.

Messages after the first completed event (late or duplicate ones) are not
part of the episode; the memory's own recording is, wherever it lies. An
episode gives no entry when it has no completed event, no user turn to
search by, or ended with outcome "error" (a crashed handler is a fault of
the runtime or an agent's code, not an experience of tool use).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import msgspec

from faultline.agents.memory import MemoryEntry, ToolCallRecord
from faultline.core import (
    AssistantTurn,
    Envelope,
    EpisodeCompleted,
    EpisodeStarted,
    LlmRequest,
    LlmResponse,
    Recording,
    Start,
    ToolCall,
    ToolResult,
    UserTurn,
    derive_id,
    digest,
    encode,
)
from faultline.services.memory._preference import tool_ratings
from faultline.services.memory._prompts import ExtractionInput, ToolExchange, sim_preferences, sim_reflection

MEMORY_AGENT = "memory"
"""The sender of the memory service's recordings; they travel on `fl.rec.<episode>.memory`."""

TOOL_AGENT = "tool"
"""The agent whose first user turn is the entry's query."""

REFLECTION_INDEX = 0
"""Call index of the extractor exchange among the memory's recordings for an episode."""

_SKIPPED_OUTCOMES = frozenset({"error"})


class EpisodeFacts(msgspec.Struct, frozen=True, kw_only=True):
    """What the memory reads from one episode before a reflection is written.

    `completed` is the episode's first completed event (its id is the parent
    of the memory's recording id); `reflection` is the extractor exchange the
    memory service journaled for this episode, if any.
    """

    episode: str
    domain: str
    task: str
    query: str
    outcome: str
    feedback: Literal[0, 1]
    completed: Envelope
    calls: list[ToolCallRecord] = []
    exchanges: list[ToolExchange] = []
    reply: str = ""
    user: str = ""
    preference: bool = False
    tool_ratings: dict[str, Literal[0, 1]] = {}
    reflection: Recording | None = None
    extractor: bool = True
    """Whether the episode's run let the memory extractor write reflections (`[memory] extractor`)."""

    @property
    def reflects(self) -> bool:
        """Whether the entry gets a reflection: a failure's critique, or a preference task's summary, unless
        the extractor was off."""
        return self.extractor and (self.feedback == 0 or self.preference)


def episode_facts(envelopes: Iterable[Envelope]) -> EpisodeFacts | None:
    """The facts of one episode from its envelopes in stream order; None if it gives no entry."""
    query = ""
    domain = ""
    task = ""
    calls: list[ToolCall] = []
    results: dict[str, ToolResult] = {}
    reply = ""
    completed: Envelope | None = None
    reflection: Recording | None = None
    extractor = True
    for env in envelopes:
        body = env.body
        if isinstance(body, Recording):
            if env.sender == MEMORY_AGENT and body.call == "llm" and reflection is None and not body.error:
                reflection = body
            continue
        if completed is not None:
            continue
        match body:
            case EpisodeCompleted():
                completed = env
            case EpisodeStarted():
                domain, task = domain or body.domain, task or body.task
                extractor = extractor and _extractor_on(body)
            case Start() if env.recipient == TOOL_AGENT:
                domain = domain or str(body.data.get("domain", ""))
                task = task or str(body.data.get("task", ""))
            case UserTurn() if env.recipient == TOOL_AGENT and not query and body.text.strip():
                query = body.text.strip()
            case ToolCall():
                calls.append(body)
            case ToolResult():
                results.setdefault(body.call_id, body)
            case AssistantTurn():
                reply = body.text
            case _:
                pass
    if completed is None or not query:
        return None
    end = completed.body
    assert isinstance(end, EpisodeCompleted)
    if end.outcome in _SKIPPED_OUTCOMES:
        return None
    details = end.details
    domain = str(details.get("domain") or domain)
    if not domain:
        return None
    records = [ToolCallRecord(name=c.name, arguments=dict(c.arguments)) for c in calls]
    return EpisodeFacts(
        episode=completed.episode,
        domain=domain,
        task=str(details.get("task") or task),
        query=query,
        outcome=end.outcome,
        feedback=1 if end.reward >= 1.0 else 0,
        completed=completed,
        calls=records,
        exchanges=[_exchange(record, results.get(call.call_id)) for record, call in zip(records, calls, strict=True)],
        reply=reply,
        user=str(details.get("user") or ""),
        preference=bool(details.get("preference")),
        tool_ratings=_ratings(details.get("tool_ratings")),
        reflection=reflection,
        extractor=extractor,
    )


def entry_from_facts(facts: EpisodeFacts) -> MemoryEntry:
    """The entry: the journaled reflection when there is one, else the offline critique (failures)
    or preference summary (preference tasks); a success of another task, or an episode whose run switched
    the extractor off, carries none."""
    entry = MemoryEntry(
        id=facts.episode,
        episode=facts.episode,
        domain=facts.domain,
        query=facts.query,
        feedback=facts.feedback,
        calls=facts.calls,
        user=facts.user,
        tool_ratings=facts.tool_ratings,
    )
    if not facts.reflects:
        return entry
    reflection = recorded_reflection(facts.reflection) if facts.reflection is not None else None
    if reflection is None:
        reflection = (
            sim_preferences(tool_ratings(entry)) if facts.preference else sim_reflection(facts.exchanges, facts.reply)
        )
    return msgspec.structs.replace(entry, reflection=reflection)


def entry_from_episode(envelopes: Iterable[Envelope]) -> MemoryEntry | None:
    """One episode's memory entry from its envelopes in stream order; None when it gives none.

    Pure: the same envelopes always give the same entry, on the live bus and
    from a journal file alike.
    """
    facts = episode_facts(envelopes)
    return None if facts is None else entry_from_facts(facts)


def recorded_reflection(recording: Recording) -> str | None:
    """The critique text of a journaled extractor exchange; None if the response holds none."""
    try:
        response = msgspec.convert(recording.response, LlmResponse)
    except msgspec.ValidationError:
        return None
    text = response.content.strip()
    return text or None


def extraction_input(
    facts: EpisodeFacts, *, similar: list[MemoryEntry], tools: list[dict[str, Any]]
) -> ExtractionInput:
    """What the memory extractor is shown: r = E(q, T, a, e, f, M'); on a preference task it is
    asked for the user's preferences, else for a critique of the failure."""
    return ExtractionInput(
        query=facts.query,
        feedback=facts.feedback,
        tools=tools,
        exchanges=facts.exchanges,
        reply=facts.reply,
        similar=similar,
        domain=facts.domain,
        style="preferences" if facts.preference else "critique",
    )


def reflection_recording(facts: EpisodeFacts, request: LlmRequest, response: LlmResponse) -> Envelope:
    """The envelope that journals one extractor exchange, shaped like an agent's recorded `llm` call.

    Its id derives from the completed event's id, so publishing it twice (a
    retry after a crash) stores it once.
    """
    raw_request = msgspec.to_builtins(request)
    recording = Recording(
        call="llm",
        index=REFLECTION_INDEX,
        request_digest=digest(encode(raw_request)),
        request=raw_request,
        response=msgspec.to_builtins(response),
    )
    completed = facts.completed
    return Envelope(
        id=derive_id(completed.id, REFLECTION_INDEX, "r"),
        episode=facts.episode,
        sender=MEMORY_AGENT,
        body=recording,
        causation=completed.id,
        hops=completed.hops + 1,
        ts=time.time(),
    )


def _extractor_on(started: EpisodeStarted) -> bool:
    """False when the `[memory]` table the episode recorded switched the extractor off; older episodes, which
    recorded no such key, ran with it."""
    memory = started.settings.get("memory")
    return not (isinstance(memory, Mapping) and memory.get("extractor") == "off")


def _exchange(call: ToolCallRecord, result: ToolResult | None) -> ToolExchange:
    if result is None:
        return ToolExchange(call=call, error="no result was received")
    output = result.output
    response = output if isinstance(output, str) else msgspec.json.encode(output, order="deterministic").decode()
    return ToolExchange(call=call, response="" if output is None else response, error=result.error)


def _ratings(raw: Any) -> dict[str, Literal[0, 1]]:
    if not isinstance(raw, Mapping):
        return {}
    return {str(name): 1 if rating else 0 for name, rating in raw.items() if rating in (0, 1)}
