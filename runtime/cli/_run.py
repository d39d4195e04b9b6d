"""`faultline run`: the main job — run tasks on a live system and print pass^k."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

import anyio
import msgspec
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from faultline._errors import ConfigError, UsageError
from faultline.bus import Bus, EpisodeCompleted
from faultline.envs import ERROR_CATEGORIES, load_domain
from faultline.runtime._config import Config, MemoryConfig, load_config
from faultline.runtime._faulting import (
    apply_defense_flags,
    follow_settings,
    parse_fault_spec,
    rules_in_force,
    scoped_to_run,
)
from faultline.runtime._run import RunPlan, Summary, plan_episodes, run_plan, summarize, wait_for_journal
from faultline.runtime._supervisor import ProcessSpec, Supervisor
from faultline.runtime.cli._system import add_defense_flag, worker_specs

SIM_NOTE = "sim is an offline simulator that follows each task's ground truth; its numbers exercise the runtime, they say nothing about models"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "run",
        help="run tasks of a domain K times each on a fresh local system; print pass^k",
        description="Start nats-server, the journal service and the workers, run the tasks, print pass^k. "
        + SIM_NOTE
        + ".",
    )
    p.add_argument("--domain", default="retail", help="retail, phone, or package.module:Class (default retail)")
    p.add_argument("--tasks", type=int, default=10, metavar="N", help="the first N tasks of the domain (default 10)")
    p.add_argument("--trials", type=int, default=1, metavar="K", help="runs per task, for pass^1..pass^K (default 1)")
    add_model_flags(p)
    p.add_argument("--journal", type=Path, help="journal file (default from config: runs/journal.sqlite)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--error-rates",
        type=float,
        default=0.0,
        metavar="P",
        help="sim: per-decision mistake rate for each FAMA category",
    )
    p.add_argument(
        "--error-rate",
        action="append",
        default=[],
        metavar="CATEGORY=P",
        help=f"sim: one category's rate ({', '.join(ERROR_CATEGORIES)})",
    )
    p.add_argument("--concurrency", type=int, default=8, help="episodes in flight at once (default 8)")
    p.add_argument(
        "--workers", type=int, default=0, metavar="N", help="worker processes per agent group (default from config: 1)"
    )
    p.add_argument(
        "--episode-timeout",
        type=float,
        default=120.0,
        metavar="S",
        help="complete an episode as timeout after S seconds",
    )
    p.add_argument("--max-turns", type=int, default=30, help="user turns before an episode fails (default 30)")
    p.add_argument("--run-id", default="", help="prefix of this run's episode ids (default: random)")
    p.add_argument(
        "--memory",
        default=None,
        metavar="MODE",
        help="MemToolAgent memory: off, topk[:K] or dynamic (default from config: off); entries persist next to the journal",
    )
    p.add_argument(
        "--nats", default="", metavar="URL", help="use the system already running at URL (its workers and journal)"
    )
    p.add_argument(
        "--fault", action="append", default=[], metavar="TYPE[:k=v,...]",
        help="a fault rule for the length of the run, on its episodes (e.g. storm:copies=3,kind=tool_call); repeatable",
    )  # fmt: skip
    add_defense_flag(p)
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(handler=_run)


def add_model_flags(p: argparse.ArgumentParser) -> None:
    """Which model every role uses: shared by the commands that call models."""
    p.add_argument(
        "--model",
        choices=["sim", "openai"],
        default=None,
        help="backend for every role (default: the config's, else sim)",
    )
    p.add_argument("--base-url", default="", help="OpenAI-compatible endpoint for --model openai")
    p.add_argument("--model-name", default="", help="model name for --model openai")
    p.add_argument("--config", type=Path, help="faultline.toml (default: ./faultline.toml if present)")


def _error_rates(args: argparse.Namespace) -> dict[str, float]:
    rates = {c: args.error_rates for c in ERROR_CATEGORIES if args.error_rates}
    for item in args.error_rate:
        category, _, value = item.partition("=")
        if category not in ERROR_CATEGORIES:
            raise UsageError(f"--error-rate {item!r}: category must be one of {', '.join(ERROR_CATEGORIES)}")
        try:
            rates[category] = float(value)
        except ValueError:
            raise UsageError(f"--error-rate {item!r}: the rate must be a number") from None
    if any(not 0.0 <= r <= 1.0 for r in rates.values()):
        raise UsageError("error rates must be between 0 and 1")
    return rates


def effective_config(args: argparse.Namespace) -> Config:
    """The config file with the command line's model and worker choices applied."""
    config = load_config(args.config)
    if args.model == "sim":
        models = {role: msgspec.structs.replace(m, backend="sim") for role, m in config.models.items()}
        config = msgspec.structs.replace(config, models=models)
    elif args.model == "openai":
        models = {}
        for role, m in config.models.items():
            m = msgspec.structs.replace(
                m, backend="openai", base_url=args.base_url or m.base_url, model=args.model_name or m.model
            )
            if not m.model:
                raise ConfigError(f"--model openai needs a model name: pass --model-name or set models.{role}.model")
            models[role] = m
        config = msgspec.structs.replace(config, models=models)
    if getattr(args, "workers", 0):
        workers = {name: msgspec.structs.replace(w, count=args.workers) for name, w in config.workers.items()}
        config = msgspec.structs.replace(config, workers=workers)
    return config


def _with_memory(config: Config, mode: str | None, journal: Path) -> Config:
    memory = config.memory
    if mode is not None:
        name, _, k = mode.partition(":")
        if name not in ("off", "topk", "dynamic") or (k and (name != "topk" or not k.isdigit())):
            raise UsageError(f"--memory {mode!r}: use off, topk, topk:K or dynamic")
        memory = msgspec.structs.replace(memory, mode=name, **({"k": int(k)} if k else {}))
    if memory.store == MemoryConfig().store:
        memory = msgspec.structs.replace(memory, store=str(journal.parent / "memory.sqlite"))
    return msgspec.structs.replace(config, memory=memory)


def _uses_sim(config: Config) -> bool:
    return any(m.backend == "sim" for m in config.models.values()) or not config.models


def _run(args: argparse.Namespace) -> int:
    if args.tasks < 1 or args.trials < 1 or args.concurrency < 1:
        raise UsageError("--tasks, --trials and --concurrency must be at least 1")
    if args.defense and args.nats:
        raise UsageError("--defense sets up the workers `run` starts; with --nats, give it to `faultline up`")
    config = apply_defense_flags(effective_config(args), args.defense)
    journal = args.journal or Path(config.journal.path)
    config = _with_memory(config, args.memory, journal)
    domain = load_domain(args.domain)
    run_id = args.run_id or f"r{os.urandom(3).hex()}"
    rules = [scoped_to_run(parse_fault_spec(spec), run_id) for spec in args.fault]
    plan = RunPlan(
        domain=args.domain,
        tasks=args.tasks,
        trials=args.trials,
        seed=args.seed,
        concurrency=args.concurrency,
        episode_timeout_s=args.episode_timeout,
        max_turns=args.max_turns,
        error_rates=_error_rates(args),
        run_id=run_id,
        memory=msgspec.to_builtins(config.memory) if config.memory.mode != "off" else {},
    )
    planned = plan_episodes(plan, domain)
    console = Console(stderr=True)
    if _uses_sim(config) and not args.json:
        console.print(f"[dim]note: {SIM_NOTE}[/dim]")

    async def main() -> Summary:
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[ok]} ok"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
            disable=not console.is_terminal and args.json,
        ) as progress:
            bar = progress.add_task(f"{args.domain} episodes", total=len(planned), ok=0)
            ok = 0

            def on_done(_episode: str, done: EpisodeCompleted) -> None:
                nonlocal ok
                ok += done.outcome == "success"
                progress.update(bar, advance=1, ok=ok)

            if args.nats:
                bus = await Bus.connect(args.nats, prefix=config.nats.prefix)
                try:
                    async with rules_in_force(bus, rules, workers=None, settings=follow_settings(config)):
                        result = await run_plan(bus, plan, planned, on_done)
                finally:
                    await bus.close()
                return summarize(result, args.trials)
            return await _run_local(config, journal, plan, planned, on_done, progress, rules)

    summary = anyio.run(main)
    if args.json:
        print(msgspec.json.encode(summary).decode())
    else:
        Console().print(_table(summary, args.domain, run_id))
    return 0


async def _run_local(config, journal, plan, planned, on_done, progress, rules) -> Summary:  # type: ignore[no-untyped-def]
    journal.parent.mkdir(parents=True, exist_ok=True)
    run_dir = journal.parent / ".faultline"
    run_dir.mkdir(parents=True, exist_ok=True)
    effective = run_dir / "effective-config.json"
    effective.write_bytes(msgspec.json.encode(config))
    workers = worker_specs(config, effective)
    memory_on = config.memory.mode != "off"
    supervisor = Supervisor(
        journal_path=journal,
        workers=workers,
        services=[ProcessSpec("memory", ("memory", "serve", "--config", str(effective)))] if memory_on else [],
        prefix=config.nats.prefix,
        log_dir=run_dir / "logs",
    )
    boot = progress.add_task("starting nats-server, journal, workers", total=None, ok="")
    async with anyio.create_task_group() as tg:
        try:
            await supervisor.start(tg)
            progress.remove_task(boot)
            assert supervisor.bus is not None
            async with rules_in_force(supervisor.bus, rules, workers=len(workers), settings=follow_settings(config)):
                result = await run_plan(supervisor.bus, plan, planned, on_done)
            if memory_on:
                from faultline.agents.memory import wait_for_memory

                await wait_for_memory(supervisor.bus)
            await wait_for_journal(supervisor.bus)
        finally:
            with anyio.CancelScope(shield=True):
                await supervisor.stop()
    return summarize(result, plan.trials, str(journal))


def _table(summary: Summary, domain: str, run_id: str) -> Table:
    table = Table(title=f"faultline run {run_id} — {domain}, {summary.tasks} tasks x {summary.trials} trials")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for k, value in summary.pass_k.items():
        table.add_row(f"pass^{k}", "-" if math.isnan(value) else f"{value:.3f}")
    outcomes = ", ".join(f"{n} {o}" for o, n in sorted(summary.outcomes.items()))
    table.add_row("episodes", f"{summary.episodes} ({outcomes})")
    table.add_row("avg turns", f"{summary.avg_turns:.1f}")
    table.add_row("avg tokens", f"{summary.avg_tokens:.0f}")
    table.add_row("avg latency / episode", f"{summary.avg_latency_s * 1000:.0f} ms")
    table.add_row("wall time", f"{summary.seconds:.1f} s ({summary.episodes_per_s:.1f} episodes/s)")
    if summary.journal:
        table.add_row("journal", summary.journal)
    return table
