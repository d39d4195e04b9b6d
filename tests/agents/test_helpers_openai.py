"""Each helper through the `openai` backend: the real `openai` client against the test's server."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from faultline.agents.helpers import ConstraintsExtractor, Helper, OutputReformulator, Planner, ToolSuggester, Verifier
from faultline.core import AgentHarness, ContextReply, ContextRequest, LlmToolCall
from faultline.runtime.models import OpenAIBackend
from tests.agents.test_helpers import TASK, said, start
from tests.openai_server import OpenAIServer, Text

ORDER = said("assistant", "", tool_calls=[LlmToolCall(id="c1", name="get_order_details")])
LONG = said("tool", '{"order_id": "#W1", "note": "' + "x" * 2000 + '"}', tool_call_id="c1", name="get_order_details")


@pytest.mark.parametrize(
    ("helper", "answer", "prompt_says", "fields"),
    [
        (ConstraintsExtractor(), "- Cancel only pending orders.", "domain constraints", {}),
        (ToolSuggester(), "- cancel_pending_order: the user wants to cancel", "suggest tools", {}),
        (OutputReformulator(), "- order_id: #W1", "restate tool outputs", {}),
        (Planner(), "1. find the user\n2. cancel the order", "numbered plan", {}),
        (
            Verifier(),
            '<reflect>RECHECK: wrong order</reflect>\n<call>[{"name": "cancel_pending_order", "arguments": {"order_id": "#W1"}}]</call>',
            "review a support agent's proposed tool call",
            {"proposal": {"name": "cancel_pending_order", "arguments": {"order_id": "#W0"}}},
        ),
    ],
    ids=["dce", "tsa", "tor", "planner", "verifier"],
)
async def test_a_helper_asks_the_model_with_its_own_prompt_and_the_call_is_recorded(
    helper: Helper, answer: str, prompt_says: str, fields: dict[str, Any]
) -> None:
    with OpenAIServer() as server:
        server.reply(Text(answer))
        async with OpenAIBackend(server.settings()) as backend:
            harness = AgentHarness(helper, backend=backend)
            await harness.deliver(start([helper.entry]))
            transcript = [said("user", TASK.instruction), ORDER, LONG]
            request = ContextRequest(step=2, helpers=[helper.entry], transcript=transcript, **fields)
            [out] = await harness.deliver(request, sender="tool")
        [sent] = server.requests
    reply = out.body
    assert isinstance(reply, ContextReply) and reply.step == 2 and reply.helper == helper.entry
    if isinstance(helper, Verifier):
        assert reply.verdict == "RECHECK"
        assert reply.data == {"call": {"name": "cancel_pending_order", "arguments": {"order_id": "#W1"}}}
    else:
        assert reply.text == answer
    system = sent.body["messages"][0]["content"]
    assert prompt_says in system.lower()
    assert [r.call for r in harness.recordings] == ["llm"]
    assert msgspec.to_builtins(harness.recordings[0].response)["content"] == answer
