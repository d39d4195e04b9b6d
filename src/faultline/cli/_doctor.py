"""`faultline doctor`: measure a model endpoint before running episodes on it.

Two requests to the tool agent's role, each made once (no retries, so the
numbers are the endpoint's own): one that offers a tool natively, one that
offers it in the text format (`tool_calls = "text"`). From their latency and
speed it recommends the settings a run needs on this endpoint, for every model
table that asks the same model there: the user simulator and the judge wait on
the same server as the tool agent.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import anyio
import msgspec

from faultline._errors import ModelError, UsageError
from faultline.agents import parse_tool_text, tools_prompt
from faultline.cli import _jsonl
from faultline.cli._models import add_model_flags, effective_config, serving_local_model
from faultline.cli._text import clip
from faultline.core import ChatMessage, LlmRequest, LlmResponse, LlmToolCall, ModelCall
from faultline.runtime import Config, ModelConfig
from faultline.runtime.models import OpenAIBackend

CALLS_PER_EPISODE = 20
"""Model calls a typical episode makes (user and tool agent turns together), for the episode timeout."""

UNCAPPED_ANSWER_TOKENS = 2048
"""What an answer of a role with no `max_tokens` is taken to run to, for the timeout."""

PROBE_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "find_user_id_by_email",
        "description": "Find a user id by email address.",
        "parameters": {
            "type": "object",
            "properties": {"email": {"type": "string", "description": "The email address."}},
            "required": ["email"],
        },
    },
}
SYSTEM = "You are a customer support agent. Use a tool whenever one can answer the question."
QUESTION = "Hi, what is the user id for my email anna.berg@example.com?"


class Probe(msgspec.Struct, kw_only=True):
    """One request of the doctor and what came of it."""

    name: str
    latency_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tokens_per_s: float = 0.0
    finish_reason: str = ""
    tool_call: str = ""
    """The valid call of the probe tool the answer made, as `name(arguments)`; empty if none."""
    answer: str = ""
    error: str = ""


class Advice(msgspec.Struct, kw_only=True):
    role: str
    tool_calls: str
    timeout_s: float
    concurrency: int
    episode_timeout_s: float
    handler_timeout_s: float = 0.0
    """Set when a call's whole retry budget outgrows the configured handler time limit; 0 keeps it."""
    tables: list[str]
    """The `[models.<table>]` tables that ask the measured model at its URL, the tool agent's first: `timeout_s`
    is for each of them, `tool_calls` for the first."""


class Report(msgspec.Struct, kw_only=True):
    endpoint: str
    probes: list[Probe]
    advice: Advice | None = None


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "doctor",
        help="measure a model endpoint: latency, tokens/s, whether tool calls work; print the settings to use",
        description="Send two requests to the tool agent's model role, one offering a tool natively (OpenAI"
        " tools), one offering it in the text format, each once without retries. Print their latency, tokens"
        " per second and whether the tool call worked, then recommended settings as TOML. Exit 1 when"
        " neither request was answered.",
    )
    add_model_flags(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(handler=_doctor)


@serving_local_model
def _doctor(args: argparse.Namespace) -> int:
    config = effective_config(args)
    role = config.role_of("tool")
    settings = config.model(role)
    if settings.backend != "openai":
        raise UsageError(f"doctor measures an openai endpoint, but the tool agent's role {role!r} uses"
                         f" {settings.backend}: add --model openai")  # fmt: skip
    report = anyio.run(examine, settings, role, config.handler_timeout_s, tables_asking(config, role))
    if args.json:
        _jsonl.rows("probe", report.probes)
        _jsonl.summary({k: v for k, v in msgspec.to_builtins(report).items() if k != "probes"})
    else:
        print("\n".join(render(report)))
    if report.advice is None:
        raise ModelError(f"{report.endpoint}: " + "; ".join(f"{p.name}: {p.error}" for p in report.probes))
    return 0


def tables_asking(config: Config, role: str) -> dict[str, ModelConfig]:
    """The model tables that send to the same model at the same URL as `role`, the one `role` uses first.

    A role without a table of its own uses `[models.default]`, so these cover every role that talks to
    the measured model, whichever agent or service it belongs to.
    """
    measured = config.model(role)
    own = role if role in config.models else next((n for n, t in config.models.items() if t is measured), role)
    same = {
        name: table
        for name, table in config.models.items()
        if table.backend == "openai" and (table.base_url, table.model) == (measured.base_url, measured.model)
    }
    return {own: measured} | same


async def examine(settings: ModelConfig, role: str, handler_timeout_s: float, tables: dict[str, ModelConfig]) -> Report:
    """Both probes, one after the other (so neither slows the other), and the advice they support."""
    once = msgspec.structs.replace(settings, max_retries=0)
    endpoint = f"openai endpoint {settings.base_url} (model {settings.model})"
    native_request = LlmRequest(role=role, messages=_messages(SYSTEM), tools=[PROBE_TOOL])
    text_request = LlmRequest(role=role, messages=_messages(SYSTEM + "\n\n" + tools_prompt([PROBE_TOOL])))
    async with OpenAIBackend(once) as backend:
        native = await _probe(backend, "native tools", native_request, endpoint)
        text = await _probe(backend, "text format", text_request, endpoint)
    advice = advise(tables, role, native, text, handler_timeout_s)
    return Report(endpoint=endpoint, probes=[native, text], advice=advice)


def advise(
    tables: dict[str, ModelConfig], role: str, native: Probe, text: Probe, handler_timeout_s: float
) -> Advice | None:
    """Settings for this endpoint's `tables`, from what the probes measured; None when neither was answered.

    A call may need a whole `max_tokens` answer at the measured speed; the timeout allows twice
    that, for the table with the longest answers. A slow server serves parallel requests slower
    still, so it gets fewer episodes at once, and an episode's timeout covers its calls at that pace
    and, at least, twice one call's retries. The handler time limit must outlast one call with its retries.
    """
    answered = [p for p in (native, text) if not p.error]
    if not answered:
        return None
    speed = min(max(p.tokens_per_s, 0.1) for p in answered)
    latency = max(p.latency_s for p in answered)
    answer_tokens = max(table.max_tokens or UNCAPPED_ANSWER_TOKENS for table in tables.values())
    timeout_s = max(30.0, _round_up(2 * (latency + answer_tokens / speed), 10))
    concurrency = 1 if speed < 20 else 2 if speed < 60 else 8
    budget = (max(table.max_retries for table in tables.values()) + 1) * timeout_s
    episode = _round_up(max(CALLS_PER_EPISODE * latency * concurrency, 2 * budget), 60)
    tool_calls = "native" if native.tool_call or not text.tool_call else "text"
    handler = _round_up(budget + 60, 60) if budget >= handler_timeout_s else 0.0
    return Advice(
        role=role,
        tool_calls=tool_calls,
        timeout_s=timeout_s,
        concurrency=concurrency,
        episode_timeout_s=episode,
        handler_timeout_s=handler,
        tables=list(tables),
    )


def render(report: Report) -> list[str]:
    lines = [f"doctor: {report.endpoint}"]
    for p in report.probes:
        if p.error:
            lines.append(f"  {p.name:<13} failed: {p.error}")
            continue
        said = f"tool call {p.tool_call}" if p.tool_call else f"no tool call, answered {clip(p.answer, 60)!r}"
        lines.append(
            f"  {p.name:<13} {p.latency_s:6.2f} s  {p.prompt_tokens}+{p.completion_tokens} tokens"
            f"  {p.tokens_per_s:.1f} tokens/s  finish {p.finish_reason or '?'}  {said}"
        )
    native, text = report.probes
    if native.tool_call:
        lines.append("tool calls: native tool calls work")
    elif text.tool_call:
        lines.append('tool calls: native tool calls do not work, the text format does: use tool_calls = "text"')
    else:
        lines.append("tool calls: the model made no valid tool call either way; episodes will fail at tools")
    advice = report.advice
    if advice is None:
        lines.append("no recommendation: neither request was answered")
        return lines
    lines.append("recommended (faultline.toml, or --model-setting / --concurrency / --episode-timeout):")
    for n, table in enumerate(advice.tables):
        lines.append(f"  [models.{table}]")
        if n == 0:
            unsure = "" if native.tool_call or text.tool_call else "  # the default: neither format gave a valid call"
            lines.append(f'  tool_calls = "{advice.tool_calls}"{unsure}')
        lines.append(f"  timeout_s = {advice.timeout_s:g}")
    lines += [
        "  [run]",
        f"  concurrency = {advice.concurrency}",
        f"  episode_timeout_s = {advice.episode_timeout_s:g}",
    ]
    if advice.handler_timeout_s:
        lines += ["  [runtime]", f"  handler_timeout_s = {advice.handler_timeout_s:g}"]
    return lines


async def _probe(backend: OpenAIBackend, name: str, request: LlmRequest, endpoint: str) -> Probe:
    """One request; a failure is told by its attempt's own error, without the endpoint named again."""
    attempt = ModelCall(episode="doctor", agent="doctor", role=request.role)
    try:
        response = await backend.complete_call(request, attempt)
    except ModelError as exc:
        failed = [a.error for a in attempt.attempts if a.error]
        return Probe(name=name, error=failed[-1] if failed else str(exc).removeprefix(f"{endpoint}: "))
    seconds = max(response.latency_s, 1e-6)
    call = _probe_call(response)
    return Probe(
        name=name,
        latency_s=response.latency_s,
        prompt_tokens=response.usage.prompt_tokens,
        completion_tokens=response.usage.completion_tokens,
        tokens_per_s=response.usage.completion_tokens / seconds,
        finish_reason=response.finish_reason,
        tool_call=f"{call.name}({msgspec.json.encode(call.arguments).decode()})" if call else "",
        answer=response.content,
    )


def _probe_call(response: LlmResponse) -> LlmToolCall | None:
    """The answer's valid call of the probe tool, native or written in the text format."""
    calls = response.tool_calls or [c for c in [parse_tool_text(response.content, "probe")] if c is not None]
    name = PROBE_TOOL["function"]["name"]
    return next((c for c in calls if c.name == name and not c.arguments_error and c.arguments.get("email")), None)


def _messages(system: str) -> list[ChatMessage]:
    return [ChatMessage(role="system", content=system), ChatMessage(role="user", content=QUESTION)]


def _round_up(value: float, step: int) -> float:
    return float(math.ceil(value / step) * step)
