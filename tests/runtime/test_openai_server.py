"""The scripted test server itself: clean shutdown and the routes other tests rely on."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.openai_server import Delay, OpenAIServer, Status


def post(url: str, body: dict[str, object], timeout: float = 5.0) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def post_expecting_hangup(url: str, outcome: list[str]) -> None:
    try:
        post(url, {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    except ConnectionError as exc:
        outcome.append(type(exc).__name__)


def server_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "openai-test-server"]


def test_stop_wakes_delayed_replies_and_joins_every_thread() -> None:
    server = OpenAIServer()
    server.start()
    server.reply(Delay(60.0))
    outcome: list[str] = []
    waiting = threading.Thread(target=post_expecting_hangup, args=(server.url + "/chat/completions", outcome))
    waiting.start()
    server.wait_for_requests(1)
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 5.0
    waiting.join(timeout=5.0)
    assert not waiting.is_alive()
    assert outcome == ["RemoteDisconnected"]
    assert server_threads() == []


def test_invalid_chat_request_is_a_400_and_unknown_route_a_404(openai_server: OpenAIServer) -> None:
    status, body = post(openai_server.url + "/chat/completions", {"model": "m", "messages": []})
    assert status == 400
    assert "non-empty list" in str(body["error"])
    status, _ = post(openai_server.url + "/nowhere", {})
    assert status == 404


def test_scripted_status_carries_retry_after(openai_server: OpenAIServer) -> None:
    openai_server.reply(Status(429, "slow down", retry_after=2))
    request = urllib.request.Request(
        openai_server.url + "/chat/completions",
        data=json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode(),
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=5.0)
    with caught.value as error:
        assert error.code == 429
        assert error.headers["Retry-After"] == "2"
    assert openai_server.pending == 0


def test_embeddings_honour_requested_dimensions_and_base64(openai_server: OpenAIServer) -> None:
    status, body = post(openai_server.url + "/embeddings", {"model": "e", "input": "hi", "dimensions": 4})
    assert status == 200
    assert len(body["data"][0]["embedding"]) == 4  # type: ignore[index]
    base64_body = {"model": "e", "input": ["a", "b"], "encoding_format": "base64"}
    status, body = post(openai_server.url + "/embeddings", base64_body)
    assert status == 200
    assert all(isinstance(item["embedding"], str) for item in body["data"])  # type: ignore[union-attr]
