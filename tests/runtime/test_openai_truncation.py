"""A conversation longer than the model's context: refused, or shortened with `truncation = "auto"`.

The server counts a prompt's words as its tokens and refuses longer ones in llama.cpp's or
OpenAI's words, or answers HTTP 500 as llama.cpp does when its context fills while it
answers; the real `openai` client carries every request.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import msgspec
import pytest

from faultline._errors import ModelError
from faultline.core import ChatMessage, LlmRequest, LlmToolCall, ModelCall
from faultline.runtime.models import OpenAIBackend
from faultline.runtime.models._truncation import Overflow, fit, overflow
from tests.openai_server import CONTEXT_FILLED, OpenAIServer, Text, prompt_tokens

CONTEXT = 400
SYSTEM = "You help customers with their orders."
OPENING = "I want to return order W1 please."


def conversation(turns: int, words: int = 40) -> list[ChatMessage]:
    """The system prompt, the opening request, then `turns` rounds of a tool call, its result and the user's reply."""
    messages = [ChatMessage(role="system", content=SYSTEM), ChatMessage(role="user", content=OPENING)]
    for n in range(turns):
        call = LlmToolCall(id=f"call_{n}", name="lookup_order", arguments={"order_id": f"W{n}"})
        messages += [
            ChatMessage(role="assistant", tool_calls=[call]),
            ChatMessage(role="tool", tool_call_id=f"call_{n}", content=" ".join([f"detail{n}"] * words)),
            ChatMessage(role="assistant", content=f"Order W{n} is found."),
            ChatMessage(role="user", content=f"thanks, next is number {n + 1}"),
        ]
    return messages


@pytest.fixture(params=["llama.cpp", "openai"])
def small_server(request: pytest.FixtureRequest) -> Iterator[OpenAIServer]:
    style: Literal["llama.cpp", "openai"] = request.param
    with OpenAIServer(context_tokens=CONTEXT, context_style=style) as server:
        yield server


async def test_a_request_too_long_fails_at_once_by_default_and_says_how_to_shorten_it(
    small_server: OpenAIServer,
) -> None:
    call = ModelCall(episode="e", agent="tool", role="agent")
    async with OpenAIBackend(small_server.settings(max_retries=3)) as backend:
        with pytest.raises(ModelError, match=r'HTTP 400 .*; truncation = "auto" drops the oldest turns') as caught:
            await backend.complete_call(LlmRequest(role="agent", messages=conversation(12)), call)
    assert caught.value.retryable is False
    assert len(small_server.chat_requests) == 1
    assert len(call.attempts) == 1


async def test_auto_truncation_drops_the_oldest_middle_turns_and_keeps_the_head_and_the_last_turn(
    small_server: OpenAIServer,
) -> None:
    messages = conversation(12)
    call = ModelCall(episode="e", agent="tool", role="agent")
    async with OpenAIBackend(small_server.settings(truncation="auto", max_tokens=64)) as backend:
        response = await backend.complete_call(LlmRequest(role="agent", messages=messages), call)
    refused, answered = small_server.chat_requests
    assert prompt_tokens(refused) > CONTEXT >= prompt_tokens(answered) + 64 * 0.9
    sent = answered["messages"]
    assert [m["content"] for m in sent[:2]] == [SYSTEM, OPENING]
    assert sent[-2:] == refused["messages"][-2:], "the last turn is sent whole"
    assert sent[2]["role"] == "assistant", "the opening request is answered by the first turn kept"
    calls = {c["id"] for m in sent if m["role"] == "assistant" for c in m.get("tool_calls") or []}
    assert all(m["tool_call_id"] in calls for m in sent if m["role"] == "tool"), "no result without its call"
    dropped = len(refused["messages"]) - len(sent)
    assert dropped > 0 and dropped % 2 == 0
    assert sent[2:] == refused["messages"][2 + dropped :], "what is kept is the newest, in order"
    assert response.metadata == {"attempts": 2, "truncated": dropped}
    first, second = call.attempts
    assert first.error.endswith(f"sent again without its {dropped} oldest message(s) after the opening request")
    assert first.wait_s == 0.0
    assert first.request_digest != second.request_digest
    assert second.error == ""


async def test_a_cut_conversation_keeps_its_cut_so_each_later_request_begins_as_the_last_one_sent(
    small_server: OpenAIServer,
) -> None:
    """A server that keeps the prompt it last read (llama.cpp) then reads only the new turns; the cut leaves room
    for them, and a conversation cut afresh each time would be read whole each time."""
    call = ModelCall(episode="e", agent="tool", role="agent")
    async with OpenAIBackend(small_server.settings(truncation="auto", max_tokens=64)) as backend:
        await backend.complete_call(LlmRequest(role="agent", messages=conversation(12)), call)
        later = [
            await backend.complete_call(LlmRequest(role="agent", messages=conversation(n)), call) for n in (13, 14)
        ]
    refused, *answered = small_server.chat_requests
    assert len(answered) == 3, "no later request was refused first"
    assert prompt_tokens(answered[0]) <= 0.65 * (CONTEXT - 64)
    for before, after in zip(answered, answered[1:], strict=False):
        assert after["messages"][: len(before["messages"])] == before["messages"]
    dropped = len(refused["messages"]) - len(answered[0]["messages"])
    assert [r.metadata for r in later] == [{"attempts": 1, "truncated": dropped}] * 2


async def test_a_cut_is_kept_for_its_own_conversation_only(small_server: OpenAIServer) -> None:
    """Another episode's agent, or a conversation that no longer begins as it did, is sent whole first."""
    messages = conversation(12)
    rewritten = [*messages[:3], msgspec.structs.replace(messages[3], content="another result"), *messages[4:]]
    async with OpenAIBackend(small_server.settings(truncation="auto", max_tokens=64)) as backend:
        await backend.complete_call(LlmRequest(role="agent", messages=messages), ModelCall("e", "tool", "agent"))
        await backend.complete_call(LlmRequest(role="agent", messages=messages), ModelCall("f", "tool", "agent"))
        await backend.complete_call(LlmRequest(role="agent", messages=rewritten), ModelCall("e", "tool", "agent"))
    whole = [prompt_tokens(request) > CONTEXT for request in small_server.chat_requests]
    assert whole == [True, False] * 3


async def test_truncation_is_not_counted_as_a_retry(small_server: OpenAIServer) -> None:
    async with OpenAIBackend(small_server.settings(truncation="auto", max_retries=0)) as backend:
        response = await backend.complete(LlmRequest(role="agent", messages=conversation(12)))
    assert response.content.startswith("echo: thanks, next is number 12")


async def test_a_request_that_fits_is_sent_as_it_is(small_server: OpenAIServer) -> None:
    small_server.reply(Text("fine"))
    async with OpenAIBackend(small_server.settings(truncation="auto")) as backend:
        response = await backend.complete(LlmRequest(role="agent", messages=conversation(1)))
    assert response.metadata == {"attempts": 1}
    assert len(small_server.chat_requests[0]["messages"]) == 6


async def test_a_last_turn_longer_than_the_context_still_fails(small_server: OpenAIServer) -> None:
    long_reply = ChatMessage(role="user", content=" ".join(["more"] * CONTEXT))
    messages = [*conversation(2), ChatMessage(role="assistant", content="Go on."), long_reply]
    async with OpenAIBackend(small_server.settings(truncation="auto")) as backend:
        with pytest.raises(ModelError, match="still too long after dropping what truncation may drop"):
            await backend.complete(LlmRequest(role="agent", messages=messages))


async def test_a_context_that_filled_while_answering_is_not_retried_and_says_what_to_change(
    openai_server: OpenAIServer,
) -> None:
    """llama.cpp's HTTP 500 fails the same request again while the requests that share its context last: the call
    ends after one attempt, naming the server's context and truncation, instead of after every retry."""
    openai_server.reply(CONTEXT_FILLED, Text("never reached"))
    call = ModelCall(episode="e", agent="tool", role="agent")
    async with OpenAIBackend(openai_server.settings(max_retries=3)) as backend:
        with pytest.raises(ModelError, match=r"HTTP 500 \(Context size has been exceeded\.\); truncation") as caught:
            await backend.complete_call(LlmRequest(role="agent", messages=conversation(12)), call)
    assert "--ctx-size" in str(caught.value) and "gave up" not in str(caught.value)
    assert caught.value.retryable is True, "the same request may fit once the others are answered"
    assert len(openai_server.chat_requests) == 1
    assert [attempt.wait_s for attempt in call.attempts] == [0.0]


async def test_a_context_that_filled_while_answering_is_truncated_with_auto(openai_server: OpenAIServer) -> None:
    openai_server.reply(CONTEXT_FILLED, Text("fits now"))
    call = ModelCall(episode="e", agent="tool", role="agent")
    async with OpenAIBackend(openai_server.settings(truncation="auto", max_retries=0)) as backend:
        response = await backend.complete_call(LlmRequest(role="agent", messages=conversation(12)), call)
    refused, answered = openai_server.chat_requests
    dropped = len(refused["messages"]) - len(answered["messages"])
    assert response.content == "fits now"
    assert response.metadata == {"attempts": 2, "truncated": dropped}
    assert dropped > 0 and answered["messages"][-2:] == refused["messages"][-2:]
    assert call.attempts[0].error.startswith("HTTP 500 (Context size has been exceeded.); sent again without its")


async def test_a_context_that_filled_with_nothing_left_to_drop_fails_once_naming_the_server(
    openai_server: OpenAIServer,
) -> None:
    openai_server.reply(CONTEXT_FILLED)
    async with OpenAIBackend(openai_server.settings(truncation="auto", max_retries=3)) as backend:
        with pytest.raises(ModelError, match="still too long after dropping .*--ctx-size"):
            await backend.complete(LlmRequest(role="agent", messages=conversation(0)))
    assert len(openai_server.chat_requests) == 1


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            {
                "message": "request (418 tokens) exceeds the available context size (256 tokens), try increasing it",
                "type": "exceed_context_size_error",
                "n_prompt_tokens": 418,
                "n_ctx": 256,
            },
            Overflow(418, 256),
        ),
        (
            {
                "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in"
                " 9000 tokens. Please reduce the length of the messages.",
                "code": "context_length_exceeded",
            },
            Overflow(9000, 8192),
        ),
        (
            {
                "message": "This model's maximum context length is 2048 tokens. However, you requested 2100 tokens"
                " (1600 in the messages, 500 in the completion). Please reduce the length of the messages or"
                " completion.",
                "type": "BadRequestError",
            },
            Overflow(1600, 2048),
        ),
        ({"message": "prompt too long", "code": "context_length_exceeded"}, Overflow(0, 0)),
        ({"code": 500, "message": "Context size has been exceeded.", "type": "server_error"}, Overflow(0, 0)),
        ({"message": "the request exceeds the available context size, try increasing it"}, Overflow(0, 0)),
        ({"message": "messages is malformed", "type": "invalid_request_error"}, None),
        ("not a mapping", None),
    ],
)
def test_the_refusals_of_llama_cpp_openai_and_vllm_are_read(body: Any, expected: Overflow | None) -> None:
    assert overflow(body) == expected


def test_without_counts_half_the_middle_goes_and_without_a_middle_nothing_can() -> None:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    turns = [{"role": "assistant", "content": f"a{n}"} for n in range(4)]
    fitted = fit([*messages, *turns], None, Overflow(), 0)
    assert fitted is not None and fitted.dropped == 2
    assert fitted.messages == [*messages, *turns[2:]]
    assert fit([*messages, turns[0]], None, Overflow(), 0) is None
