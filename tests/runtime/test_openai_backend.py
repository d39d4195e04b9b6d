"""The `openai` backend and embedder, through the real `openai` client against a scripted server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import numpy as np
import pytest

from faultline._errors import ConfigError, ModelError
from faultline.bus import free_port
from faultline.core import ChatMessage, LlmRequest, LlmToolCall, ModelCall
from faultline.runtime.models import (
    DEFAULT_MAX_TOKENS,
    OpenAIBackend,
    OpenAIEmbedder,
    OpenAISettings,
    parse_tool_arguments,
)
from tests.openai_server import Call, Delay, Endless, OpenAIServer, Status, Text, ToolCalls

LOOKUP_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "description": "Find an order by id.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
    },
}


def ask(text: str = "where is my order?", **fields: object) -> LlmRequest:
    return LlmRequest(
        role="agent",
        messages=[ChatMessage(role="system", content="You help customers."), ChatMessage(role="user", content=text)],
        **fields,  # type: ignore[arg-type]
    )


@pytest.fixture
async def backend(openai_server: OpenAIServer) -> AsyncIterator[OpenAIBackend]:
    async with OpenAIBackend(openai_server.settings()) as opened:
        yield opened


async def test_text_reply_carries_content_usage_model_and_finish_reason(
    openai_server: OpenAIServer, backend: OpenAIBackend
) -> None:
    openai_server.reply(Text("It ships tomorrow.", usage=(12, 4)))
    response = await backend.complete(ask())
    assert response.content == "It ships tomorrow."
    assert response.tool_calls == []
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (12, 4)
    assert response.model == "test-model"
    assert response.finish_reason == "stop"
    assert response.latency_s > 0
    assert response.metadata == {"attempts": 1}
    [sent] = openai_server.chat_requests
    assert sent["model"] == "test-model"
    assert sent["messages"] == [
        {"role": "system", "content": "You help customers."},
        {"role": "user", "content": "where is my order?"},
    ]
    assert "tools" not in sent


async def test_default_reply_is_deterministic(openai_server: OpenAIServer, backend: OpenAIBackend) -> None:
    first = await backend.complete(ask("hello there"))
    second = await backend.complete(ask("hello there"))
    assert first.content == second.content == "echo: hello there"
    assert first.usage == second.usage
    assert first.usage.total > 0


async def test_temperature_max_tokens_and_stop_are_sent(openai_server: OpenAIServer) -> None:
    async with OpenAIBackend(openai_server.settings(temperature=0.3, stop=("\n\n",))) as backend:
        await backend.complete(ask())
        await backend.complete(ask(temperature=0.9, max_tokens=64))
    configured, overridden = openai_server.chat_requests
    assert configured["temperature"] == 0.3
    assert configured["max_tokens"] == DEFAULT_MAX_TOKENS == 512
    assert configured["stop"] == ["\n\n"]
    assert overridden["temperature"] == 0.9
    assert overridden["max_tokens"] == 64


async def test_a_request_for_json_asks_for_a_json_object_or_its_schema_and_the_default_for_nothing(
    openai_server: OpenAIServer, backend: OpenAIBackend
) -> None:
    schema = {"type": "object", "properties": {"verdict": {"enum": ["yes", "no"]}}, "required": ["verdict"]}
    await backend.complete(ask(response_format="json"))
    await backend.complete(ask(response_format="json", response_schema=schema))
    await backend.complete(ask())
    json_asked, schema_asked, text_asked = openai_server.chat_requests
    assert json_asked["response_format"] == {"type": "json_object"}
    assert schema_asked["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": schema},
    }
    assert "response_format" not in text_asked


def test_the_default_response_format_is_left_out_of_the_encoding_so_old_digests_hold() -> None:
    assert b"response_" not in msgspec.json.encode(ask())
    assert msgspec.json.encode(ask(response_format="text")) == msgspec.json.encode(ask())
    assert b'"response_format":"json"' in msgspec.json.encode(ask(response_format="json"))


async def test_max_tokens_0_sends_no_limit(openai_server: OpenAIServer) -> None:
    async with OpenAIBackend(openai_server.settings(max_tokens=0)) as backend:
        await backend.complete(ask())
    assert "max_tokens" not in openai_server.chat_requests[0]
    assert "stop" not in openai_server.chat_requests[0]


async def test_a_model_that_never_stops_is_cut_at_max_tokens(openai_server: OpenAIServer) -> None:
    openai_server.reply(Endless())
    async with OpenAIBackend(openai_server.settings(max_tokens=16)) as backend:
        response = await backend.complete(ask())
    assert response.finish_reason == "length"
    assert response.usage.completion_tokens == 16
    assert response.content.split() == ["word"] * 16


async def test_an_answer_that_never_ends_is_cut_at_the_timeout_and_every_attempt_reported(
    openai_server: OpenAIServer,
) -> None:
    openai_server.reply(Endless(seconds_per_token=0.02), Endless(seconds_per_token=0.02))
    call = ModelCall(episode="e", agent="tool", role="agent")
    async with OpenAIBackend(openai_server.settings(max_tokens=0, timeout_s=0.3, max_retries=1)) as backend:
        with pytest.raises(ModelError, match=r"gave up after 2 attempts, last error: timed out after 0\.3s"):
            await backend.complete_call(ask(), call)
    assert [a.number for a in call.attempts] == [1, 2]
    assert all(a.error == "timed out after 0.3s" for a in call.attempts)
    assert all(0.3 <= a.latency_s < 2.0 for a in call.attempts)
    assert call.attempts[0].request_digest == call.attempts[1].request_digest != ""


async def test_every_attempt_is_reported_with_its_error_and_wait(openai_server: OpenAIServer) -> None:
    openai_server.reply(Status(500, "overloaded"), Status(503), Text("third time"))
    call = ModelCall(episode="e", agent="tool", role="agent")
    settings = openai_server.settings(max_retries=3, backoff_base_s=0.01, backoff_cap_s=0.01)
    async with OpenAIBackend(settings) as backend:
        response = await backend.complete_call(ask(), call)
    assert response.content == "third time"
    first, second, third = call.attempts
    assert (first.number, first.error) == (1, "HTTP 500 (overloaded)")
    assert second.error.startswith("HTTP 503")
    assert 0.0 <= first.wait_s <= 0.01
    assert (third.number, third.error, third.wait_s) == (3, "", 0.0)
    assert call.attempt == 3


async def test_failures_left_out_of_retry_on_end_the_call_at_once(openai_server: OpenAIServer) -> None:
    openai_server.reply(Status(500, "overloaded"), Text("never reached"))
    call = ModelCall(episode="e", agent="tool", role="agent")
    async with OpenAIBackend(openai_server.settings(max_retries=3, retry_on=("timeout",))) as backend:
        with pytest.raises(ModelError, match=r"HTTP 500 \(overloaded\)$") as caught:
            await backend.complete_call(ask(), call)
    assert caught.value.retryable is True, "a later call may work; this policy just does not retry it"
    assert len(openai_server.chat_requests) == 1
    assert [(a.number, a.wait_s) for a in call.attempts] == [(1, 0.0)]


def test_call_budget_counts_every_attempt_and_the_longest_waits() -> None:
    settings = OpenAISettings(timeout_s=10.0, max_retries=2, backoff_base_s=1.0, backoff_cap_s=1.5)
    assert settings.call_budget_s == 3 * 10.0 + 1.0 + 1.5


async def test_tool_call_is_mapped_and_tools_passed_through(
    openai_server: OpenAIServer, backend: OpenAIBackend
) -> None:
    openai_server.reply(ToolCalls([Call("lookup_order", {"order_id": "W123"}, id="call_a")]))
    response = await backend.complete(ask(tools=[LOOKUP_TOOL]))
    assert response.tool_calls == [LlmToolCall(id="call_a", name="lookup_order", arguments={"order_id": "W123"})]
    assert response.finish_reason == "tool_calls"
    assert openai_server.chat_requests[0]["tools"] == [LOOKUP_TOOL]


async def test_tool_history_is_sent_in_openai_shape(openai_server: OpenAIServer, backend: OpenAIBackend) -> None:
    call = LlmToolCall(id="call_a", name="lookup_order", arguments={"order_id": "W123"})
    broken = LlmToolCall(id="call_b", name="lookup_order", arguments_error="bad", raw_arguments="{order")
    request = LlmRequest(
        role="agent",
        messages=[
            ChatMessage(role="user", content="where is W123?"),
            ChatMessage(role="assistant", tool_calls=[call, broken]),
            ChatMessage(role="tool", tool_call_id="call_a", content='{"status": "shipped"}'),
        ],
    )
    await backend.complete(request)
    _, assistant, tool = openai_server.chat_requests[0]["messages"]
    assert assistant["content"] is None
    assert assistant["tool_calls"] == [
        {"id": "call_a", "type": "function", "function": {"name": "lookup_order", "arguments": '{"order_id":"W123"}'}},
        {"id": "call_b", "type": "function", "function": {"name": "lookup_order", "arguments": "{order"}},
    ]
    assert tool == {"role": "tool", "tool_call_id": "call_a", "content": '{"status": "shipped"}'}


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ('{"order_id": "W1"', "arguments are not valid JSON"),
        ('["W1"]', "arguments must be a JSON object, got an array"),
        ('"W1"', "arguments must be a JSON object, got a string"),
    ],
)
async def test_malformed_tool_arguments_become_an_error_the_agent_sees(
    openai_server: OpenAIServer, backend: OpenAIBackend, raw: str, error: str
) -> None:
    openai_server.reply(ToolCalls([Call("lookup_order", raw, id="call_x")]))
    response = await backend.complete(ask(tools=[LOOKUP_TOOL]))
    [call] = response.tool_calls
    assert call.name == "lookup_order"
    assert call.arguments == {}
    assert call.arguments_error.startswith(error)
    assert call.raw_arguments == raw


def test_empty_argument_string_means_no_arguments() -> None:
    assert parse_tool_arguments("") == ({}, "")
    assert parse_tool_arguments('{"a": 1}') == ({"a": 1}, "")


@pytest.mark.parametrize("status", [500, 503, 429])
async def test_transient_status_is_retried_then_succeeds(openai_server: OpenAIServer, status: int) -> None:
    openai_server.reply(Status(status), Text("second time lucky"))
    async with OpenAIBackend(openai_server.settings(max_retries=1)) as backend:
        response = await backend.complete(ask())
    assert response.content == "second time lucky"
    assert response.metadata == {"attempts": 2}
    assert len(openai_server.chat_requests) == 2


async def test_rate_limit_waits_at_least_the_retry_after_the_server_asks_for(openai_server: OpenAIServer) -> None:
    openai_server.reply(Status(429, "slow down", retry_after=0.3), Text("done"))
    async with OpenAIBackend(openai_server.settings(max_retries=1, backoff_cap_s=5.0)) as backend:
        response = await backend.complete(ask())
    assert response.content == "done"
    assert response.latency_s >= 0.3


async def test_client_error_fails_at_once(openai_server: OpenAIServer, backend: OpenAIBackend) -> None:
    openai_server.reply(Status(400, "messages is malformed"), Text("never reached"))
    with pytest.raises(ModelError, match=r"HTTP 400 \(messages is malformed\)") as caught:
        await backend.complete(ask())
    assert caught.value.retryable is False
    assert openai_server.url in str(caught.value)
    assert len(openai_server.chat_requests) == 1


async def test_persistent_server_error_names_endpoint_status_and_attempts(openai_server: OpenAIServer) -> None:
    openai_server.reply(Status(500), Status(500), Status(502))
    async with OpenAIBackend(openai_server.settings(max_retries=2)) as backend:
        with pytest.raises(ModelError) as caught:
            await backend.complete(ask())
    message = str(caught.value)
    assert openai_server.url in message
    assert "gave up after 3 attempts" in message
    assert "HTTP 502" in message
    assert caught.value.retryable is True
    assert len(openai_server.chat_requests) == 3


async def test_timeouts_are_retried_then_give_up(openai_server: OpenAIServer) -> None:
    openai_server.reply(Delay(30.0), Delay(30.0))
    async with OpenAIBackend(openai_server.settings(timeout_s=0.2, max_retries=1)) as backend:
        with pytest.raises(ModelError, match=r"gave up after 2 attempts, last error: timed out after 0\.2s"):
            await backend.complete(ask())
    assert len(openai_server.chat_requests) == 2


async def test_timeout_then_success(openai_server: OpenAIServer) -> None:
    openai_server.reply(Delay(30.0), Text("fast now"))
    async with OpenAIBackend(openai_server.settings(timeout_s=0.2, max_retries=1)) as backend:
        response = await backend.complete(ask())
    assert response.content == "fast now"


async def test_unreachable_endpoint_gives_a_clear_model_error() -> None:
    settings = OpenAISettings(
        base_url=f"http://127.0.0.1:{free_port()}/v1", model="m", api_key_env="", max_retries=1, backoff_base_s=0.0
    )
    async with OpenAIBackend(settings) as backend:
        with pytest.raises(ModelError, match=r"gave up after 2 attempts, last error: cannot connect") as caught:
            await backend.complete(ask())
    assert settings.base_url in str(caught.value)


async def test_api_key_is_read_from_the_named_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAULTLINE_TEST_KEY", "sk-test")
    with OpenAIServer(api_key="sk-test") as server:
        async with OpenAIBackend(server.settings(api_key_env="FAULTLINE_TEST_KEY")) as backend:
            assert (await backend.complete(ask("hi"))).content == "echo: hi"
        async with OpenAIBackend(server.settings(api_key_env="FAULTLINE_UNSET_KEY")) as backend:
            with pytest.raises(ModelError, match="HTTP 401.*FAULTLINE_UNSET_KEY is not set"):
                await backend.complete(ask("hi"))


def test_a_backend_without_a_model_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="no model set"):
        OpenAIBackend(OpenAISettings(api_key_env=""))


async def test_embeddings_are_unit_length_and_deterministic(openai_server: OpenAIServer) -> None:
    texts = ["cancel my order", "cancel the order please", "what is the weather"]
    async with OpenAIEmbedder(openai_server.settings(), batch_size=2) as embedder:
        first = await embedder.embed(texts)
        second = await embedder.embed(texts)
        assert embedder.dim == openai_server.embedding_dim
    assert first.dtype == np.float32
    assert first.shape == (3, openai_server.embedding_dim)
    np.testing.assert_allclose(np.linalg.norm(first, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(first, second)
    raw = openai_server.vector("cancel my order")
    assert np.linalg.norm(raw) != pytest.approx(1.0)
    np.testing.assert_allclose(first[0], raw / np.linalg.norm(raw), rtol=1e-5)
    assert first[0] @ first[1] > first[0] @ first[2]
    assert [len(body["input"]) for body in openai_server.embedding_requests] == [2, 1, 2, 1]


async def test_embedder_probe_learns_the_dimension(openai_server: OpenAIServer) -> None:
    async with OpenAIEmbedder(openai_server.settings()) as embedder:
        with pytest.raises(ModelError, match="embedding size unknown"):
            _ = embedder.dim
        assert await embedder.probe() == openai_server.embedding_dim


async def test_embedder_rejects_vectors_of_another_size(openai_server: OpenAIServer) -> None:
    async with OpenAIEmbedder(openai_server.settings(), dim=8) as embedder:
        with pytest.raises(ModelError, match="embedding of size 16, expected 8"):
            await embedder.embed(["hello"])


async def test_embeddings_retry_transient_errors(openai_server: OpenAIServer) -> None:
    openai_server.reply_embeddings(Status(503))
    async with OpenAIEmbedder(openai_server.settings(max_retries=1)) as embedder:
        vectors = await embedder.embed(["hello"])
    assert vectors.shape == (1, openai_server.embedding_dim)
    assert len(openai_server.embedding_requests) == 2


async def test_unreachable_embeddings_endpoint_gives_a_clear_model_error() -> None:
    settings = OpenAISettings(
        base_url=f"http://127.0.0.1:{free_port()}/v1", model="embed", api_key_env="", max_retries=0
    )
    async with OpenAIEmbedder(settings) as embedder:
        with pytest.raises(ModelError, match=r"model embed\): gave up after 1 attempt, last error: cannot connect"):
            await embedder.embed(["hello"])
