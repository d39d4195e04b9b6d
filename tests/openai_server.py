"""A scripted OpenAI-compatible HTTP server for tests, and the `openai_server` fixture.

It serves `POST /v1/chat/completions` and `POST /v1/embeddings` on a free
loopback port from a background thread, so the real `openai` client (and
anything built on it, such as `faultline run --model openai`) can be tested
without a model. To use the fixture in a test folder, re-export it from that
folder's conftest.py::

    from tests.openai_server import openai_server as openai_server

Each test scripts the replies it wants, in order; once the script is used up,
every request gets a deterministic default reply (`echo: <last user message>`,
or whatever `server.fallback` returns)::

    async def test_retries(openai_server):
        openai_server.reply(Status(500), Text("hello"))
        async with OpenAIBackend(openai_server.settings(max_retries=1)) as backend:
            response = await backend.complete(request)
        assert response.content == "hello"
        assert len(openai_server.chat_requests) == 2

Scripted replies: `Text(content)`, `ToolCalls([Call(name, {...})])`,
`Call(name, "not json")` for a malformed call (a string is sent verbatim),
`Status(code)` for an HTTP error (`CONTEXT_FILLED` is llama.cpp's HTTP 500 for a
context that filled while it answered), `Delay(seconds, then)` to make a client time
out, `Endless(seconds_per_token)` for a model that never stops talking: it
writes `max_tokens` words when the request caps the answer (finish reason
`length`), and without a cap sends a byte now and then forever, so only a
deadline on the whole request ends it. `OpenAIServer(tools=False)` answers any
request that offers `tools` with HTTP 400, as servers without tool calling do.
`OpenAIServer(context_tokens=n)` refuses a chat request whose prompt (its words,
tool calls and tools included) is longer than n, with llama.cpp's error body, or
OpenAI's with `context_style="openai"`. `reply_embeddings` scripts `Status` and `Delay` for the embeddings route;
embedding vectors are otherwise derived from the text: a sum of one hashed
random vector per word, so texts that share words point the same way, and
deliberately not of unit length. Every request received is in `requests`
(`chat_requests` and `embedding_requests` give the JSON bodies per route);
`wait_for_requests(n)` blocks until n have arrived.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Literal, Self

import msgspec
import numpy as np
import pytest

from faultline.runtime.models import OpenAISettings

__all__ = [
    "CONTEXT_FILLED",
    "Call",
    "Delay",
    "Endless",
    "OpenAIServer",
    "RecordedRequest",
    "Status",
    "Text",
    "ToolCalls",
    "echo",
    "openai_server",
    "prompt_tokens",
]

DEFAULT_EMBEDDING_DIM = 16
TEST_MODEL = "test-model"
_WORD = re.compile(r"\w+")


class Text(msgspec.Struct, frozen=True):
    """A plain assistant message. `usage` = (prompt, completion) tokens; counted from words when None."""

    content: str
    finish_reason: str = "stop"
    usage: tuple[int, int] | None = None


class Call(msgspec.Struct, frozen=True):
    """One tool call; `arguments` given as a string is sent as written, so it can be malformed."""

    name: str
    arguments: dict[str, Any] | str = {}
    id: str = ""


class ToolCalls(msgspec.Struct, frozen=True):
    """An assistant message that calls tools (finish reason `tool_calls`)."""

    calls: list[Call]
    content: str = ""
    usage: tuple[int, int] | None = None


class Status(msgspec.Struct, frozen=True):
    """An HTTP error reply with an OpenAI-style error body, or with `error` as the body's error object."""

    code: int
    message: str = ""
    retry_after: float | None = None
    error: dict[str, Any] | None = None


CONTEXT_FILLED = Status(500, error={"code": 500, "message": "Context size has been exceeded.", "type": "server_error"})
"""llama.cpp's answer when its context, shared by the requests it serves at once, fills while it answers."""


class Endless(msgspec.Struct, frozen=True):
    """A model that talks until it is cut off: at `max_tokens` if the request has one, else never."""

    seconds_per_token: float = 0.001


class Delay(msgspec.Struct, frozen=True):
    """Wait `seconds` before answering with `then` (the default reply when None)."""

    seconds: float
    then: Text | ToolCalls | Status | None = None


Reply = Text | ToolCalls | Status | Delay | Endless


class _Answer(msgspec.Struct, frozen=True):
    status: int
    payload: dict[str, Any]
    delay: float = 0.0
    retry_after: float | None = None
    forever: float = 0.0
    """Seconds between the bytes of an answer that never ends (0: a normal answer)."""


class RecordedRequest(msgspec.Struct, frozen=True):
    """A request as the server saw it, headers with lower-case names."""

    path: str
    body: dict[str, Any]
    headers: dict[str, str]


def echo(body: dict[str, Any]) -> Text | ToolCalls:
    """The default chat reply: repeat the last user message."""
    users = [m for m in body["messages"] if m.get("role") == "user"]
    return Text(f"echo: {_text(users[-1].get('content')) if users else ''}")


class OpenAIServer:
    """The server; start and stop it with `with`, or use the `openai_server` fixture."""

    def __init__(
        self,
        *,
        embedding_dim: int = DEFAULT_EMBEDDING_DIM,
        api_key: str | None = None,
        fallback: Callable[[dict[str, Any]], Text | ToolCalls] = echo,
        tools: bool = True,
        context_tokens: int = 0,
        context_style: Literal["llama.cpp", "openai"] = "llama.cpp",
    ) -> None:
        """`api_key`, when set, must arrive as the bearer token or the reply is 401; `tools` False
        refuses requests that offer tools; `context_tokens` refuses longer prompts (0: any length)."""
        self.embedding_dim = embedding_dim
        self.api_key = api_key
        self.fallback = fallback
        self.tools = tools
        self.context_tokens = context_tokens
        self.context_style = context_style
        self._lock = threading.Lock()
        self._received = threading.Condition(self._lock)
        self._chat: deque[Reply] = deque()
        self._embeddings: deque[Status | Delay] = deque()
        self._requests: list[RecordedRequest] = []
        self._stopping = threading.Event()
        self._httpd: _Httpd | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        httpd = _Httpd(("127.0.0.1", 0), _Handler)
        httpd.owner = self
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="openai-test-server"
        )
        self._thread.start()

    def stop(self) -> None:
        """Wake delayed replies, stop serving, close the socket and join every thread."""
        if self._httpd is None or self._thread is None:
            return
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()
        self._httpd = self._thread = None

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- what tests use ----------------------------------------------------

    @property
    def url(self) -> str:
        """The base URL to give a client, ending in `/v1`."""
        if self._httpd is None:
            raise RuntimeError("the server is not running")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def settings(self, **overrides: Any) -> OpenAISettings:
        """Backend settings for this server: fast retries and short timeouts unless overridden."""
        values: dict[str, Any] = {
            "base_url": self.url,
            "api_key_env": "",
            "model": TEST_MODEL,
            "timeout_s": 5.0,
            "max_retries": 2,
            "backoff_base_s": 0.0,
            "backoff_cap_s": 0.0,
        }
        values.update(overrides)
        return OpenAISettings(**values)

    def reply(self, *replies: Reply) -> None:
        """Queue replies for the next chat completion requests, in order."""
        with self._lock:
            self._chat.extend(replies)

    def reply_embeddings(self, *replies: Status | Delay) -> None:
        """Queue errors or delays for the next embeddings requests; the vectors themselves are derived."""
        with self._lock:
            self._embeddings.extend(replies)

    @property
    def pending(self) -> int:
        """Scripted replies not used yet, on both routes."""
        with self._lock:
            return len(self._chat) + len(self._embeddings)

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> list[RecordedRequest]:
        """Block until at least `count` requests have arrived; raise TimeoutError after `timeout` seconds."""
        with self._received:
            if not self._received.wait_for(lambda: len(self._requests) >= count, timeout):
                raise TimeoutError(f"{len(self._requests)} requests arrived in {timeout}s, expected {count}")
            return list(self._requests)

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        return [r.body for r in self.requests if r.path.endswith("/chat/completions")]

    @property
    def embedding_requests(self) -> list[dict[str, Any]]:
        return [r.body for r in self.requests if r.path.endswith("/embeddings")]

    def vector(self, text: str, dim: int | None = None) -> np.ndarray:
        """The raw (not normalised) vector the server returns for `text`."""
        size = dim or self.embedding_dim
        total = np.zeros(size, dtype=np.float64)
        for word in _WORD.findall(text.lower()) or [""]:
            seed = int.from_bytes(hashlib.sha256(word.encode()).digest()[:8], "little")
            total += np.random.default_rng(seed).standard_normal(size)
        return (3.0 * total).astype(np.float32)

    # -- used by the handler thread ---------------------------------------

    def _handle(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> _Answer:
        """Record one request and decide what to answer, and after how long."""
        with self._lock:
            self._requests.append(RecordedRequest(path=path, body=body, headers=headers))
            self._received.notify_all()
            index = len(self._requests)
            if not self.tools and body.get("tools"):  # refused before the model sees it: no scripted reply used
                return _Answer(400, _error("tools are not supported by this server", "invalid_request_error"))
            if self.context_tokens and path == "/v1/chat/completions" and prompt_tokens(body) > self.context_tokens:
                return _Answer(400, self._too_long(prompt_tokens(body)))
            if path == "/v1/chat/completions":
                scripted: Reply | None = self._chat.popleft() if self._chat else None
            elif path == "/v1/embeddings":
                scripted = self._embeddings.popleft() if self._embeddings else None
            else:
                return _Answer(404, _error(f"no route {path}", "not_found"))
        delay = 0.0
        if isinstance(scripted, Delay):
            delay, scripted = scripted.seconds, scripted.then
        if isinstance(scripted, Status):
            message = scripted.message or f"scripted status {scripted.code}"
            error = {"error": scripted.error} if scripted.error is not None else _error(message, "scripted")
            return _Answer(scripted.code, error, delay, scripted.retry_after)
        if self.api_key is not None and headers.get("authorization") != f"Bearer {self.api_key}":
            return _Answer(401, _error("invalid api key", "invalid_api_key"), delay)
        if isinstance(scripted, Endless):
            cap = body.get("max_tokens")
            if not cap:
                return _Answer(200, {}, delay, forever=scripted.seconds_per_token)
            talk = Text(" ".join(["word"] * cap), finish_reason="length")
            return _Answer(200, self._chat_reply(body, talk, index), delay + cap * scripted.seconds_per_token)
        try:
            if path == "/v1/embeddings":
                return _Answer(200, self._embeddings_reply(body), delay)
            return _Answer(200, self._chat_reply(body, scripted, index), delay)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            return _Answer(400, _error(f"invalid request: {exc!r}", "invalid_request_error"), delay)

    def _chat_reply(self, body: dict[str, Any], scripted: Text | ToolCalls | None, index: int) -> dict[str, Any]:
        if not isinstance(body["model"], str) or not isinstance(body["messages"], list) or not body["messages"]:
            raise ValueError("model must be a string and messages a non-empty list")
        reply = scripted or self.fallback(body)
        message: dict[str, Any] = {"role": "assistant", "content": reply.content or None}
        written = reply.content
        if isinstance(reply, ToolCalls):
            message["tool_calls"] = [
                {
                    "id": call.id or f"call_{index}_{n}",
                    "type": "function",
                    "function": {"name": call.name, "arguments": _arguments(call)},
                }
                for n, call in enumerate(reply.calls)
            ]
            written += " ".join(_arguments(call) for call in reply.calls)
        prompt, completion_tokens = reply.usage or (prompt_tokens(body), len(_WORD.findall(written)))
        return {
            "id": f"chatcmpl-{index}",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": reply.finish_reason if isinstance(reply, Text) else "tool_calls",
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt + completion_tokens,
            },
        }

    def _too_long(self, prompt: int) -> dict[str, Any]:
        """The refusal of a prompt longer than the context, in the words of the server `context_style` names."""
        limit = self.context_tokens
        if self.context_style == "openai":
            message = (
                f"This model's maximum context length is {limit} tokens. However, your messages resulted in"
                f" {prompt} tokens. Please reduce the length of the messages."
            )
            return {
                "error": {
                    "message": message,
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            }
        message = f"request ({prompt} tokens) exceeds the available context size ({limit} tokens), try increasing it"
        return {
            "error": {
                "code": 400,
                "message": message,
                "type": "exceed_context_size_error",
                "n_prompt_tokens": prompt,
                "n_ctx": limit,
            }
        }

    def _embeddings_reply(self, body: dict[str, Any]) -> dict[str, Any]:
        texts = [body["input"]] if isinstance(body["input"], str) else body["input"]
        if not isinstance(body["model"], str) or not all(isinstance(t, str) for t in texts):
            raise ValueError("model must be a string and input a string or a list of strings")
        dim = body.get("dimensions") or self.embedding_dim
        base64_wanted = body.get("encoding_format") == "base64"
        data = []
        for i, text in enumerate(texts):
            vector = self.vector(text, dim)
            encoded = base64.b64encode(vector.astype("<f4").tobytes()).decode() if base64_wanted else vector.tolist()
            data.append({"object": "embedding", "index": i, "embedding": encoded})
        tokens = sum(len(_WORD.findall(t)) for t in texts)
        return {
            "object": "list",
            "data": data,
            "model": body["model"],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }


def prompt_tokens(body: dict[str, Any]) -> int:
    """A chat request's prompt as this server counts it: the words of its messages, tool calls and tools."""
    words = 0
    for message in body["messages"]:
        words += len(_WORD.findall(_text(message.get("content"))))
        words += len(_WORD.findall(json.dumps(message.get("tool_calls") or [])))
    return words + len(_WORD.findall(json.dumps(body.get("tools") or [])))


def _arguments(call: Call) -> str:
    return call.arguments if isinstance(call.arguments, str) else json.dumps(call.arguments)


def _text(content: Any) -> str:
    """Message content as text, whether a string or a list of content parts."""
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def _error(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": kind}}


class _Httpd(ThreadingHTTPServer):
    owner: OpenAIServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (a timed-out request) is expected; anything else is reported."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Httpd

    def do_POST(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("content-length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError as exc:
            self._send(400, _error(f"body is not JSON: {exc}", "invalid_request_error"), None)
            return
        headers = {name.lower(): value for name, value in self.headers.items()}
        answer = owner._handle(self.path, body if isinstance(body, dict) else {}, headers)
        if answer.delay and owner._stopping.wait(answer.delay):
            return
        if answer.forever:
            self._send_forever(answer.forever)
            return
        self._send(answer.status, answer.payload, answer.retry_after)

    def _send_forever(self, interval: float) -> None:
        """Headers, then a space (valid leading JSON whitespace) every `interval`, until the client hangs up."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        while not self.server.owner._stopping.wait(interval):
            self.wfile.write(b" ")
            self.wfile.flush()

    def _send(self, status: int, payload: dict[str, Any], retry_after: float | None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if retry_after is not None:
            self.send_header("Retry-After", f"{retry_after:g}")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests assert on `requests`, not on a log."""


@pytest.fixture
def openai_server() -> Iterator[OpenAIServer]:
    """A running `OpenAIServer` with an empty script, stopped after the test."""
    with OpenAIServer() as server:
        yield server
