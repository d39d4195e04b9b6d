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
        "mistakes": [{"category": "argument_error", "step": 1, "intended": "4021", "made": "4012"}],
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
    assert request.metadata["mistakes"][0]["intended"] == "4021"
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


def test_sim_reflection_names_each_mistake_in_step_order() -> None:
    mistakes = [
        {"category": "missing_call", "step": 3, "intended": {"name": "refund", "arguments": {"order_id": "4021"}}},
        {
            "category": "argument_error",
            "step": 1,
            "intended": {"name": "cancel_order", "arguments": {"order_id": "4021"}},
            "made": {"name": "cancel_order", "arguments": {"order_id": "4012"}},
        },
    ]
    text = sim_reflection(mistakes)
    assert text == sim_reflection(list(reversed(mistakes)))
    assert text.index("At step 1") < text.index("At step 3")
    assert 'cancel_order({"order_id":"4012"}) had wrong arguments' in text
    assert 'never made refund({"order_id":"4021"})' in text
    assert text.endswith(".") and "Next time," in text
    assert len(text) < 600


def test_sim_reflection_handles_unknown_categories_and_no_mistakes() -> None:
    text = sim_reflection([{"category": "Role Ambiguity", "step": 2, "intended": "ask", "made": "guessed"}])
    assert text == "At step 2 (role ambiguity) the agent did guessed; expected ask."
    assert "no specific mistake" in sim_reflection([])
