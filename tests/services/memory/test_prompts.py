"""The extractor's request, the tool agent's in-context examples, and the offline critique writer."""

from __future__ import annotations

from faultline.core import LlmRequest
from faultline.services.memory import (
    ExtractionInput,
    MemoryEntry,
    PromptSettings,
    ScoredEntry,
    ToolCallRecord,
    ToolExchange,
    extractor_request,
    format_examples,
    sim_reflection,
)

PAST_FAILURE = MemoryEntry(
    id="old-1",
    episode="old-1",
    domain="retail",
    query="cancel order 881 and refund the card",
    feedback=0,
    calls=[ToolCallRecord(name="cancel_order", arguments={"order_id": "818"})],
    reflection="The agent swapped two digits of the order id.",
)
PAST_SUCCESS = MemoryEntry(
    id="old-2",
    episode="old-2",
    domain="retail",
    query="cancel order 12",
    feedback=1,
    calls=[ToolCallRecord(name="cancel_order", arguments={"order_id": "12"})],
)
TOOLS = [
    {"type": "function", "function": {"name": "cancel_order", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "refund", "parameters": {"type": "object"}}},
]


def failed_run(**changes: object) -> ExtractionInput:
    fields: dict[str, object] = {
        "query": "Cancel order 4021 and refund it to my card",
        "feedback": 0,
        "tools": TOOLS,
        "exchanges": [
            ToolExchange(
                call=ToolCallRecord(name="cancel_order", arguments={"order_id": "4012"}),
                response='{"status": "cancelled", "order_id": "4012"}',
            ),
            ToolExchange(call=ToolCallRecord(name="refund", arguments={"order_id": "4012"}), error="not allowed"),
        ],
        "reply": "Your order is cancelled.",
        "similar": [PAST_FAILURE, PAST_SUCCESS],
        "domain": "retail",
    }
    fields.update(changes)
    return ExtractionInput(**fields)  # type: ignore[arg-type]


def test_extractor_request_holds_every_input() -> None:
    request = extractor_request(failed_run())
    assert isinstance(request, LlmRequest)
    assert request.role == "memory_extractor"
    system, user = request.messages
    assert (system.role, user.role) == ("system", "user")
    assert "unsuccessful" in system.content and "at least one mistake" in system.content
    text = user.content
    for part in [
        "Cancel order 4021 and refund it to my card",  # query
        '"name":"cancel_order"',  # tool schemas
        '"name":"refund"',
        '{"arguments":{"order_id":"4012"},"name":"cancel_order"}',  # the agent's calls
        '"status": "cancelled"',  # environment response
        "error: not allowed",
        "Your order is cancelled.",
        "unsuccessful (0)",  # feedback
        "cancel order 881 and refund the card",  # similar entries, with their critique
        "The agent swapped two digits of the order id.",
    ]:
        assert part in text, part
    assert text.index("## Request") < text.index("## Similar past requests") < text.index("## What the assistant did")
    assert request.metadata == {"purpose": "memory_extraction", "style": "critique", "domain": "retail"}
    assert request.tools == []


def test_extractor_request_respects_its_limits() -> None:
    long = ToolExchange(call=ToolCallRecord(name="refund"), response="x" * 5000)
    settings = PromptSettings(role="critic", max_similar=1, response_chars=100, max_tokens=77)
    request = extractor_request(failed_run(exchanges=[long]), settings)
    text = request.messages[1].content
    assert request.role == "critic" and request.max_tokens == 77
    assert "x" * 100 + " ... [4900 more characters]" in text
    assert PAST_FAILURE.query in text and PAST_SUCCESS.query not in text


def test_preference_style_asks_for_recurring_patterns() -> None:
    request = extractor_request(failed_run(style="preferences", feedback=1, exchanges=[], similar=[]))
    assert "at least two requests" in request.messages[0].content
    assert "No tool was called." in request.messages[1].content
    assert "Similar past requests" not in request.messages[1].content
    assert request.metadata["style"] == "preferences"


def test_requests_are_deterministic() -> None:
    assert extractor_request(failed_run()) == extractor_request(failed_run())


def test_examples_tell_the_agent_to_learn_from_incorrect_entries() -> None:
    block = format_examples([ScoredEntry(entry=PAST_FAILURE, score=0.8), PAST_SUCCESS])
    assert "unsuccessful" in block and "do not repeat that mistake" in block
    assert block.index("Example 1") < block.index(PAST_FAILURE.query) < block.index("Example 2")
    assert "Critique: The agent swapped two digits" in block
    assert "Outcome: successful" in block
    assert '"order_id":"12"' in block
    assert format_examples([]) == ""


def test_examples_can_be_split_by_feedback() -> None:
    block = format_examples([PAST_FAILURE, PAST_SUCCESS], split_by_feedback=True)
    satisfied = block.index("satisfied with\n")
    unsatisfied = block.index("not satisfied with\n")
    assert satisfied < block.index(PAST_SUCCESS.query) < unsatisfied < block.index(PAST_FAILURE.query)


def test_sim_reflection_names_what_the_run_shows() -> None:
    run = failed_run()
    text = sim_reflection(run.exchanges, run.reply)
    assert text == sim_reflection(list(run.exchanges), run.reply)
    assert text.startswith("The run failed after 2 tool calls.")
    assert 'The call {"arguments":{"order_id":"4012"},"name":"refund"} was refused: not allowed.' in text
    assert "cancel_order" not in text  # a call the tool accepted is no refusal
    assert 'The last reply to the user was: "Your order is cancelled."' in text
    assert "read why a call was refused" in text and text.endswith(".")
    assert "4021" not in text  # what the run should have done is not in the run: the critique cannot know it


def test_sim_reflection_of_a_run_without_calls_or_reply() -> None:
    text = sim_reflection([], "")
    assert text.startswith("The run failed without calling any tool.")
    assert "carry out the request with the tools" in text and "last reply" not in text
    assert "refused" not in sim_reflection(failed_run().exchanges[:1], "")
