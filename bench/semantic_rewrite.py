"""What a semantic fault costs per faulted message, model time excluded.

A worker publishes each output through `Bus.publish_all`, which runs the
outbound interceptors and waits for JetStream to store what they let through.
This benchmark does the same on a local nats-server, one message at a time (as
a handler's outputs go out), for:

    no rules      the fault interceptor with nothing in force: the baseline
    structural    `parameter_format_error` on every tool call (a rewrite without a model)
    <semantic>    each semantic type on every message it applies to, the injector model
                  answering at once with a canned valid rewrite (no model time): what is
                  left is the template, the call through the sending agent's context
                  (request digest, the recording encoded and published to JetStream and
                  waited for), parsing the answer, the faulted message and the fault event
    <type> (sim)  the same five with the `sim` backend as the injector: adds the offline
                  rules' own time (the simulator's "model time", reported apart)

Overhead = (median wall µs per message) - (the baseline's), and the same for
this process's CPU µs. Medians over `--reps` repetitions of `--messages` each,
configurations interleaved.

    python -m bench.semantic_rewrite [--messages 500] [--reps 5] [--json out.json]
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from rich.table import Table

from bench._common import machine, run_repeated
from faultline.bus import Bus, EmbeddedServer
from faultline.core import (
    AssistantTurn,
    Envelope,
    InterceptorChain,
    LlmRequest,
    LlmResponse,
    ModelBackend,
    ModelCall,
    ToolCall,
    derive_id,
)
from faultline.faults import MASFIRE_FAULTS, FaultInterceptor, FaultRule, RuleSet, add_rule_control, fault_types
from faultline.runtime import injector_for
from faultline.runtime.models import SimBackend

SEMANTIC = [n for n in MASFIRE_FAULTS if fault_types()[n].mechanism == "semantic"]
TEXT = "Your order #W2001234 ships on May 3. You must return it within 30 days. Anything else I can do?"
TOOLS = ["get_order_details", "get_user_details", "cancel_pending_order", "return_delivered_order_items"]


class Canned:
    """An injector model that answers at once with a valid rewrite of the benchmark's messages."""

    async def complete(self, request: LlmRequest) -> LlmResponse:
        if request.metadata.get("call"):
            return LlmResponse(
                content='<rewrite>{"name": "get_user_details", "arguments": {"order_id": "#W2"}}</rewrite>'
            )
        return LlmResponse(content=f"<rewrite>{TEXT[:-1]}!</rewrite>")

    async def aclose(self) -> None:
        return None


class Services:
    """What the injector's context needs from a worker: the backend for role `injector`."""

    def __init__(self, backend: ModelBackend) -> None:
        self.backend = backend
        self.model_calls: set[ModelCall] = set()

    def backend_for(self, role: str) -> ModelBackend:
        return self.backend

    async def request(self, service: str, payload: bytes, timeout_s: float) -> bytes:
        raise NotImplementedError


class Catalog:
    def tools(self, start: Any) -> list[str]:
        return TOOLS

    def plan(self, start: Any) -> list[tuple[str, dict[str, Any]]]:
        return []

    def instruction(self, start: Any) -> str:
        return ""


def messages(run: str, n: int, call: bool) -> list[Envelope]:
    def body(i: int) -> Any:
        if call:
            return ToolCall(call_id=f"c{i}", name="get_order_details", arguments={"order_id": "#W2001234"})
        return AssistantTurn(text=TEXT)

    return [
        Envelope(id=derive_id(run, i), episode=f"{run}-{i % 20}", sender="tool", recipient="user", body=body(i),
                 causation=derive_id(run, -i - 1), hops=1, ts=time.time())
        for i in range(n)
    ]  # fmt: skip


def configs() -> dict[str, tuple[str, bool, ModelBackend | None]]:
    """name: (fault type or "", messages are tool calls, injector backend)."""
    out: dict[str, tuple[str, bool, ModelBackend | None]] = {
        "no rules": ("", False, None),
        "structural": ("parameter_format_error", True, None),
    }
    for fault in SEMANTIC:
        call = fault_types()[fault].kinds == frozenset({"tool_call"})
        out[fault] = (fault, call, Canned())
        out[f"{fault} (sim)"] = (fault, call, SimBackend())
    return out


async def one_rep(
    bus: Bus, name: str, spec: tuple[str, bool, ModelBackend | None], run: str, n: int
) -> tuple[float, float]:
    """(wall µs, CPU µs) per message through `publish_all`."""
    fault, call, backend = spec
    rules = RuleSet()
    if fault:
        params = {"mode": "type"} if fault == "parameter_format_error" else {}
        rules.control(add_rule_control(FaultRule(id=f"b-{run}", fault=fault, params=params), run).body)  # type: ignore[arg-type]
    interceptor = FaultInterceptor(rules, catalog=Catalog())
    if backend is not None:
        interceptor.injector = injector_for(bus, Services(backend))
    bus.interceptors = InterceptorChain([interceptor])
    batch = messages(run, n, call)
    start, cpu = time.perf_counter(), time.process_time()
    for env in batch:
        await bus.publish_all((env,))
    return (time.perf_counter() - start) / n * 1e6, (time.process_time() - cpu) / n * 1e6


async def main(n: int, reps: int) -> dict[str, Any]:
    specs = configs()
    wall: dict[str, list[float]] = {c: [] for c in specs}
    cpu: dict[str, list[float]] = {c: [] for c in specs}
    with EmbeddedServer() as server:
        bus = await Bus.connect(server.url)
        await bus.ensure_stream()
        try:
            await one_rep(bus, "no rules", specs["no rules"], "warm", min(n, 200))
            names = list(specs)
            for rep in range(reps):
                order = names[rep % len(names) :] + names[: rep % len(names)]
                for name in order:
                    w, c = await one_rep(bus, name, specs[name], f"r{rep}-{names.index(name)}", n)
                    wall[name].append(w)
                    cpu[name].append(c)
        finally:
            await bus.close()
    base_wall, base_cpu = statistics.median(wall["no rules"]), statistics.median(cpu["no rules"])
    return {
        "machine": machine(),
        "messages": n,
        "reps": reps,
        "wall_us": {c: statistics.median(v) for c, v in wall.items()},
        "cpu_us": {c: statistics.median(v) for c, v in cpu.items()},
        "overhead_wall_us": {c: statistics.median(v) - base_wall for c, v in wall.items()},
        "overhead_cpu_us": {c: statistics.median(v) - base_cpu for c, v in cpu.items()},
        "note": "the sim rows time the simulator's rules, which stand in for a model: they measure the mechanism",
    }


def report(result: dict[str, Any], say: Callable[[Any], None]) -> None:
    table = Table(
        title=f"semantic rewriting per faulted message — {result['messages']} messages, median of {result['reps']}"
    )
    for column in ("configuration", "wall µs/msg", "overhead wall µs", "CPU µs/msg", "overhead CPU µs"):
        table.add_column(column, justify="right")
    for c, w in result["wall_us"].items():
        table.add_row(
            c, f"{w:,.0f}", f"{result['overhead_wall_us'][c]:+,.0f}", f"{result['cpu_us'][c]:,.0f}",
            f"{result['overhead_cpu_us'][c]:+,.0f}",
        )  # fmt: skip
    say(table)
    wall = [result["overhead_wall_us"][f] for f in SEMANTIC]
    cpu = [result["overhead_cpu_us"][f] for f in SEMANTIC]
    say(
        f"semantic rewriting adds {min(wall):,.0f}-{max(wall):,.0f} µs wall and {min(cpu):,.0f}-{max(cpu):,.0f} µs CPU "
        "per faulted message, model time excluded (the structural row shows what any applied fault costs: its event); "
        "the `sim` rows add the simulator's rules, "
        "which stand in for a model and measure the mechanism, never a model; "
        f"load average {', '.join(f'{x:.1f}' for x in result['machine']['load_avg'])}"
    )


if __name__ == "__main__":
    run_repeated(__doc__, main, report, messages=500)
