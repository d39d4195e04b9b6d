"""The `openai` backend: chat completions and embeddings from any OpenAI-compatible endpoint.

The `openai` client's own retries are switched off so that the policy here is
the only one: timeouts, connection errors, HTTP 429 and 5xx are retried (those
of them `retry_on` names) with exponential backoff and full jitter; any other
4xx fails at once. Every attempt of a chat call is reported on its `ModelCall`,
so the journal keeps each one with the call's recording. A tool call
whose arguments are not a JSON object is returned with `arguments_error` set,
so the agent sees the mistake instead of the worker crashing on it. A request the
endpoint refuses as longer than the model's context, whatever the status (llama.cpp
answers HTTP 500 when its context fills while it answers), is never sent again as
it was: it fails at once, or with `truncation = "auto"` is sent again without its
oldest turns (`_truncation`).
"""

from __future__ import annotations

import math
import os
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self, TypeVar

import anyio
import msgspec

from faultline._errors import ConfigError, ModelError
from faultline.core import (
    ChatMessage,
    LlmRequest,
    LlmResponse,
    LlmToolCall,
    ModelAttempt,
    ModelCall,
    Usage,
    digest,
    encode,
)
from faultline.runtime._durations import Amount, Seconds, SecondsOrZero
from faultline.runtime.models._truncation import Cuts, Overflow, fit, overflow

if TYPE_CHECKING:
    import numpy as np
    import openai

T = TypeVar("T")

NO_API_KEY = "no-key"
"""Sent as the API key when the configured variable is unset; local servers accept anything."""

DEFAULT_EMBED_BATCH = 128
"""Texts per embeddings request; endpoints cap the batch size (OpenAI at 2048)."""

_JSON_TYPES = {list: "an array", str: "a string", int: "a number", float: "a number", bool: "a boolean"}


_CONTEXT_FILLED = (
    "the server's context filled while it answered, and llama.cpp shares its --ctx-size among the requests it"
    " serves at once: give it a larger one, or send fewer at once (--concurrency, [run] concurrency) or ask for"
    " shorter answers (max_tokens)"
)
"""What to change when a server fails a request for length after it began to answer (llama.cpp's HTTP 500)."""

RetryOn = Literal["timeout", "connection", "rate_limit", "server_error"]
"""The failures a retry policy may retry: a request past its time, no connection, HTTP 429, HTTP 5xx."""

RETRY_ON_ALL: tuple[RetryOn, ...] = ("timeout", "connection", "rate_limit", "server_error")

Truncation = Literal["disabled", "auto"]
"""What a chat call does when the endpoint refuses its request as too long for the model: fail, or drop
the oldest turns of the conversation and ask again."""

MAX_TRUNCATIONS = 3
"""Times one call is shortened at most: each uses the server's latest counts, so one usually does."""

DEFAULT_MAX_TOKENS = 512
"""Answer tokens a chat request asks for at most: enough for a turn of a chat agent, and a bound on
how long a slow model can take to write it. 0 sends no limit."""


class OpenAISettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Where an OpenAI-compatible endpoint is, which model to ask, how long its answers may be, and how patiently.

    `timeout_s` bounds each attempt as a whole, however slowly the server keeps
    sending. `max_retries` counts retries after the first attempt, for the failures
    in `retry_on`; any other failure ends the call at once. The wait before retry n
    is drawn uniformly from [0, min(backoff_cap_s, backoff_base_s * 2**(n-1))].
    `temperature`, `max_tokens` and `stop` are for chat; a request's own values win.
    `truncation` "auto" answers a refusal for the prompt's length by dropping the oldest
    turns after the opening request and asking again at once (not counted as a retry; the
    attempt's journaled error says how many messages went), for models with a small context.
    """

    base_url: str = "https://api.openai.com/v1"
    api_key_env: str = "OPENAI_API_KEY"
    model: str = ""
    temperature: Amount | None = None
    max_tokens: Annotated[int, msgspec.Meta(ge=0)] = DEFAULT_MAX_TOKENS
    stop: tuple[str, ...] = ()
    timeout_s: Seconds = 60.0
    max_retries: Annotated[int, msgspec.Meta(ge=0)] = 3
    backoff_base_s: SecondsOrZero = 0.5
    backoff_cap_s: SecondsOrZero = 8.0
    retry_on: tuple[RetryOn, ...] = RETRY_ON_ALL
    truncation: Truncation = "disabled"

    @property
    def call_budget_s(self) -> float:
        """The longest one call can take: every attempt timing out, with the longest backoff between."""
        waits = sum(
            min(self.backoff_cap_s, self.backoff_base_s * 2.0 ** (n - 1)) for n in range(1, self.max_retries + 1)
        )
        return (self.max_retries + 1) * self.timeout_s + waits


class _Failure(msgspec.Struct, frozen=True):
    """A failed attempt: what kind of failure (a `RetryOn`, or "fatal"), in words, and the server's Retry-After."""

    kind: str
    text: str
    retry_after: float = 0.0
    overflow: Overflow | None = None
    """Set when the server refused the request as too long for the model's context."""


class _Shortened(msgspec.Struct, frozen=True):
    """A request made shorter to fit the context: the digest of what goes next, and what was left out."""

    digest: str
    note: str


class _Endpoint:
    """One `AsyncOpenAI` client plus the retry policy shared by chat and embeddings."""

    def __init__(self, settings: OpenAISettings) -> None:
        import openai  # here, not at the top: it takes a second to import, which the CLI should not pay

        if not settings.model:
            raise ConfigError(f"no model set for the openai endpoint {settings.base_url}")
        self.settings = settings
        self._key_missing = not (settings.api_key_env and os.environ.get(settings.api_key_env))
        self.client = openai.AsyncOpenAI(
            api_key=NO_API_KEY if self._key_missing else os.environ[settings.api_key_env],
            base_url=settings.base_url,
            timeout=settings.timeout_s,
            max_retries=0,
        )
        self._rng = random.Random()

    async def call(
        self,
        operation: Callable[[], Awaitable[T]],
        report: ModelCall | None = None,
        sent: str = "",
        shorten: Callable[[Overflow], _Shortened | None] | None = None,
    ) -> tuple[T, int]:
        """Run `operation` under the retry policy; return its result and the attempts it took.

        Each attempt is reported on `report` as it begins and ends; `sent` is the digest
        of the request, for those reports. When the server refuses a chat request as too long,
        `shorten` (given for chat) may shorten what `operation` sends under `truncation = "auto"`,
        and the next attempt goes at once.
        """
        import openai

        attempts = self.settings.max_retries + 1
        retries = truncations = 0
        number = 0
        while True:
            number += 1
            if report is not None:
                report.begin(number)
            started = time.perf_counter()
            try:
                with anyio.fail_after(self.settings.timeout_s):
                    result = await operation()
            except (TimeoutError, openai.OpenAIError) as exc:
                failure = self._failure(exc)
            else:
                if report is not None:
                    report.end(
                        ModelAttempt(number=number, request_digest=sent, latency_s=time.perf_counter() - started)
                    )
                return result, number
            latency = time.perf_counter() - started
            shortened = None
            if failure.overflow is not None and shorten is not None and truncations < MAX_TRUNCATIONS:
                shortened = shorten(failure.overflow) if self.settings.truncation == "auto" else None
            if shortened is not None:
                truncations += 1
                error = f"{failure.text}; {shortened.note}"
                if report is not None:
                    report.end(ModelAttempt(number=number, request_digest=sent, latency_s=latency, error=error))
                sent = shortened.digest
                continue
            final = failure.overflow is not None or failure.kind not in self.settings.retry_on
            retried = not final and retries + 1 < attempts
            wait = self._backoff(retries + 1, failure.retry_after) if retried else 0.0
            if report is not None:
                report.end(
                    ModelAttempt(number=number, request_digest=sent, latency_s=latency, error=failure.text, wait_s=wait)
                )
            if final:
                text = self._fatal_text(failure) if shorten is not None else failure.text
                raise ModelError(f"{self.describe()}: {text}", retryable=failure.kind != "fatal")
            if not retried:
                noun = "attempt" if attempts == 1 else "attempts"
                raise ModelError(
                    f"{self.describe()}: gave up after {attempts} {noun}, last error: {failure.text}", retryable=True
                )
            retries += 1
            await anyio.sleep(wait)

    def _fatal_text(self, failure: _Failure) -> str:
        """A failure that ends a chat call, with what would have kept a refusal for length from ending it."""
        if failure.overflow is None:
            return failure.text
        if self.settings.truncation == "disabled":
            text = f'{failure.text}; truncation = "auto" drops the oldest turns to fit'
        else:
            text = f"{failure.text}; still too long after dropping what truncation may drop"
        if failure.kind == "server_error":
            text += f"; {_CONTEXT_FILLED}"
        return text

    def describe(self) -> str:
        return f"openai endpoint {self.settings.base_url} (model {self.settings.model})"

    def _failure(self, exc: Exception) -> _Failure:
        """What went wrong with one attempt, and whether a retry policy may retry it."""
        import openai

        if isinstance(exc, TimeoutError | openai.APITimeoutError):
            return _Failure("timeout", f"timed out after {self.settings.timeout_s:g}s")
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            kind = "rate_limit" if status == 429 else "server_error" if status >= 500 else "fatal"
            return _Failure(kind, self._status_text(exc), _retry_after(exc), overflow(exc.body))
        if isinstance(exc, openai.APIConnectionError):
            return _Failure("connection", f"cannot connect ({exc.__cause__ or exc})")
        return _Failure("fatal", str(exc))

    def _backoff(self, attempt: int, retry_after: float) -> float:
        ceiling = min(self.settings.backoff_cap_s, self.settings.backoff_base_s * 2 ** (attempt - 1))
        return max(self._rng.uniform(0.0, ceiling), min(retry_after, self.settings.backoff_cap_s))

    def _status_text(self, exc: openai.APIStatusError) -> str:
        body = exc.body
        detail = body.get("message") if isinstance(body, dict) else None
        text = f"HTTP {exc.status_code} ({detail if isinstance(detail, str) else exc.response.reason_phrase})"
        if exc.status_code == 401 and self._key_missing:
            variable = self.settings.api_key_env
            text += f"; the environment variable {variable} is not set" if variable else "; no api_key_env is set"
        return text


def _retry_after(exc: openai.APIStatusError) -> float:
    """The server's Retry-After in seconds, or 0 when it gave none we can read."""
    try:
        seconds = float(exc.response.headers.get("retry-after", "0"))
    except ValueError:
        return 0.0
    return seconds if math.isfinite(seconds) and seconds > 0.0 else 0.0


class _EndpointUser:
    """Closes the endpoint's HTTP client; usable as an async context manager."""

    _endpoint: _Endpoint

    async def aclose(self) -> None:
        await self._endpoint.client.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class OpenAIBackend(_EndpointUser):
    """A `ModelBackend` for one role's settings; use it as an async context manager or call `aclose`."""

    def __init__(self, settings: OpenAISettings) -> None:
        self.settings = settings
        self._endpoint = _Endpoint(settings)
        self._cuts = Cuts()

    async def complete(self, request: LlmRequest) -> LlmResponse:
        return await self.complete_call(request, None)

    async def complete_call(self, request: LlmRequest, call: ModelCall | None) -> LlmResponse:
        """Ask the endpoint once (plus retries), reporting each attempt on `call`.

        `latency_s` covers every attempt and the waits between.
        """
        params = self.params(request)
        started = time.perf_counter()
        client = self._endpoint.client
        whole = params["messages"]
        conversation = (call.episode, call.agent) if call is not None else None
        dropped = 0
        if conversation is not None and self.settings.truncation == "auto":  # cut as its last request was
            params["messages"], dropped = self._cuts.apply(conversation, whole)

        def shorten(refused: Overflow) -> _Shortened | None:
            nonlocal dropped
            fitted = fit(params["messages"], params.get("tools"), refused, params.get("max_tokens", 0))
            if fitted is None:
                return None
            params["messages"] = fitted.messages
            dropped += fitted.dropped
            if conversation is not None:
                self._cuts.remember(conversation, whole, fitted.head, fitted.head + dropped)
            note = f"sent again without its {dropped} oldest message(s) after the opening request"
            return _Shortened(digest(encode(params)), note)

        completion, attempts = await self._endpoint.call(
            lambda: client.chat.completions.create(**params),
            call,
            digest(encode(params)),
            shorten,
        )
        latency = time.perf_counter() - started
        if not completion.choices:
            raise ModelError(f"{self._endpoint.describe()}: the reply has no choices", retryable=False)
        choice = completion.choices[0]
        usage = completion.usage
        return LlmResponse(
            content=choice.message.content or "",
            tool_calls=[_from_openai(call) for call in choice.message.tool_calls or []],
            usage=Usage(
                prompt_tokens=usage.prompt_tokens if usage else 0,
                completion_tokens=usage.completion_tokens if usage else 0,
            ),
            model=completion.model,
            finish_reason=choice.finish_reason or "",
            latency_s=latency,
            metadata={"attempts": attempts, "truncated": dropped} if dropped else {"attempts": attempts},
        )

    def params(self, request: LlmRequest) -> dict[str, Any]:
        """The chat completion request as sent: the request's own values over this role's settings."""
        params: dict[str, Any] = {
            "model": self.settings.model,
            "messages": [_to_openai(message) for message in request.messages],
        }
        if request.tools:
            params["tools"] = request.tools
        temperature = request.temperature if request.temperature is not None else self.settings.temperature
        if temperature is not None:
            params["temperature"] = temperature
        max_tokens = request.max_tokens if request.max_tokens is not None else self.settings.max_tokens
        if max_tokens:
            params["max_tokens"] = max_tokens
        if self.settings.stop:
            params["stop"] = list(self.settings.stop)
        if request.response_format == "json" and request.response_schema:
            schema = {"name": "answer", "schema": request.response_schema}
            params["response_format"] = {"type": "json_schema", "json_schema": schema}
        elif request.response_format == "json":
            params["response_format"] = {"type": "json_object"}
        return params


class OpenAIEmbedder(_EndpointUser):
    """Unit-length float32 vectors from an endpoint's `/embeddings`, with the backend's retry policy.

    `dim` is needed before the first call by stores that size their index up
    front: pass it, or `await probe()` to learn it from the endpoint. Vectors of
    another length are an error, never silently mixed.
    """

    def __init__(
        self, settings: OpenAISettings, *, dim: int | None = None, batch_size: int = DEFAULT_EMBED_BATCH
    ) -> None:
        if batch_size < 1:
            raise ConfigError(f"embedding batch_size must be at least 1, got {batch_size}")
        self.settings = settings
        self.batch_size = batch_size
        self._dim = dim
        self._endpoint = _Endpoint(settings)

    @property
    def name(self) -> str:
        return f"openai:{self.settings.model}"

    @property
    def dim(self) -> int:
        if self._dim is None:
            raise ModelError(f"{self._endpoint.describe()}: embedding size unknown; pass dim= or await probe() first")
        return self._dim

    async def probe(self) -> int:
        """Embed one short text to learn the vector size."""
        await self.embed(["dimension probe"])
        return self.dim

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np  # only embedders need it; workers stay small

        """An (n, dim) float32 array whose rows have L2 norm 1 (all-zero rows stay zero)."""
        batches = [list(texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        rows: list[list[float]] = []
        for batch in batches:
            rows.extend(await self._embed_batch(batch))
        matrix = np.asarray(rows, dtype=np.float32).reshape(len(rows), self._dim or 0)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return (matrix / np.where(norms == 0.0, 1.0, norms)).astype(np.float32, copy=False)

    async def _embed_batch(self, batch: list[str]) -> list[list[float]]:
        client = self._endpoint.client
        reply, _ = await self._endpoint.call(
            lambda: client.embeddings.create(model=self.settings.model, input=batch, encoding_format="float")
        )
        data = sorted(reply.data, key=lambda item: item.index)
        if len(data) != len(batch):
            raise ModelError(f"{self._endpoint.describe()}: {len(data)} embeddings for {len(batch)} texts")
        for item in data:
            if self._dim is None:
                self._dim = len(item.embedding)
            if len(item.embedding) != self._dim:
                raise ModelError(
                    f"{self._endpoint.describe()}: embedding of size {len(item.embedding)}, expected {self._dim}"
                )
        return [item.embedding for item in data]


def parse_tool_arguments(raw: str) -> tuple[dict[str, Any], str]:
    """Decode a tool call's argument string: (arguments, "") or ({}, why it is unusable).

    An empty string means no arguments, as some servers send for tools without parameters.
    """
    if not raw.strip():
        return {}, ""
    try:
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        return {}, f"arguments are not valid JSON: {exc}"
    if not isinstance(value, dict):
        return {}, f"arguments must be a JSON object, got {_JSON_TYPES.get(type(value), 'null')}"
    return value, ""


def _from_openai(call: Any) -> LlmToolCall:
    if call.type != "function":
        return LlmToolCall(
            id=call.id,
            name=call.custom.name,
            arguments_error="custom (free-text) tool calls are not supported; declare the tool as a function",
            raw_arguments=call.custom.input,
        )
    arguments, error = parse_tool_arguments(call.function.arguments)
    return LlmToolCall(
        id=call.id,
        name=call.function.name,
        arguments=arguments,
        arguments_error=error,
        raw_arguments=call.function.arguments if error else "",
    )


def _to_openai(message: ChatMessage) -> dict[str, Any]:
    """A chat message in the wire shape; a malformed call is sent back exactly as the model wrote it."""
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.name:
        out["name"] = message.name
    if message.tool_calls:
        out["content"] = message.content or None
        out["tool_calls"] = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": _arguments_text(call)}}
            for call in message.tool_calls
        ]
    return out


def _arguments_text(call: LlmToolCall) -> str:
    return call.raw_arguments if call.arguments_error else msgspec.json.encode(call.arguments).decode()
