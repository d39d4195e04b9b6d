"""An offline, deterministic stand-in for both model roles of an episode.

This is a SIMULATION for exercising the runtime (replay, faults, attribution,
the controller) without a model server. It follows the task's ground truth and
makes mistakes at configured rates; nothing it does is a result about models.

The reply is a pure function of the request: no clock, no global randomness.
Randomness comes from `random.Random(f"sim:{seed}:{task}:{step}")`. A role may emulate a
slow model (`[models.<role>.latency]`, `SimLatency`): the reply is the same, it comes after
a deterministic wait, and its `latency_s` says how long.

A request with no `sim` metadata (an agent of the user's own) gets the generic policy: the reply
repeats the last message after `[sim ROLE]` (`_generic`).

Request metadata (build it with `sim_metadata`):

    sim                     "user" (the simulated customer) or "tool" (the tool-use agent); "helper" and
                            "injector" requests go to the helpers' stand-ins and to the fault-injector
                            rules (`faultline.faults.simulate`)
    domain                  a built-in domain name or "package.module:ClassName"
    task                    the task id within that domain
    seed                    int, default 0: the episode's seed (vary it per trial)
    error_rates             {category: rate}, tool role only, default none: at each
                            decision step one category is drawn with these probabilities
                            (sum <= 1); categories are the four in `faultline.envs.ERROR_CATEGORIES`
    mistakes_off_from_step  int, optional: no mistakes at decision steps >= this
    sample                  int, default 0: another draw of the mistakes (rng key gets ":s<n>"),
                            as a real model's sampling gives one (attribution's resampling)
    helpers                 tool role: the helpers whose notes the request carries
    helper_effect           float, default 1: each category's rate is multiplied by it when a
                            note in `helpers` addresses the category (HELPER_ADDRESSES)
    rechecks                int, default 0: the verifier's RECHECKs so far in the episode;
                            after each the mistakes are drawn afresh (rng key gets ":r<n>"),
                            so a step whose call was sent back is not the same mistake again

Blame. Requests with `sim` "blame" get a heuristic stand-in for a model that
reads a whole trace and names the failing agent and step (see `_blame`), those
with "blame_step" one that reads a trace up to a step and says whether that step
failed it (`_blame_step`); they are baselines for attribution benchmarks, not
results about judges.

Helpers. A simulated helper note lowers the rate of the mistakes its helper is
meant to prevent, by the factor `helper_effect` (the episode's setting): dce
policy violations, tor wrong values (misread tool outputs), memory and tsa
wrong entities, planner early stops, the verifier's RECHECK every category of
the revised proposal. This is a parameter of the simulation, chosen by whoever
runs it; a pass rate it produces is a property of that parameter, never a
finding about helpers or models. Requests with `sim` "helper" are answered by
the stand-ins in `_sim_helpers.py`, requests with `sim` "judge" (the FAMA
controller's stages) by `_sim_judge.py`, requests with `sim` "annotator" (the
report's behaviour annotator) by `_sim_annotator.py`.

Transcripts. Tool role: `messages` as the agent sees them; system messages are
ignored (put helper notes there), user turns are `user`, the agent's own turns
`assistant` (tool calls in `tool_calls`), tool results `tool` with the call's
`tool_call_id` and content that starts with "Error" when the call failed.
User role: the conversation from the customer's side, its own turns
`assistant` and the agent's turns `user`. The user opens with the task's
instruction, or, in a domain with `hidden_instructions`, with a fixed request
that quotes nothing of it, and reveals only `user_facts` when asked.

Facts. The agent fills a fact of the user's (`task.user_facts`) into its calls as the user's
latest statement of it (`My KEY is VALUE, ...`) reached the agent; what the user never stated
it takes from the task. So a statement changed on its way (a fault on the message) gives a
call with the changed value, as an agent that uses what it was told would make; the outcome
then follows from what that call does, never from a record that the message was faulted.
The agent still reads nothing from tool results (its ids and final outputs come from the
task), so a fault on a read or on a result the agent would have read changes nothing here.

Decision steps. Step k < len(task.actions) is ground-truth action k; step
len(task.actions) is the final answer. The step in progress is the number of
tool calls that succeeded so far (a call that failed `MAX_RETRIES + 1` times
in a row also counts; `AgentView` in `_sim_transcript.py` reads it). A write
is preceded by a confirmation question; the call follows once the user
replied. A mistake replaces the action of its step, after which the ground
truth carries on; "early_stop" ends the conversation at its step without the
required outputs; at the final step "wrong_value" states a wrong number and
"policy_violation" makes one of the task's forbidden writes.

Response metadata: `sim`, `phase` (tool: greet, ask, confirm, call, final;
user: request, reveal, confirm, clarify, end), `done` (the speaker ends the
conversation), for the tool role `step`, and `mistake` =
{"category", "step", "intended", "made"} on every reply shaped by a mistake
(a wrong write shows on its confirmation question and on its call). Actions
are {"name", "arguments"}; the final answer is the pseudo-action "respond"
with {"outputs": [...]}. Usage counts words, so token tables have numbers.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from random import Random
from typing import Any, Final, Literal

import anyio
import msgspec

from faultline._errors import ConfigError, FaultlineError, ModelError
from faultline.core import ChatMessage, LlmRequest, LlmResponse, LlmToolCall, ModelCall, Usage, render_turn
from faultline.envs import (
    EARLY_STOP,
    ERROR_CATEGORIES,
    POLICY_VIOLATION,
    WRONG_ENTITY,
    WRONG_VALUE,
    Action,
    Domain,
    Task,
    load_domain,
)
from faultline.faults import INJECTOR_ROLE, simulate
from faultline.runtime.models._sim_annotator import respond_annotator
from faultline.runtime.models._sim_helpers import respond_helper
from faultline.runtime.models._sim_judge import respond_judge
from faultline.runtime.models._sim_latency import SimLatency
from faultline.runtime.models._sim_transcript import AgentView, prompt_word_count, word_count

MAX_USER_TURNS: Final = 30
"""The simulated user ends the conversation after this many turns of its own."""
RESPOND: Final = "respond"
"""The pseudo-action name of the final answer in mistake records."""

GREETING = "Hello! How can I help you today?"
_YES = "Yes, please go ahead."
_BYE = "Thank you, that's all I needed."
_HIDDEN_REQUEST = "Hello, I need some help with my account. Please ask me for whatever you need."
_EXPLICIT_CONFIRM = ("yes/no", "shall i proceed", "do you confirm", "should i proceed")
_CONFIRM_WORDS = ("confirm", "proceed", "go ahead", "shall i", "should i", "would you like me to", "do you want me to")
_WEAK_WORDS = frozenset({"the", "and", "your", "new", "other", "first", "last", "code", "number"})


class SimSpec(msgspec.Struct, frozen=True, kw_only=True):
    """The request metadata the simulator reads (see the module docstring)."""

    sim: Literal["user", "tool"]
    domain: str
    task: str
    seed: int = 0
    error_rates: dict[str, float] = {}
    mistakes_off_from_step: int | None = None
    helpers: list[str] = []
    helper_effect: float = 1.0
    rechecks: int = 0
    sample: int = 0


HELPER_ADDRESSES: Final[dict[str, tuple[str, ...]]] = {
    "dce": (POLICY_VIOLATION,),
    "tor": (WRONG_VALUE,),
    "memory": (WRONG_ENTITY,),
    "tsa": (WRONG_ENTITY,),
    "planner": (EARLY_STOP,),
    "verifier": ERROR_CATEGORIES,
}
"""The mistake categories whose simulated rate a helper's note lowers (see the module docstring)."""


def sim_metadata(
    *,
    role: Literal["user", "tool"],
    domain: str,
    task: str,
    seed: int = 0,
    error_rates: dict[str, float] | None = None,
    mistakes_off_from_step: int | None = None,
) -> dict[str, Any]:
    """The `LlmRequest.metadata` that drives the simulator; raises ConfigError on bad rates."""
    spec = SimSpec(
        sim=role,
        domain=domain,
        task=task,
        seed=seed,
        error_rates=dict(error_rates or {}),
        mistakes_off_from_step=mistakes_off_from_step,
    )
    problem = _rates_problem(spec.error_rates)
    if problem:
        raise ConfigError(problem)
    metadata = msgspec.to_builtins(spec)
    for key in ("helpers", "helper_effect", "rechecks", "sample"):  # the tool agent sets these when it has helpers
        del metadata[key]
    if mistakes_off_from_step is None:
        del metadata["mistakes_off_from_step"]
    return metadata  # type: ignore[no-any-return]


class SimBackend:
    """The `sim` model backend: plays the user or the tool agent from the task's ground truth.

    A simulation for exercising the runtime, never a result about models.
    """

    model: Final = "sim"

    def __init__(self, settings: object = None) -> None:
        """Built like every backend, from its role's settings, of which it reads only `latency` (none: at once)."""
        latency = getattr(settings, "latency", None)
        self.latency = latency if isinstance(latency, SimLatency) else SimLatency()

    async def complete(self, request: LlmRequest) -> LlmResponse:
        return await self._answer(request, "", "")

    async def complete_call(self, request: LlmRequest, call: ModelCall) -> LlmResponse:
        """A call an agent makes: its emulated latency is drawn for its own episode and agent."""
        return await self._answer(request, call.episode, call.agent)

    async def _answer(self, request: LlmRequest, episode: str, agent: str) -> LlmResponse:
        """The reply, after the role's emulated latency (see `SimLatency`), which it records as `latency_s`."""
        response = self.respond(request)
        if not self.latency.emulated:
            return response
        seconds = self.latency.draw(request, response.usage.completion_tokens, episode=episode, agent=agent)
        await anyio.sleep(seconds)
        return msgspec.structs.replace(response, latency_s=seconds)

    async def aclose(self) -> None:
        return None

    def respond(self, request: LlmRequest) -> LlmResponse:
        """The reply to `request`, computed synchronously (the same request always gives the same reply)."""
        if request.metadata.get("sim") == "helper":
            return respond_helper(request)
        if request.metadata.get("sim") == "blame":
            return _blame(request)
        if request.metadata.get("sim") == "blame_step":
            return _blame_step(request)
        if request.metadata.get("sim") == "judge":
            return respond_judge(request, prompt_word_count(request.messages))
        if request.metadata.get("sim") == "annotator":
            return respond_annotator(request, prompt_word_count(request.messages))
        if request.metadata.get("sim") == INJECTOR_ROLE:
            text = simulate(request)
            usage = Usage(prompt_tokens=prompt_word_count(request.messages), completion_tokens=word_count(text))
            return LlmResponse(content=text, usage=usage, model="sim", finish_reason="stop")
        if "sim" not in request.metadata:
            return _generic(request)
        spec = _spec(request.metadata)
        try:
            domain = load_domain(spec.domain)
            task = domain.task(spec.task)
        except FaultlineError as exc:
            raise ModelError(f"sim: {exc}") from None
        messages = [m for m in request.messages if m.role != "system"]
        if spec.sim == "user":
            reply = _play_user(task, messages, _opening(task, domain.hidden_instructions))
        else:
            reply = _play_tool(spec, domain, task, messages)
        if request.metadata.get("reflect"):
            reply = _reflected(reply, messages)
        calls = []
        if reply.action is not None:
            arguments = dict(reply.action.arguments)
            raw = json.dumps(arguments, sort_keys=True)
            calls.append(LlmToolCall(id=reply.call_id, name=reply.action.name, arguments=arguments, raw_arguments=raw))
        completion = word_count(reply.content) + sum(word_count(call.raw_arguments) for call in calls)
        return LlmResponse(
            content=reply.content,
            tool_calls=calls,
            usage=Usage(prompt_tokens=prompt_word_count(request.messages), completion_tokens=completion),
            model=self.model,
            finish_reason="tool_calls" if calls else "stop",
            metadata={"sim": spec.sim, **reply.metadata},
        )


def _reflected(reply: _Reply, messages: list[ChatMessage]) -> _Reply:
    """The tool agent's reply in the structured reflection form, asked for after a failed call: the same
    decision, with the call in `<call>` (not a native call) or the message in `<final>`."""
    error = next((m.content for m in reversed(messages) if m.role == "tool" or m.role == "user"), "")
    if reply.action is not None:
        plan = f"call {reply.action.name} with the arguments this step needs"
        call = {"name": reply.action.name, "arguments": dict(reply.action.arguments)}
        return _Reply(
            render_turn(f"The last call failed ({error[:160]}). Next: {plan}.", call), metadata=reply.metadata
        )
    said = f"The last call failed ({error[:160]}). Next: tell the user."
    return _Reply(render_turn(said, final=reply.content), metadata=reply.metadata)


def _generic(request: LlmRequest) -> LlmResponse:
    """An agent the simulator knows nothing of (its request carries no `sim` metadata): the reply repeats
    the request's last message after `[sim ROLE]`, and never calls a tool. It lets a system of the user's
    own run end to end offline, to exercise the runtime; for answers a test chooses, use `scripted`."""
    last = next((m.content for m in reversed(request.messages) if m.content), "")
    text = f"[sim {request.role}] {last}"
    usage = Usage(prompt_tokens=prompt_word_count(request.messages), completion_tokens=word_count(text))
    return LlmResponse(content=text, usage=usage, model="sim", finish_reason="stop", metadata={"sim": "generic"})


@dataclass
class _Reply:
    content: str = ""
    action: Action | None = None
    call_id: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)


def _spec(metadata: dict[str, Any]) -> SimSpec:
    try:
        spec = msgspec.convert(metadata, SimSpec)
    except msgspec.ValidationError as exc:
        raise ModelError(f"sim: bad request metadata: {exc}") from None
    problem = _rates_problem(spec.error_rates)
    if problem:
        raise ModelError(f"sim: bad request metadata: {problem}")
    return spec


def _rates_problem(rates: dict[str, float]) -> str:
    for category, rate in rates.items():
        if category not in ERROR_CATEGORIES:
            return f"unknown error category {category!r}; use {', '.join(ERROR_CATEGORIES)} - at $.error_rates"
        if not 0.0 <= rate <= 1.0:
            return f"rate {rate} is not between 0 and 1 - at $.error_rates.{category}"
    if sum(rates.values()) > 1.0 + 1e-9:
        return f"rates add up to {sum(rates.values()):g}, more than 1 - at $.error_rates"
    return ""


# -- the tool-use agent --------------------------------------------------------------------------


def _play_tool(spec: SimSpec, domain: Domain, task: Task, messages: list[ChatMessage]) -> _Reply:
    view = AgentView.of(messages)
    step, last = view.step, len(task.actions)
    if not view.user_texts:
        return _Reply(GREETING, metadata={"phase": "greet", "step": step, "done": False})
    if step > last:
        return _final(task, step, task.outputs)
    rng = Random(
        f"sim:{spec.seed}:{task.id}:{step}"
        + (f":r{spec.rechecks}" if spec.rechecks else "")
        + (f":s{spec.sample}" if spec.sample else "")
    )
    category = _draw(spec, step, rng)
    intended = task.actions[step].as_dict() if step < last else _respond(task.outputs)
    writes = {tool.name for tool in domain.tools() if tool.writes}
    unfinished = task.outputs or any(action.name in writes for action in task.actions[step:])
    if category == EARLY_STOP and unfinished:
        return _final(task, step, [], _record(category, step, intended, _respond([])))
    if step == last and category == WRONG_VALUE:
        garbled = _garble(task.outputs)
        if garbled != task.outputs:
            return _final(task, step, garbled, _record(category, step, intended, _respond(garbled)))
    actionable = category in (POLICY_VIOLATION, WRONG_ENTITY, WRONG_VALUE)
    made = domain.mistake(task, step, category, rng) if category and actionable else None
    if made is None and step == last:
        return _final(task, step, task.outputs)
    action = made or task.actions[step]
    mistake = _record(category or "", step, intended, made.as_dict()) if made else None
    return _act(task, view, step, action, mistake, writes)


def _act(
    task: Task, view: AgentView, step: int, action: Action, mistake: dict[str, Any] | None, writes: set[str]
) -> _Reply:
    """Ask for missing facts, then for confirmation of a write, then call the tool.

    A fact of the user's goes into the call as the user stated it (`AgentView.stated`), as an
    agent fills in what it was told: a statement that reached the agent changed, the call carries it."""
    metadata: dict[str, Any] = {"step": step, "done": False} | ({"mistake": mistake} if mistake else {})
    values = set(_leaves(action.arguments))
    stated = view.stated(task.user_facts)
    needed = [k for k, v in task.user_facts.items() if v in values and k not in stated and not view.revealed(v)]
    if needed:
        question = f"Could you please tell me your {_join(needed)}?"
        if not view.replied_to(question):
            return _Reply(question, metadata=metadata | {"phase": "ask"})
    heard = {task.user_facts[k]: v for k, v in stated.items() if task.user_facts[k] in values}
    if any(true != v for true, v in heard.items()):
        action = Action(name=action.name, arguments=_substituted(action.arguments, heard))
    arguments = json.dumps(action.arguments, sort_keys=True)
    confirmation = f"I am about to run {action.name} with {arguments}. Shall I proceed (yes/no)?"
    if action.name in writes and not view.replied_to(confirmation):
        return _Reply(confirmation, metadata=metadata | {"phase": "confirm"})
    return _Reply(action=action, call_id=f"sim-{view.calls:03d}", metadata=metadata | {"phase": "call"})


def _final(task: Task, step: int, outputs: list[str], mistake: dict[str, Any] | None = None) -> _Reply:
    said = "; ".join(outputs)
    if mistake and mistake["category"] == EARLY_STOP:
        text = "I have done what I can for now. Goodbye."
    elif task.refusal:
        text = f"I'm sorry, but our policy does not allow that ({said}). Goodbye."
    elif outputs:
        text = f"All done. Here is what you asked for: {said}. Goodbye."
    else:
        text = "All done: everything you asked for has been taken care of. Goodbye."
    metadata: dict[str, Any] = {"phase": "final", "step": step, "done": True}
    return _Reply(text, metadata=metadata | ({"mistake": mistake} if mistake else {}))


def _draw(spec: SimSpec, step: int, rng: Random) -> str | None:
    """The category of the mistake at `step`, if any. Always draws, so the rng state after is fixed."""
    draw = rng.random()
    if spec.mistakes_off_from_step is not None and step >= spec.mistakes_off_from_step:
        return None
    threshold = 0.0
    addressed = {category for helper in spec.helpers for category in HELPER_ADDRESSES.get(helper, ())}
    for category in ERROR_CATEGORIES:
        effect = spec.helper_effect if category in addressed else 1.0
        threshold += spec.error_rates.get(category, 0.0) * effect
        if draw < threshold:
            return category
    return None


def _record(category: str, step: int, intended: dict[str, Any], made: dict[str, Any]) -> dict[str, Any]:
    return {"category": category, "step": step, "intended": intended, "made": made}


def _respond(outputs: list[str]) -> dict[str, Any]:
    return {"name": RESPOND, "arguments": {"outputs": list(outputs)}}


def _garble(outputs: list[str]) -> list[str]:
    """The outputs with the last digit of the first numeric one changed: a value misread."""
    for index, output in enumerate(outputs):
        digits = [i for i, c in enumerate(output) if c.isdigit()]
        if digits:
            i = digits[-1]
            wrong = output[:i] + str((int(output[i]) + 1) % 10) + output[i + 1 :]
            return [*outputs[:index], wrong, *outputs[index + 1 :]]
    return list(outputs)


def _substituted(value: Any, heard: dict[str, str]) -> Any:
    """`value` with every scalar that is a key of `heard` replaced by what `heard` maps it to."""
    if isinstance(value, dict):
        return {k: _substituted(v, heard) for k, v in value.items()}
    if isinstance(value, list):
        return [_substituted(v, heard) for v in value]
    return heard.get(value, value) if isinstance(value, str) else value


def _leaves(value: Any) -> list[str]:
    """Every scalar inside an argument value, as text."""
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    if isinstance(value, list):
        return [leaf for item in value for leaf in _leaves(item)]
    return [str(value)]


# -- blame -----------------------------------------------------------------------------------


def _blame(request: LlmRequest) -> LlmResponse:
    """A stand-in for a model that reads a whole trace and names the failing step (Who&When's all-at-once).

    A heuristic, not a model: the trace's lines are `step N | agent | ...`; it names the
    last line that reports an error, else the last line of a tool call, else the last line.
    """
    lines = [line for m in request.messages if m.role == "user" for line in m.content.splitlines()]
    steps = [line for line in lines if line.startswith("step ")]
    errors = [line for line in steps if "error" in line.casefold()]
    calls = [line for line in steps if "tool_call" in line or '"arguments"' in line]
    chosen = (errors or calls or steps or [""])[-1]
    parts = [part.strip() for part in chosen.split("|")]
    answer = (
        f"agent: {parts[1]}\nstep: {parts[0].removeprefix('step ')}" if len(parts) > 1 else "agent: unknown\nstep: 0"
    )
    return LlmResponse(content=answer, model="sim", finish_reason="stop", metadata={"sim": "blame"})


def _blame_step(request: LlmRequest) -> LlmResponse:
    """A stand-in for a model asked, step by step, whether the last step of a trace made it fail.

    A heuristic, not a model: yes when that line reports an error or ends the conversation
    (`"done": true`), no otherwise.
    """
    lines = [line for m in request.messages if m.role == "user" for line in m.content.splitlines()]
    last = next((line for line in reversed(lines) if line.startswith("step ")), "").casefold()
    failed = last.endswith("| error") or '"done": true' in last
    return LlmResponse(
        content="yes" if failed else "no", model="sim", finish_reason="stop", metadata={"sim": "blame_step"}
    )


# -- the simulated user --------------------------------------------------------------------------


def _opening(task: Task, hidden: bool) -> str:
    """What the simulated user asks for: the instruction, unless it is a brief the agent must not see."""
    return _HIDDEN_REQUEST if hidden else task.instruction


def _play_user(task: Task, messages: list[ChatMessage], request: str) -> _Reply:
    own = [m.content for m in messages if m.role == "assistant"]
    if not own:
        return _Reply(request, metadata={"phase": "request", "done": False})
    heard = [m.content for m in messages if m.role == "user"]
    text = heard[-1].casefold() if heard else ""
    if len(own) >= MAX_USER_TURNS:
        return _Reply(_BYE, metadata={"phase": "end", "done": True})
    if heard and heard[-1] in own:
        return _clarify(request)  # its own words came back: the agent's answer went astray
    if "?" not in text:
        return _Reply(_BYE, metadata={"phase": "end", "done": True})
    said = " ".join(own).casefold()
    # A fact whose value the agent already quotes is being stated, not asked for.
    asked = [key for key, value in task.user_facts.items() if _mentions(text, key) and value.casefold() not in text]
    fresh = [key for key in asked if task.user_facts[key].casefold() not in said]
    if any(marker in text for marker in _EXPLICIT_CONFIRM):
        return _Reply(_YES, metadata={"phase": "confirm", "done": False})
    if fresh:
        return _reveal(task, fresh)
    if any(word in text for word in _CONFIRM_WORDS):
        return _Reply(_YES, metadata={"phase": "confirm", "done": False})
    if asked:
        return _reveal(task, asked)
    if "anything else" in text:
        return _Reply(_BYE, metadata={"phase": "end", "done": True})
    return _clarify(request)


def _clarify(request: str) -> _Reply:
    return _Reply(f"I'm not sure what you need from me. To repeat: {request}",
                  metadata={"phase": "clarify", "done": False})  # fmt: skip


def _reveal(task: Task, keys: list[str]) -> _Reply:
    parts = [f"my {key} is {task.user_facts[key]}" for key in keys]
    text = _join(parts)
    return _Reply(text[0].upper() + text[1:] + ".", metadata={"phase": "reveal", "done": False})


def _mentions(text: str, key: str) -> bool:
    """Whether the agent's question asks for the fact named `key` (by name or a telling word)."""
    key = key.casefold()
    if key in text:
        return True
    words = set(re.findall(r"[a-z]+", text))
    return any(len(word) >= 3 and word not in _WEAK_WORDS and word in words for word in key.split())


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
