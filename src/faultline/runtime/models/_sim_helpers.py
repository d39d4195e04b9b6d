"""The simulator's stand-ins for the FAMA helpers: deterministic answers from the request alone.

A SIMULATION for exercising the helper mechanism (requests, replies, waits, the
verifier's revise loop, their cost in the journal), never a result about
models. Each answer is a pure function of the request: its metadata (`helper`,
`domain`, `task`, and for the verifier `proposal`) and the conversation between
the helper's system prompt and its question.

    dce       the policy's rules (bullets, paragraphs) sharing the most words with the latest user turn and
              agent message (at most 3), as "- rule" lines
    tsa       the tools whose name and description share the most words with the
              latest user turn and tool output (at most 2), with the shared words
    tor       the latest tool output flattened to "- path: value" lines, the shallowest
              first (at most 12)
    planner   the task's ground-truth actions not done yet, numbered, then the answer
    verifier  a proposed call: PASS when it is the ground-truth action of the current
              step; else RECHECK with that action as the fix (or, past the last
              action, with a final answer), in the structured reflection form.
              A proposed message to the user (`{"reply"}`), read as text: with actions
              left, RECHECK with the next action as the fix when it names a tool but not
              that action with its argument values, or names none and asks nothing
              (it would hand the turn back with the request undone), else PASS; with
              every action done, PASS when it states every fact the task requires be
              told, else RECHECK with a final answer that does

The planner and the verifier know the task's ground truth, as the simulated tool
agent does; neither reads the simulator's mistake records. Usage counts words.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from faultline._errors import FaultlineError, ModelError
from faultline.core import PASS, RECHECK, ChatMessage, LlmRequest, LlmResponse, Usage, Verdict, render_verdict
from faultline.envs import Domain, Task, load_domain
from faultline.runtime.models._sim_transcript import AgentView, prompt_word_count, word_count

DCE_RULES = 3
TSA_TOOLS = 2
TOR_FACTS = 12
_WORD = re.compile(r"[a-z][a-z_]{3,}")


def respond_helper(request: LlmRequest) -> LlmResponse:
    """The simulated answer of the helper named in `request.metadata["helper"]`."""
    meta = request.metadata
    helper = str(meta.get("helper", ""))
    answer = _ANSWERS.get(helper)
    if answer is None:
        raise ModelError(f"sim: no simulated helper {helper!r} - at $.metadata.helper")
    try:
        domain = load_domain(str(meta.get("domain", "")))
        task = domain.task(str(meta.get("task", "")))
    except FaultlineError as exc:
        raise ModelError(f"sim: {exc}") from None
    conversation = [m for m in request.messages[:-1] if m.role != "system"]
    text = answer(domain, task, conversation, meta)
    return LlmResponse(
        content=text,
        usage=Usage(prompt_tokens=prompt_word_count(request.messages), completion_tokens=word_count(text)),
        model="sim",
        finish_reason="stop",
        metadata={"sim": "helper", "helper": helper},
    )


def _words_of(text: str) -> set[str]:
    return set(_WORD.findall(text.casefold()))


def _latest(conversation: list[ChatMessage], role: str) -> str:
    return next((m.content for m in reversed(conversation) if m.role == role), "")


def _dce(domain: Domain, task: Task, conversation: list[ChatMessage], meta: dict[str, Any]) -> str:
    focus = _words_of(_latest(conversation, "user") + " " + _latest(conversation, "assistant"))
    scored = [(len(_words_of(rule) & focus), i, rule) for i, rule in enumerate(_rules(domain.policy))]
    best = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1]))[:DCE_RULES]
    return "\n".join(f"- {rule}" for _, _, rule in sorted(best, key=lambda s: s[1])) or "- none"


def _rules(policy: str) -> list[str]:
    """The policy's rules: its bullet items and paragraphs, each on one line, headings left out."""
    items = re.split(r"\n\s*\n|\n\s*(?:[-*]|\d+\.)\s+", "\n" + policy)
    rules = (" ".join(item.split()).lstrip("-* ") for item in items)
    return [rule for rule in rules if rule and not rule.startswith("#")]


def _tsa(domain: Domain, task: Task, conversation: list[ChatMessage], meta: dict[str, Any]) -> str:
    focus = _words_of(_latest(conversation, "user") + " " + _latest(conversation, "tool"))
    scored = []
    for i, tool in enumerate(domain.tools()):
        shared = sorted((_words_of(tool.name.replace("_", " ")) | _words_of(tool.description)) & focus)
        if shared:
            scored.append((-len(shared), i, tool.name, shared))
    best = sorted(scored)[:TSA_TOOLS]
    if not best:
        return "No tool fits the next step; ask the user or answer."
    return "\n".join(f"- {name}: shares {', '.join(shared[:5])} with the conversation" for _, _, name, shared in best)


def _tor(domain: Domain, task: Task, conversation: list[ChatMessage], meta: dict[str, Any]) -> str:
    output = _latest(conversation, "tool")
    try:
        decoded = json.loads(output)
    except ValueError:
        return "\n".join(f"- {line.strip()}" for line in output.splitlines()[:TOR_FACTS] if line.strip())
    leaves = sorted(_leaves("", decoded), key=lambda leaf: leaf[0].count(".") + leaf[0].count("["))
    facts = leaves[:TOR_FACTS]
    return "\n".join(f"- {path}: {value}" for path, value in facts)


def _leaves(path: str, value: Any) -> Any:
    if isinstance(value, dict):
        for key in sorted(value):
            yield from _leaves(f"{path}.{key}" if path else str(key), value[key])
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _leaves(f"{path}[{i}]", item)
    else:
        yield path, value


def _planner(domain: Domain, task: Task, conversation: list[ChatMessage], meta: dict[str, Any]) -> str:
    step = AgentView.of(conversation).step
    steps = [f"{a.name}({json.dumps(a.arguments, sort_keys=True)})" for a in task.actions[step:]]
    steps = steps[: max(int(meta.get("max_steps", 8)) - 1, 0)]
    steps.append("tell the user the outcome")
    return "\n".join(f"{i}. {text}" for i, text in enumerate(steps, 1))


def _verifier(domain: Domain, task: Task, conversation: list[ChatMessage], meta: dict[str, Any]) -> str:
    proposal = meta.get("proposal") or {}
    step = AgentView.of(conversation).step
    if "reply" in proposal:
        return render_verdict(_reply_verdict(domain, task, step, str(proposal["reply"])))
    if step >= len(task.actions):
        verdict = Verdict(verdict=RECHECK, reflection="every needed action has run", final="Tell the user the outcome.")
    else:
        intended = task.actions[step].as_dict()
        if proposal == intended:
            verdict = Verdict(verdict=PASS, reflection=f"{intended['name']} with these arguments is the next step")
        else:
            verdict = Verdict(verdict=RECHECK, reflection="the call does not match the next step", call=intended)
    return render_verdict(verdict)


def _reply_verdict(domain: Domain, task: Task, step: int, reply: str) -> Verdict:
    """The review of a message to the user at ground-truth step `step`, from its text alone."""
    if step >= len(task.actions):
        missing = [fact for fact in task.outputs if fact not in reply]
        if not missing:
            return Verdict(verdict=PASS, reflection="the message tells the user what the task requires")
        final = f"Tell the user: {'; '.join(task.outputs)}."
        return Verdict(verdict=RECHECK, reflection=f"the message leaves out {'; '.join(missing)}", final=final)
    intended = task.actions[step].as_dict()
    named = [t.name for t in domain.tools() if re.search(rf"\b{re.escape(t.name)}\b", reply)]
    if named:
        quoted = [json.dumps(v) for v in _values(intended["arguments"])]  # a string as JSON writes it, or bare
        if named == [intended["name"]] and all(v in reply or v.strip('"') in reply for v in quoted):
            return Verdict(verdict=PASS, reflection=f"the message proposes {intended['name']}, the next step")
        return Verdict(verdict=RECHECK, reflection="the message proposes another action than the next step",
                       call=intended)  # fmt: skip
    if "?" not in reply:
        return Verdict(verdict=RECHECK, reflection="the message ends the turn with the request undone", call=intended)
    return Verdict(verdict=PASS, reflection="the message asks the user what the next step needs")


def _values(arguments: Any) -> list[Any]:
    """Every scalar inside an action's arguments."""
    if isinstance(arguments, dict):
        return [leaf for item in arguments.values() for leaf in _values(item)]
    if isinstance(arguments, list):
        return [leaf for item in arguments for leaf in _values(item)]
    return [arguments]


_ANSWERS: dict[str, Callable[[Domain, Task, list[ChatMessage], dict[str, Any]], str]] = {
    "dce": _dce,
    "tsa": _tsa,
    "tor": _tor,
    "planner": _planner,
    "verifier": _verifier,
}
