"""What an agent asks a model and what it gets back, the same for every backend.

These structs are recorded in the journal (`Recording.request` / `.response`),
and a request's digest is taken over its encoding, so they follow the
schema-evolution rules of `faultline.bus`: new fields only, always with
defaults, and defaults are left out of the encoding.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import msgspec


class LlmToolCall(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A tool call proposed by a model; `arguments_error` is set when its JSON did not parse."""

    id: str
    name: str
    arguments: dict[str, Any] = {}
    arguments_error: str = ""
    raw_arguments: str = ""


class ChatMessage(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    tool_calls: list[LlmToolCall] = []
    tool_call_id: str = ""
    name: str = ""


class LlmRequest(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One model call. `role` picks the backend and model from the configuration.

    `metadata` carries what an offline simulator needs (domain, task, seed);
    real backends ignore it. It is part of the request digest. `response_format`
    "json" asks for one JSON object, of the shape `response_schema` (a JSON
    schema) describes when it is given: servers that support it constrain the
    answer to JSON, or to that schema. The defaults ("text", no schema) are left
    out of the encoding and the digest.
    """

    role: str
    messages: list[ChatMessage]
    tools: list[dict[str, Any]] = []
    temperature: float | None = None
    max_tokens: int | None = None
    metadata: dict[str, Any] = {}
    response_format: Literal["text", "json"] = "text"
    response_schema: dict[str, Any] = {}


class Usage(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class LlmResponse(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    content: str = ""
    tool_calls: list[LlmToolCall] = []
    usage: Usage = Usage()
    model: str = ""
    finish_reason: str = ""
    latency_s: float = 0.0
    metadata: dict[str, Any] = {}


class ModelAttempt(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One request a backend sent for a model call, and how it ended; journaled with the call's recording.

    `request_digest` is taken over what went on the wire (the backend's own settings
    included), so two runs that asked differently can be told apart. `wait_s` is the
    backoff before the next attempt; `error` is empty for the attempt that answered.
    """

    number: int
    request_digest: str = ""
    latency_s: float = 0.0
    error: str = ""
    wait_s: float = 0.0
    finish_reason: str = ""
    completion_tokens: int = 0


@dataclass(eq=False)
class ModelCall:
    """A model call in flight: whose it is, which attempt runs and since when (monotonic seconds).

    The worker lists the calls in flight for progress displays; a backend that
    retries appends each finished attempt to `attempts`, which the recording keeps.
    """

    episode: str
    agent: str
    role: str
    started: float = field(default_factory=time.monotonic)
    attempt: int = 1
    attempt_started: float = field(default_factory=time.monotonic)
    attempts: list[ModelAttempt] = field(default_factory=list)

    def begin(self, number: int) -> None:
        self.attempt = number
        self.attempt_started = time.monotonic()

    def end(self, attempt: ModelAttempt) -> None:
        self.attempts.append(attempt)


@runtime_checkable
class ModelBackend(Protocol):
    """A source of model replies. Backends raise ModelError when they give up."""

    async def complete(self, request: LlmRequest) -> LlmResponse: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class ReportsAttempts(Protocol):
    """A backend that makes several attempts per call and reports each one on `call` as it goes."""

    async def complete_call(self, request: LlmRequest, call: ModelCall) -> LlmResponse: ...
