"""What faults and defenses cost when they do nothing: bus throughput as ratios, in one run.

A publisher sends `--messages` envelopes (100 episodes, a Start first in each,
then ~200-byte Notes) through `Bus.publish_all`, pipelined in batches, as a
worker publishes its outputs; a JetStream push consumer hands them to the
inbound interceptor chain, as a worker does before each handler. Throughput is
messages from the first publish to the last message through the inbound chain,
publisher and consumer in this process on a local nats-server. Configurations,
interleaved over `--reps` repetitions (medians reported):

    bare         no interceptors at all
    no rules     what every worker installs: the fault interceptor, with no rules in force
    10 rules     ten fault rules in force, none matching (episode, sender or recipient patterns)
    defenses     plus the defense interceptor, all four defenses on for the receiving agent (dropping nothing)
    both         ten non-matching rules and all four defenses

Also the interceptors alone, without NATS: microseconds per message through both chains.

    python -m bench.fault_overhead [--messages 20000] [--reps 5] [--json out.json]
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

import anyio
from rich.table import Table

from bench._common import machine, run_repeated
from faultline.bus import Bus, EmbeddedServer
from faultline.core import Envelope, InterceptorChain, Note, Start, derive_id
from faultline.faults import (
    DEFENSE_ORDER,
    DefenseInterceptor,
    DefenseSettings,
    FaultInterceptor,
    FaultRule,
    RuleSet,
    add_rule_control,
)

EPISODES = 100
BATCH = 500
TARGET = 0.10
"""Most acceptable throughput loss of an idle configuration against `no rules`."""


def envelopes(run: str, n: int) -> list[Envelope]:
    """A Start per episode, then Notes; hops grow so that no rate window fills (nothing is dropped)."""
    out = []
    for i in range(n):
        episode = f"{run}-{i % EPISODES:03d}"
        body = Start() if i < EPISODES else Note(text=f"{i:08d}" + "x" * 160)
        out.append(Envelope(id=derive_id(run, i), episode=episode, sender="alpha", recipient="beta", body=body,
                            causation=derive_id(run, i - EPISODES) if i >= EPISODES else "", hops=i // EPISODES,
                            ts=time.time()))  # fmt: skip
    return out


def idle_rules() -> RuleSet:
    """Ten rules in force that never match the benchmark's traffic."""
    rules = RuleSet()
    shapes = [{"episode": "elsewhere-*"}, {"sender": "gamma"}, {"recipient": "delta", "kind": "note"}]
    for i in range(10):
        fault = ["storm", "cycle", "broadcast"][i % 3]
        rule = FaultRule(id=f"idle{i}", fault=fault, **shapes[i % 3])  # type: ignore[arg-type]
        rules.control(add_rule_control(rule, str(i)).body)  # type: ignore[arg-type]
    return rules


def chains(config: str) -> tuple[InterceptorChain, InterceptorChain]:
    """(publisher's chain, consumer's chain) for a configuration."""
    if config == "bare":
        return InterceptorChain(), InterceptorChain()
    rules = idle_rules() if config in ("10 rules", "both") else RuleSet()
    settings = DefenseSettings(rate_limit=EPISODES, max_hops=2**31)

    def chain() -> InterceptorChain:
        # as a worker sets up: the defense interceptor only when some agent has defenses on
        if config in ("defenses", "both"):
            return InterceptorChain([DefenseInterceptor({"beta": DEFENSE_ORDER}, settings), FaultInterceptor(rules)])
        return InterceptorChain([FaultInterceptor(rules)])

    return chain(), chain()


CONFIGS = ("bare", "no rules", "10 rules", "defenses", "both")


async def one_rep(bus: Bus, config: str, run: str, n: int) -> tuple[float, float]:
    """(messages/s, CPU microseconds of this process per message) for one repetition."""
    outbound, inbound = chains(config)
    bus.interceptors = outbound
    messages = envelopes(run, n)
    consumer = await bus.consumer(None, [bus.subjects.direct("*", "beta")], start="new")
    passed = 0
    try:
        start, cpu = time.perf_counter(), time.process_time()
        async with anyio.create_task_group() as tg:

            async def consume() -> None:
                nonlocal passed
                while passed < n:
                    batch = await consumer.batch()
                    for delivery in batch:
                        out, events = await inbound.inbound(delivery.envelope(), "beta", delivery.stream_seq)
                        assert not events, events
                        passed += len(out)

            tg.start_soon(consume)
            for i in range(0, n, BATCH):
                await bus.publish_all(messages[i : i + BATCH])
        return n / (time.perf_counter() - start), (time.process_time() - cpu) / n * 1e6
    finally:
        await consumer.close()


async def interceptors_alone(config: str, n: int, tries: int = 5) -> float:
    """CPU microseconds per message through the publisher's and the consumer's chain, no NATS
    (best of `tries`; CPU time, so other processes on the machine do not inflate it)."""
    best = float("inf")
    for attempt in range(tries):
        outbound, inbound = chains(config)
        messages = envelopes(f"alone{attempt}-{config.replace(' ', '')}", n)
        gc.collect()
        gc.disable()  # as timeit does: a collection triggered by earlier garbage is not this chain's cost
        try:
            start = time.process_time()
            for env in messages:
                await outbound.outbound(env)
                await inbound.inbound(env, "beta")
            best = min(best, (time.process_time() - start) / n * 1e6)
        finally:
            gc.enable()
    return best


async def main(messages: int, reps: int) -> dict[str, Any]:
    with EmbeddedServer() as server:
        bus = await Bus.connect(server.url)
        await bus.ensure_stream()
        try:
            await one_rep(bus, "no rules", "warmup", min(messages, 5_000))
            rates: dict[str, list[float]] = {c: [] for c in CONFIGS}
            cpu: dict[str, list[float]] = {c: [] for c in CONFIGS}
            for rep in range(reps):
                order = CONFIGS[rep % len(CONFIGS) :] + CONFIGS[: rep % len(CONFIGS)]
                for config in order:
                    rate, us = await one_rep(bus, config, f"r{rep}{config.replace(' ', '')}", messages)
                    rates[config].append(rate)
                    cpu[config].append(us)
        finally:
            await bus.close()
    medians = {c: statistics.median(v) for c, v in rates.items()}
    best = {c: max(v) for c, v in rates.items()}
    chain_us = {c: await interceptors_alone(c, messages) for c in CONFIGS}
    pipeline_us = statistics.median(cpu["no rules"])
    return {
        "machine": machine(),
        "messages": messages,
        "reps": reps,
        "msgs_per_s": medians,
        "best_msgs_per_s": best,
        "all_rates": rates,
        "ratio_to_no_rules": {c: medians[c] / medians["no rules"] for c in CONFIGS},
        "best_ratio_to_no_rules": {c: best[c] / best["no rules"] for c in CONFIGS},
        "ratio_to_bare": {c: medians[c] / medians["bare"] for c in CONFIGS},
        "cpu_us_per_msg": {c: statistics.median(v) for c, v in cpu.items()},
        "interceptor_us_per_msg": chain_us,
        "cpu_ratio_to_no_rules": {c: pipeline_us / (pipeline_us + chain_us[c] - chain_us["no rules"]) for c in CONFIGS},
        "target_overhead": TARGET,
    }


def report(result: dict[str, Any], say: Callable[[Any], None]) -> None:
    table = Table(title=f"fault and defense overhead — {result['messages']} messages, median of {result['reps']}")
    columns = ("configuration", "msgs/s median", "best", "ratio", "best ratio", "CPU ratio", "CPU µs/msg", "chains µs")
    for column in columns:
        table.add_column(column, justify="right")
    for c in CONFIGS:
        table.add_row(
            c, f"{result['msgs_per_s'][c]:,.0f}", f"{result['best_msgs_per_s'][c]:,.0f}",
            f"{result['ratio_to_no_rules'][c]:.3f}", f"{result['best_ratio_to_no_rules'][c]:.3f}",
            f"{result['cpu_ratio_to_no_rules'][c]:.3f}", f"{result['cpu_us_per_msg'][c]:.1f}",
            f"{result['interceptor_us_per_msg'][c]:.1f}",
        )  # fmt: skip
    say(table)
    say(
        "ratios are throughput against `no rules` (median, best repetition); CPU ratio = the pipeline's CPU per "
        "message with `no rules` over that plus the chains' extra CPU, which other load on the machine does not skew; "
        f"load average {', '.join(f'{x:.1f}' for x in result['machine']['load_avg'])}"
    )
    for name in ("ratio_to_no_rules", "best_ratio_to_no_rules", "cpu_ratio_to_no_rules"):
        worst = min(result[name][c] for c in ("10 rules", "defenses"))
        verdict = "within" if 1 - worst <= TARGET else "OVER"
        overhead = (1 - worst) * 100
        say(f"{name}: worst of 10 rules / defenses {overhead:.1f}% overhead ({verdict} the {TARGET:.0%} target)")


if __name__ == "__main__":
    run_repeated(__doc__, main, report, messages=20_000)
