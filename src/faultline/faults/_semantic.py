"""Response rewriting by the fault-injector model (MAS-FIRE semantic-level mutations).

Each type has one template, written here: the injector model (role `injector`,
asked through the sending agent's context, so the exchange is journaled and
replay serves it) gets the message and answers with the faulted one between
`<rewrite>` tags; a tool call travels as JSON `{"name", "arguments"}`. An
answer without that block, with JSON that does not parse into a call, or equal
to the message, is not a fault: the message goes out unchanged and the
interceptor journals `FaultSkipped`.

The offline `sim` model answers injector requests with `simulate`: one
deterministic rule per type over the message in the request (a plausible wrong
id, the sentence holding a constraint removed, a similar but wrong tool, a step
naming a tool that does not exist). Like the rest of `sim` it exercises the
mechanism, never a model.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from faultline._errors import AnswerFormatError, ModelError
from faultline.core import ChatMessage, Envelope, LlmRequest, ToolCall
from faultline.faults._registry import FaultSite, FaultType, register_fault

INJECTOR_ROLE = "injector"
"""The model role of the fault-injector model (`[models.injector]` in faultline.toml)."""

_TEXT_KINDS = frozenset({"assistant_turn", "user_turn", "context_reply", "note"})
"""Bodies whose `text` an injector rewrites: the conversation, helpers' answers, and the notes of systems of one's own."""
_CALL_KINDS = frozenset({"tool_call"})

SYSTEM = (
    "You inject one fault into a message of a multi-agent system, so that its builders can see how the "
    "system copes. The fault: {fault}\n"
    "Keep the message's language, tone, form and length, and change nothing the fault does not need. "
    "{form}Answer with the faulted message only, between <rewrite> and </rewrite>."
)
TEXT_FORM = ""
CALL_FORM = 'The message is a tool call as JSON {{"name": ..., "arguments": {{...}}}}; answer in the same JSON form. '

TEMPLATES = {
    "hallucination": (
        "replace one verified fact (an id, a number, a name, a date or a status) by a plausible but wrong one, "
        "or state something uncertain as certain; the result must read as confidently as the original."
    ),
    "inexecutable_plan": (
        "make the plan or next step impossible to carry out: refer to a tool or agent that does not exist, "
        "make two steps wait on each other, or put a step before the one it needs. Tools that exist: {tools}."
    ),
    "critical_information_loss": (
        "remove the one constraint, condition, limit, id or piece of context the reader most needs to act "
        "correctly, and nothing else."
    ),
    "tool_selection_error": (
        "replace the tool by a semantically similar but wrong one from this list, keeping the arguments: {tools}."
    ),
    "parameter_filling_error": (
        "change one argument's value to a plausible but wrong one of the same type (another id of the same "
        "form, a nearby number, a similar name), keeping the tool and every other argument."
    ),
    "instruction_logic_conflict": (
        "the message is a user's task instruction; add one constraint, in the user's voice, that contradicts "
        "what the instruction asks for, so that both cannot be satisfied."
    ),
    "instruction_ambiguity": (
        "the message is a user's task instruction; replace its concrete terms (ids, numbers, e-mail addresses, "
        "names of items) by vague words, so that what is meant can no longer be told for sure."
    ),
    "call_order_swap": (
        "the message is a tool call made before a step it depends on; write, instead of the call, the error "
        "message the tool returns for it: that the call was refused because a required earlier step is missing, "
        "without saying which call would be right."
    ),
    "redundant_call": (
        "the message is a tool call that repeats the call made just before it; write, instead of the call, the "
        "error message the tool returns for it: that the request is a duplicate and was not carried out again."
    ),
}
"""One template per fault type the injector makes: the semantic ones, the two instruction faults, and the
errors of the two tool-call perturbations (`_types`)."""

_REWRITE = re.compile(r"<rewrite>(.*?)</rewrite>", re.DOTALL)


def injector_request(fault: str, message: str, *, tools: Sequence[str], call: bool, seed: str) -> LlmRequest:
    """The injector's request for faulting `message` (text, or a call as JSON)."""
    system = SYSTEM.format(
        fault=TEMPLATES[fault].format(tools=", ".join(tools) or "(unknown)"), form=CALL_FORM if call else TEXT_FORM
    )
    return LlmRequest(
        role=INJECTOR_ROLE,
        messages=[ChatMessage(role="system", content=system), ChatMessage(role="user", content=message)],
        temperature=0.0,
        metadata={"sim": INJECTOR_ROLE, "fault": fault, "tools": list(tools), "seed": seed, "call": call},
    )


def rewritten(answer: str) -> str:
    """The text between the answer's `<rewrite>` tags; AnswerFormatError if there is none."""
    found = _REWRITE.search(answer)
    if found is None or not found.group(1).strip():
        raise AnswerFormatError("the injector's answer holds no <rewrite> block (a refusal or a malformed answer)")
    return found.group(1).strip()


def known_tools(site: FaultSite) -> list[str]:
    """The tools the injector may name: the task's, else those the sender has called so far."""
    return site.tools() or sorted({c.name for c in site.calls})


async def injected(
    fault: str, env: Envelope, site: FaultSite, message: str, *, tools: Sequence[str], call: bool
) -> str:
    """The injector's rewrite of `message` (text, or a call as JSON) for `fault` on `env`, asked with
    the seed of (rule, message); AnswerFormatError if its answer holds none."""
    request = injector_request(fault, message, tools=tools, call=call, seed=f"{site.rule.id}/{env.id}")
    return rewritten((await site.llm(env, request)).content)


def call_json(name: str, arguments: dict[str, Any]) -> str:
    """A tool call as the injector reads it: JSON `{"name", "arguments"}`."""
    return json.dumps({"name": name, "arguments": arguments}, sort_keys=True)


def _parsed_call(text: str) -> tuple[str, dict[str, Any]]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AnswerFormatError(f"the injector's tool call is not JSON: {exc.msg} at character {exc.pos}") from None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        raise AnswerFormatError("the injector's tool call has no name - at $.name")
    arguments = value.get("arguments", {})
    if not isinstance(arguments, dict):
        raise AnswerFormatError("the injector's tool call arguments are not an object - at $.arguments")
    return value["name"], arguments


class SemanticFault(FaultType):
    """A fault the injector model makes; subclasses name it and say which kinds it rewrites."""

    mechanism = "semantic"
    kinds = _TEXT_KINDS

    def apply(self, env: Envelope, params: Any, site: FaultSite) -> list[Envelope] | None:
        raise ModelError(f"{self.name} needs the fault-injector model")

    async def rewrite(self, env: Envelope, params: Any, site: FaultSite) -> list[Envelope] | None:
        body = env.body
        call = isinstance(body, ToolCall)
        original = (
            call_json(body.name, body.arguments) if isinstance(body, ToolCall) else str(getattr(body, "text", ""))
        )
        if not original:
            return None
        text = await injected(self.name, env, site, original, tools=known_tools(site), call=call)
        if text == original:
            raise ModelError("the injector returned the message unchanged")
        if isinstance(body, ToolCall):
            name, arguments = _parsed_call(text)
            faulted: Any = ToolCall(call_id=body.call_id, name=name, arguments=arguments)
        else:
            faulted = msgspec.structs.replace(body, text=text)
        return [msgspec.structs.replace(env, body=faulted)]


@register_fault
class Hallucination(SemanticFault):
    name = "hallucination"
    summary = "the injector replaces a verified fact by a plausible wrong one"


@register_fault
class InexecutablePlan(SemanticFault):
    name = "inexecutable_plan"
    summary = "the injector makes a plan or next step impossible (a tool that does not exist, a circular step)"


@register_fault
class CriticalInformationLoss(SemanticFault):
    name = "critical_information_loss"
    summary = "the injector removes the constraint or fact the reader most needs"


@register_fault
class ToolSelectionError(SemanticFault):
    name = "tool_selection_error"
    summary = "the injector replaces the intended tool by a similar but wrong one (same arguments)"
    kinds = _CALL_KINDS


@register_fault
class ParameterFillingError(SemanticFault):
    name = "parameter_filling_error"
    summary = "the injector changes one argument to a plausible wrong value of the same type"
    kinds = _CALL_KINDS


# -- the offline model's rules -------------------------------------------------------------------------------

_FACT = re.compile(r"#?[A-Za-z]*\d[\w-]*")
_SENTENCE = re.compile(r"((?<=[.!?])\s+|\n+)")
_CONSTRAINT = re.compile(
    r"\b(must|only|not|never|unless|before|after|at least|at most|no more|cannot|can't|don't|within)\b", re.I
)
"""A sentence that holds a constraint; failing one, the first sentence with a number or id goes."""


def _wrong_digit(token: str, rng: random.Random) -> str:
    digits = [i for i, c in enumerate(token) if c.isdigit()]
    at = digits[-1] if len(digits) < 2 else rng.choice(digits[1:])
    return token[:at] + str((int(token[at]) + rng.randint(1, 9)) % 10) + token[at + 1 :]


def _hallucinate(text: str, rng: random.Random, tools: Sequence[str]) -> str:
    facts = list(_FACT.finditer(text))
    if not facts:
        return text
    fact = rng.choice(facts)
    return text[: fact.start()] + _wrong_digit(fact.group(), rng) + text[fact.end() :]


def _inexecutable(text: str, rng: random.Random, tools: Sequence[str]) -> str:
    known = sorted(tools)
    ghost = f"{rng.choice(known)}_batch" if known else "escalate_to_backoffice"
    return f"{text.rstrip()} First, though, run `{ghost}` on the account; nothing else works before it."


def _lose_constraint(text: str, rng: random.Random, tools: Sequence[str]) -> str:
    parts = _SENTENCE.split(text.strip())  # sentences at even indexes, what separates them at odd ones
    sentences = parts[::2]
    held = [i for i, s in enumerate(sentences) if _CONSTRAINT.search(s)]
    held = held or [i for i, s in enumerate(sentences) if _FACT.search(s)]
    if len(sentences) < 2 or not held:
        return text
    drop = 2 * held[0]
    return "".join(parts[:drop] + parts[drop + 2 :]).strip()


def _similarity(a: str, b: str) -> int:
    return len(set(a.split("_")) & set(b.split("_")))


def _similar_tool(call: dict[str, Any], rng: random.Random, tools: Sequence[str]) -> dict[str, Any]:
    candidates = sorted({t for t in tools if t != call["name"]})
    if not candidates:
        return call
    best = max(_similarity(call["name"], t) for t in candidates)
    return call | {"name": rng.choice([t for t in candidates if _similarity(call["name"], t) == best])}


def _wrong_value(value: Any, rng: random.Random) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + rng.choice([-1, 1])
    if isinstance(value, float):
        return round(value * rng.choice([0.9, 1.1]), 2)
    return _wrong_digit(str(value), rng)


def _changeable(value: Any) -> bool:
    return isinstance(value, int | float) or (isinstance(value, str) and any(c.isdigit() for c in value))


def _wrong_argument(call: dict[str, Any], rng: random.Random, tools: Sequence[str]) -> dict[str, Any]:
    arguments = call["arguments"]
    keys = [k for k in sorted(arguments) if _changeable(arguments[k])]
    if not keys:
        return call
    key = rng.choice(keys)
    return call | {"arguments": arguments | {key: _wrong_value(arguments[key], rng)}}


CONFLICT = " At the same time, nothing on my account may change in any way: leave everything exactly as it is."
"""The constraint the offline injector adds for `instruction_logic_conflict`: it contradicts any
instruction that asks for a change."""

_VAGUE = (
    (re.compile(r"\S+@\S+\.\w+"), "my usual address"),
    (re.compile(r"#\w*\d\w*"), "the one I mentioned"),
    (re.compile(r"\$?\b\d[\d,.]*\b"), "some"),
    (re.compile(r"'[^']+'|\"[^\"]+\""), "the thing"),
)
"""Concrete terms and the vague words the offline injector puts in their place for `instruction_ambiguity`."""


def _conflicting(text: str, rng: random.Random, tools: Sequence[str]) -> str:
    return text.rstrip() + CONFLICT


def _ambiguous(text: str, rng: random.Random, tools: Sequence[str]) -> str:
    for pattern, vague in _VAGUE:
        text = pattern.sub(vague, text)
    return text


def _out_of_order(message: str, rng: random.Random, tools: Sequence[str]) -> str:
    name = json.loads(message).get("name", "the tool")
    return f"Error: {name} was refused: a step it depends on has not been done yet."


def _duplicate(message: str, rng: random.Random, tools: Sequence[str]) -> str:
    name = json.loads(message).get("name", "the tool")
    return f"Error: duplicate request: {name} was just called with these arguments and was not run again."


_TEXT_RULES: dict[str, Callable[[str, random.Random, Sequence[str]], str]] = {
    "hallucination": _hallucinate,
    "inexecutable_plan": _inexecutable,
    "critical_information_loss": _lose_constraint,
    "instruction_logic_conflict": _conflicting,
    "instruction_ambiguity": _ambiguous,
    "call_order_swap": _out_of_order,
    "redundant_call": _duplicate,
}
_CALL_RULES: dict[str, Callable[[dict[str, Any], random.Random, Sequence[str]], dict[str, Any]]] = {
    "tool_selection_error": _similar_tool,
    "parameter_filling_error": _wrong_argument,
}


def simulate(request: LlmRequest) -> str:
    """The offline injector's answer to `request`: the type's rule applied to the message, in the
    template's answer form (the message unchanged when the rule finds nothing to fault)."""
    meta = request.metadata
    fault = str(meta.get("fault", ""))
    message = request.messages[-1].content
    rng = random.Random(str(meta.get("seed", "")))
    tools = [str(t) for t in meta.get("tools", [])]
    if fault in _CALL_RULES:
        call = json.loads(message)
        answer = json.dumps(_CALL_RULES[fault](call, rng, tools), sort_keys=True)
    elif fault in _TEXT_RULES:
        answer = _TEXT_RULES[fault](message, rng, tools)
    else:
        raise ModelError(f"sim: no injector rule for fault {fault!r} - at $.metadata.fault")
    return f"<rewrite>{answer}</rewrite>"
