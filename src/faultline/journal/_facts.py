"""The `facts` column: a few body fields of event and recording rows, as JSON that SQL can read.

Bodies are msgpack, which SQL cannot look into, so the writer copies the fields the
derived views need (outcome, reward, fault type, token counts...) into `facts`.
It is derived data: not part of the row digest, but `verify` recomputes it from the
body and reports any difference. What goes into it is fixed per schema version.
"""

from __future__ import annotations

from typing import Any

import msgspec

from faultline.core import Body, DefenseFired, EpisodeCompleted, EpisodeStarted, ErrorRaised, FaultApplied, Recording

FACT_KINDS = frozenset(
    {"episode_started", "episode_completed", "error_raised", "fault_applied", "defense_fired", "recording"}
)

_json = msgspec.json.Encoder(order="deterministic")


class _Usage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class _Reply(msgspec.Struct):
    model: str = ""
    usage: _Usage = msgspec.field(default_factory=_Usage)
    latency_s: float = 0.0


class _LlmRecording(msgspec.Struct):
    """Only what the cost views need from an llm recording; other fields are skipped unread."""

    response: _Reply | None = None


_llm_decoder = msgspec.msgpack.Decoder(_LlmRecording)


def _llm_reply(data: bytes) -> _Reply:
    try:
        return _llm_decoder.decode(data).response or _Reply()
    except msgspec.ValidationError:
        return _Reply()


def facts_of(body: Body, data: bytes) -> str | None:
    """JSON facts for a row whose kind is in FACT_KINDS, from its body and encoded body."""
    facts: dict[str, Any]
    if isinstance(body, Recording):
        facts = {"call": body.call, "index": body.index, "error": body.error}
        if body.call == "llm":
            reply = _llm_reply(data)
            facts |= {
                "model": reply.model,
                "prompt_tokens": reply.usage.prompt_tokens,
                "completion_tokens": reply.usage.completion_tokens,
                "latency_s": reply.latency_s,
            }
    elif isinstance(body, EpisodeStarted):
        facts = {
            "domain": body.domain,
            "task": body.task,
            "trial": body.trial,
            "seed": body.seed,
            "roster": body.roster,
            "forked_from": body.forked_from,
            "forked_at": body.forked_at,
        }
    elif isinstance(body, EpisodeCompleted):
        facts = {
            "outcome": body.outcome,
            "reward": body.reward,
            "cause": body.cause,
            "turns": body.turns,
            "tokens": body.tokens,
            "latency_s": body.latency_s,
        }
    elif isinstance(body, FaultApplied):
        original_id = body.original.get("id")
        facts = {
            "rule_id": body.rule_id,
            "fault": body.fault,
            "original_id": original_id if isinstance(original_id, str) else "",
            "results": len(body.results),
        }
    elif isinstance(body, DefenseFired):
        facts = {"defense": body.defense, "agent": body.agent, "message_id": body.message_id, "reason": body.reason}
    elif isinstance(body, ErrorRaised):
        facts = {"agent": body.agent, "input_id": body.input_id, "error_type": body.error_type, "message": body.message}
    else:
        return None
    return _json.encode(facts).decode()
