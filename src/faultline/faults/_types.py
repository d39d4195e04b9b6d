"""Message routing and the tool-call perturbations that are not in the MAS-FIRE taxonomy.

Message routing (MAS-FIRE, communication faults): `cycle` sends a message back
to its sender, `storm` adds copies, `broadcast` also delivers to agents it was
not meant for. None of them changes a message's content.

Tool-call perturbations (structured reflection): each replaces the tool call
an agent made at a step by a wrong one, keeping its call id, and makes it fail:
`call_order_swap` (the task's next call, made too early) and `redundant_call`
(the agent's previous call again). The error the environment answers with is
written by the fault-injector model from the wrong call (`_semantic.TEMPLATES`;
the offline `sim` writes it from a fixed sentence), so the agent meets a failed
call it did not make and must recover. The benchmark's other two operators are
MAS-FIRE faults under their MAS-FIRE names: a missing call is
`tool_selection_error`, an argument error is `parameter_format_error` (or
`parameter_filling_error` for a wrong value).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from faultline._errors import ModelError
from faultline.core import Envelope, ToolCall, derive_id
from faultline.faults._registry import FaultSite, FaultType, register_fault
from faultline.faults._semantic import call_json, injected, known_tools

MAX_COPIES = 100
"""Most copies one `storm` or `broadcast` may add to a message."""

_TOOL_CALL = frozenset({"tool_call"})


# -- message routing -----------------------------------------------------------------------------


@register_fault
class Cycle(FaultType):
    name = "cycle"
    mechanism = "routing"
    summary = "redirect a message back to its sender"

    def apply(self, env: Envelope, params: Any, site: FaultSite) -> list[Envelope] | None:
        if env.recipient == env.sender:
            return None
        return [msgspec.structs.replace(env, recipient=env.sender, topic="")]


class StormParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    copies: Annotated[int, msgspec.Meta(ge=1, le=MAX_COPIES)] = 5


@register_fault
class Storm(FaultType):
    name = "storm"
    mechanism = "routing"
    summary = "deliver a message and `copies` duplicates of it (new ids)"
    Params = StormParams

    def apply(self, env: Envelope, params: StormParams, site: FaultSite) -> list[Envelope] | None:
        copies = [msgspec.structs.replace(env, id=derive_id(env.id, i, "storm")) for i in range(1, params.copies + 1)]
        return [env, *copies]


class BroadcastParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    targets: Annotated[list[str], msgspec.Meta(max_length=MAX_COPIES)] = []
    """Agents that also get the message; empty: every agent of the deployment but sender and recipient."""


@register_fault
class Broadcast(FaultType):
    name = "broadcast"
    mechanism = "routing"
    summary = "also deliver a message to agents it was not meant for"
    Params = BroadcastParams
    agent_params = ("targets",)

    def apply(self, env: Envelope, params: BroadcastParams, site: FaultSite) -> list[Envelope] | None:
        pool = params.targets or site.agents
        targets = [a for a in dict.fromkeys(pool) if a not in (env.sender, env.recipient)]
        if not targets:
            return None
        copies = [
            msgspec.structs.replace(env, id=derive_id(env.id, i, "bcast"), recipient=agent, topic="")
            for i, agent in enumerate(targets, start=1)
        ]
        return [env, *copies]


# -- tool-call perturbations -----------------------------------------------------------------------


class FailingCall(FaultType):
    """A perturbation that replaces the call (`replacement`) and has it fail with an error the injector writes."""

    mechanism = "tool_call"
    kinds = _TOOL_CALL

    def replacement(self, call: ToolCall, params: Any, site: FaultSite) -> tuple[str, dict[str, Any]] | None:
        raise NotImplementedError

    def apply(self, env: Envelope, params: Any, site: FaultSite) -> list[Envelope] | None:
        raise ModelError(f"{self.name} needs the fault-injector model to write the call's error")

    async def rewrite(self, env: Envelope, params: Any, site: FaultSite) -> list[Envelope] | None:
        call = env.body
        assert isinstance(call, ToolCall)
        replaced = self.replacement(call, params, site)
        if replaced is None:
            return None
        name, arguments = replaced
        wrong = call_json(name, arguments)
        error = await injected(self.name, env, site, wrong, tools=known_tools(site), call=False)
        body = ToolCall(call_id=call.call_id, name=name, arguments=arguments, injected_error=error)
        return [msgspec.structs.replace(env, body=body)]


@register_fault
class CallOrderSwap(FailingCall):
    name = "call_order_swap"
    summary = "replace a tool call by the task's next call, which fails for coming too early (needs the plan)"
    needs_plan = True

    def replacement(self, call: ToolCall, params: Any, site: FaultSite) -> tuple[str, dict[str, Any]] | None:
        plan = site.plan()
        at = next((i for i, (n, a) in enumerate(plan) if n == call.name and a == call.arguments), None)
        if at is None:
            at = next((i for i, (n, _) in enumerate(plan) if n == call.name), None)
        if at is None or at + 1 >= len(plan):
            return None
        name, arguments = plan[at + 1]
        return name, dict(arguments)


class RedundantParams(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    arguments: Literal["unchanged", "irrelevant"] = "unchanged"
    """The repeated call's arguments: its own, or the ones the agent meant for this step."""


@register_fault
class RedundantCall(FailingCall):
    name = "redundant_call"
    summary = "replace a tool call by the agent's previous call, repeated, which fails as a duplicate"
    Params = RedundantParams

    def replacement(
        self, call: ToolCall, params: RedundantParams, site: FaultSite
    ) -> tuple[str, dict[str, Any]] | None:
        if not site.calls:
            return None
        previous = site.calls[-1]
        return previous.name, dict(previous.arguments if params.arguments == "unchanged" else call.arguments)
