"""The FAMA helpers and the tool agent's side of them, in-process (AgentHarness, sim or a scripted model)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from faultline.agents import PROTOCOL, EpisodeSpec, ToolAgent
from faultline.agents.helpers import (
    ConstraintsExtractor,
    Helper,
    OutputReformulator,
    Planner,
    ToolSuggester,
    UserContext,
    Verifier,
)
from faultline.core import (
    AgentHarness,
    AssistantTurn,
    ChatMessage,
    ContextReply,
    ContextRequest,
    Envelope,
    LlmRequest,
    LlmResponse,
    LlmToolCall,
    Notice,
    Start,
    Timer,
    TimerFired,
    ToolCall,
    ToolResult,
    UserTurn,
    helper_agent,
)
from faultline.envs import load_domain
from faultline.runtime.models import SimBackend

TASK = load_domain("retail").tasks()[0]


def start(helpers: list[str], **settings: Any) -> Start:
    return EpisodeSpec(domain="retail", task=TASK.id, helpers=helpers, **settings).start()


def said(role: str, content: str, **fields: Any) -> dict[str, Any]:
    return msgspec.to_builtins(ChatMessage(role=role, content=content, **fields))  # type: ignore[arg-type]


def reply_of(outputs: list[Envelope]) -> ContextReply:
    replies = [o.body for o in outputs if isinstance(o.body, ContextReply)]
    assert len(replies) == 1 and outputs[0].recipient == "tool"
    return replies[0]


class Scripted:
    """A model that answers from a list, and keeps the requests it got."""

    def __init__(self, *answers: LlmResponse) -> None:
        self.answers = list(answers)
        self.requests: list[LlmRequest] = []

    async def complete(self, request: LlmRequest) -> LlmResponse:
        self.requests.append(request)
        return self.answers.pop(0)

    async def aclose(self) -> None:
        return None


def call(name: str, **arguments: Any) -> LlmResponse:
    return LlmResponse(tool_calls=[LlmToolCall(id=f"c-{name}", name=name, arguments=arguments)])


async def ask(
    helper: Helper, *transcript: dict[str, Any], roster: list[str], **fields: Any
) -> tuple[list[Envelope], int]:
    """The helper's outputs for one request after its Start, and how many model calls it made."""
    harness = AgentHarness(helper, backend=SimBackend())
    assert await harness.deliver(start(roster)) == []
    request = ContextRequest(step=1, helpers=roster, transcript=list(transcript), **fields)
    outputs = await harness.deliver(request, sender="tool")
    return outputs, len(harness.recordings)


@pytest.mark.parametrize(
    ("helper", "expected"),
    [
        (ConstraintsExtractor(), "- "),
        (ToolSuggester(), "cancel_pending_order"),
        (Planner(), "1. "),
    ],
)
async def test_model_helpers_answer_with_one_recorded_sim_call(helper: Helper, expected: str) -> None:
    user = said("user", TASK.instruction)
    outputs, calls = await ask(helper, user, roster=[helper.entry])
    reply = reply_of(outputs)
    assert reply.step == 1 and reply.helper == helper.entry
    assert expected in reply.text
    assert calls == 1


async def test_memory_keeps_the_last_k_user_turns_verbatim_without_a_model() -> None:
    turns = [said("user", f"turn {i}") for i in range(4)]
    outputs, calls = await ask(UserContext(), *turns, roster=["memory:2"])
    reply = reply_of(outputs)
    assert reply.helper == "memory"
    assert reply.text.splitlines()[1:] == ["- turn 2", "- turn 3"]
    assert calls == 0


async def test_tor_restates_only_outputs_over_its_threshold() -> None:
    asked = said("assistant", "", tool_calls=[LlmToolCall(id="c1", name="get_order_details")])
    short = said("tool", '{"status": "pending"}', tool_call_id="c1", name="get_order_details")
    outputs, calls = await ask(OutputReformulator(), asked, short, roster=["tor"])
    assert reply_of(outputs).text == "" and calls == 0

    long = said("tool", '{"order_id": "#W1", "items": ' + str([{"sku": i} for i in range(200)]).replace("'", '"') + "}",
                tool_call_id="c1", name="get_order_details")  # fmt: skip
    outputs, calls = await ask(OutputReformulator(), asked, long, roster=["tor"])
    text = reply_of(outputs).text
    assert "- order_id: #W1" in text and len(text) < len(long["content"]) / 10
    assert calls == 1


async def test_verifier_passes_the_ground_truth_call_and_rechecks_another_with_the_fix() -> None:
    user = said("user", TASK.instruction + " " + " ".join(TASK.user_facts.values()))
    right = TASK.actions[0].as_dict()
    reply = reply_of((await ask(Verifier(), user, roster=["verifier"], proposal=right))[0])
    assert reply.verdict == "PASS"

    wrong = {"name": right["name"], "arguments": {k: "nobody" for k in right["arguments"]}}
    reply = reply_of((await ask(Verifier(), user, roster=["verifier"], proposal=wrong))[0])
    assert reply.verdict == "RECHECK"
    assert reply.data == {"call": right}


def confirmation(action: dict[str, Any]) -> str:
    return f"I am about to run {action['name']} with {json.dumps(action['arguments'], sort_keys=True)}. Proceed?"


@pytest.mark.parametrize(
    ("reply", "verdict"),
    [
        ("Could you please tell me your email?", "PASS"),  # asks what the next step needs
        ("I have done what I can for now. Goodbye.", "RECHECK"),  # hands the turn back with work left
        (confirmation(TASK.actions[0].as_dict()), "PASS"),
        (confirmation({"name": TASK.actions[0].name, "arguments": {"email": "someone.else@example.com"}}), "RECHECK"),
        (confirmation(TASK.actions[2].as_dict()), "RECHECK"),  # a later action than the next one
    ],
)
async def test_the_verifier_reviews_a_message_to_the_user_from_its_text(reply: str, verdict: str) -> None:
    user = said("user", TASK.instruction)
    harness = AgentHarness(Verifier(), backend=SimBackend())
    await harness.deliver(start(["verifier"]))
    request = ContextRequest(step=1, helpers=["verifier"], transcript=[user], proposal={"reply": reply})
    answer = reply_of(await harness.deliver(request, sender="tool"))
    assert answer.verdict == verdict
    if verdict == "RECHECK":
        assert answer.data == {"call": TASK.actions[0].as_dict()}
    [recorded] = harness.recordings  # one model call, journaled as every other
    assert recorded.request.metadata["proposal"] == {"reply": reply}
    assert "message to the user" in recorded.request.messages[0].content
    assert recorded.request.messages[-1].content.startswith(f"Proposed message to the user: {reply}")


@pytest.mark.parametrize(("reply", "verdict"), [("All done: there are 4 of them.", "PASS"), ("All done.", "RECHECK")])
async def test_with_every_action_done_the_verifier_passes_only_a_message_with_the_required_facts(
    reply: str, verdict: str
) -> None:
    task = next(t for t in load_domain("retail").tasks() if t.outputs == ["4"])
    transcript = [said("user", task.instruction)]
    for i, action in enumerate(task.actions):
        made = LlmToolCall(id=f"c{i}", name=action.name, arguments=dict(action.arguments))
        transcript += [
            said("assistant", "", tool_calls=[made]),
            said("tool", "{}", tool_call_id=f"c{i}", name=action.name),
        ]
    harness = AgentHarness(Verifier(), backend=SimBackend())
    await harness.deliver(EpisodeSpec(domain="retail", task=task.id, helpers=["verifier"]).start())
    request = ContextRequest(step=3, helpers=["verifier"], transcript=transcript, proposal={"reply": reply})
    answer = reply_of(await harness.deliver(request, sender="tool"))
    assert answer.verdict == verdict
    if verdict == "RECHECK":
        assert answer.data == {"final": "Tell the user: 4."}


async def test_a_malformed_verifier_answer_is_one_notice_and_no_verdict() -> None:
    harness = AgentHarness(Verifier(), backend=Scripted(LlmResponse(content="Looks fine to me.")))
    await harness.deliver(start(["verifier"]))
    request = ContextRequest(step=3, helpers=["verifier"], proposal={"name": "x", "arguments": {}})
    outputs = await harness.deliver(request, sender="tool")
    notices = [o.body for o in outputs if isinstance(o.body, Notice)]
    assert len(notices) == 1 and "no <reflect>" in notices[0].text
    assert notices[0].data["answer"] == "Looks fine to me."
    assert reply_of([o for o in outputs if isinstance(o.body, ContextReply)]).verdict == ""


def written(name: str, **arguments: Any) -> LlmResponse:
    """A tool call in the text format, inside a sentence (`tool_calls` "text")."""
    return LlmResponse(content=f'I will do that. {{"tool": "{name}", "arguments": {json.dumps(arguments)}}}')


@pytest.mark.parametrize(("tool_calls", "proposed"), [("native", call), ("text", written)])
async def test_a_recheck_leads_to_one_revised_call_that_runs(tool_calls: str, proposed: Any) -> None:
    model = Scripted(proposed("cancel_pending_order", order_id="#W0"), proposed("cancel_pending_order", order_id="#W1"))
    harness = AgentHarness(ToolAgent(), backend=model)
    await harness.deliver(start(["verifier"], verifier_revisions=1, tool_calls=tool_calls))
    outputs = await harness.deliver(UserTurn(text="cancel my order"), sender="user")
    [request] = [o.body for o in outputs if isinstance(o.body, ContextRequest)]
    assert request.proposal == {"name": "cancel_pending_order", "arguments": {"order_id": "#W0"}}
    assert any(isinstance(o.body, Timer) for o in outputs)

    recheck = ContextReply(step=1, helper="verifier", verdict="RECHECK", text="wrong order; fix: call with #W1")
    outputs = await harness.deliver(recheck, sender="verifier")
    [sent] = [o.body for o in outputs if isinstance(o.body, ToolCall)]
    assert sent.arguments == {"order_id": "#W1"}
    revised = model.requests[-1]
    assert revised.metadata["rechecks"] == 1 and "RECHECK" in revised.messages[0].content
    assert await harness.deliver(TimerFired(data={"step": 1, "revision": 0}), sender="runner") == []


async def test_a_message_to_the_user_goes_to_the_verifier_first_and_a_recheck_revises_it_once() -> None:
    model = Scripted(LlmResponse(content="Goodbye."), LlmResponse(content="Which order should I cancel?"))
    harness = AgentHarness(ToolAgent(), backend=model)
    await harness.deliver(start(["verifier"], verifier_revisions=1, protocol=PROTOCOL))
    outputs = await harness.deliver(UserTurn(text="cancel my order"), sender="user")
    [request] = [o.body for o in outputs if isinstance(o.body, ContextRequest)]
    assert request.proposal == {"reply": "Goodbye."} and not [o for o in outputs if isinstance(o.body, AssistantTurn)]

    recheck = ContextReply(step=1, helper="verifier", verdict="RECHECK", text="work is left; fix: ask for the order")
    outputs = await harness.deliver(recheck, sender="verifier")
    [sent] = [o.body for o in outputs if isinstance(o.body, AssistantTurn)]
    assert sent.text == "Which order should I cancel?"  # the last revision allowed is sent unreviewed
    assert "RECHECK of your proposed message to the user: work is left" in model.requests[-1].messages[0].content


@pytest.mark.parametrize(("protocol", "reviewed"), [(PROTOCOL, True), (4, False)])
async def test_a_passed_message_is_sent_and_journals_of_protocol_4_send_it_unreviewed(
    protocol: int, reviewed: bool
) -> None:
    harness = AgentHarness(ToolAgent(), backend=Scripted(LlmResponse(content="Which order?")))
    await harness.deliver(start(["verifier"], protocol=protocol))
    outputs = await harness.deliver(UserTurn(text="cancel my order"), sender="user")
    assert bool([o for o in outputs if isinstance(o.body, ContextRequest)]) is reviewed
    if reviewed:
        outputs = await harness.deliver(ContextReply(step=1, helper="verifier", verdict="PASS"), sender="verifier")
    assert [o.body.text for o in outputs if isinstance(o.body, AssistantTurn)] == ["Which order?"]


async def test_helpers_that_miss_the_wait_are_named_and_the_decision_goes_on() -> None:
    model = Scripted(LlmResponse(content="How can I help?"))
    harness = AgentHarness(ToolAgent(), backend=model)
    await harness.deliver(start(["dce", "memory:6"]))

    outputs = await harness.deliver(UserTurn(text="hello"), sender="user")
    assert sorted(o.recipient for o in outputs if isinstance(o.body, ContextRequest)) == ["dce", "user_context"]
    memory = ContextReply(step=1, helper="memory", text="The user said: hello")
    assert [o.body for o in await harness.deliver(memory, sender="user_context")] == []
    outputs = await harness.deliver(TimerFired(data={"step": 1, "revision": 0}), sender="runner")
    [notice] = [o.body for o in outputs if isinstance(o.body, Notice)]
    assert notice.data["missing"] == ["dce"]
    assert "[memory] The user said: hello" in model.requests[0].messages[0].content
    late = ContextReply(step=1, helper="dce", text="too late")
    assert await harness.deliver(late, sender="dce") == []


def asked(outputs: list[Envelope]) -> list[str]:
    return sorted(o.recipient for o in outputs if isinstance(o.body, ContextRequest))


async def answer_all(harness: AgentHarness, step: int, answers: dict[str, str]) -> list[Envelope]:
    """Each helper's reply for decision `step`; the outputs after the last one (the decision)."""
    outputs: list[Envelope] = []
    for helper, text in answers.items():
        outputs = await harness.deliver(ContextReply(step=step, helper=helper, text=text), sender=helper_agent(helper))
    return outputs


@pytest.mark.parametrize("protocol", [PROTOCOL, 3])
async def test_a_helper_is_asked_again_only_when_the_conversation_can_change_its_answer(protocol: int) -> None:
    """From protocol 4 the planner is asked when the user spoke or a tool failed, memory when the user
    spoke, the output reformulator after a long output; their last answers stand meanwhile. Protocol 3
    journals replay as they were written: every helper before every decision."""
    model = Scripted(*(call("get_order_details", order_id=f"#W{i}") for i in range(4)))
    harness = AgentHarness(ToolAgent(), backend=model)
    await harness.deliver(start(["dce", "planner", "memory:6", "tor"], tor_threshold=40, protocol=protocol))
    everyone = ["dce", "planner", "tor", "user_context"]

    assert asked(await harness.deliver(UserTurn(text="where is my order?"), sender="user")) == everyone
    notes = {"dce": "rule 1", "planner": "1. look it up", "memory": "The user said: where", "tor": ""}
    [decided] = [o.body for o in await answer_all(harness, 1, notes) if isinstance(o.body, ToolCall)]

    short = ToolResult(call_id=decided.call_id, name=decided.name, output="shipped")
    outputs = await harness.deliver(short, sender="env")
    if protocol < PROTOCOL:
        assert asked(outputs) == everyone
        return
    assert asked(outputs) == ["dce"]
    await answer_all(harness, 2, {"dce": "rule 2"})
    prompt = model.requests[-1].messages[0].content
    assert "[planner] 1. look it up" in prompt and "[memory] The user said: where" in prompt
    assert "[dce] rule 2" in prompt and "[tor]" not in prompt

    long = ToolResult(call_id="c-2", name="get_order_details", output="x" * 41)
    assert asked(await harness.deliver(long, sender="env")) == ["dce", "tor"]
    await answer_all(harness, 3, {"dce": "rule 3", "tor": "the facts"})
    failed = ToolResult(call_id="c-3", name="get_order_details", error="no such order")
    assert asked(await harness.deliver(failed, sender="env")) == ["dce", "planner", "tor"]
    missed = await harness.deliver(TimerFired(data={"step": 4, "revision": 0}), sender="runner")
    [notice] = [o.body for o in missed if isinstance(o.body, Notice)]
    assert notice.data["missing"] == ["dce", "planner", "tor"]
    assert asked(await harness.deliver(UserTurn(text="thanks"), sender="user")) == everyone
