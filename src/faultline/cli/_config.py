"""`faultline config check`: load the configuration and print what will take effect."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from faultline.api import config_source
from faultline.cli import _jsonl
from faultline.cli._models import add_model_flags, effective_config
from faultline.runtime import (
    ALL_AGENTS,
    DEFAULT_CONFIG_FILE,
    Config,
    ModelConfig,
    check_system,
    system_of,
)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = sub.add_parser("config", help="check the configuration file")
    parser.set_defaults(handler=lambda args: parser.print_help())
    commands = parser.add_subparsers(dest="config_command", metavar="COMMAND")
    check = commands.add_parser(
        "check",
        help="validate a config file and print the effective settings",
        description=f"Validate a config file (default ./{DEFAULT_CONFIG_FILE} if present, else the built-in"
        " defaults) as `run` and `up` do, importing every agent class, and print the effective settings."
        " The model flags lie over the file as they do for `run`, so a run's command line checks the"
        " configuration that run uses. Exit 1 with one line naming the bad key.",
    )
    add_model_flags(check)
    check.add_argument("--json", action="store_true", help="JSON lines (docs/json.md)")
    check.set_defaults(handler=_check)


def _check(args: argparse.Namespace) -> int:
    path: Path | None = args.config
    if path is None and DEFAULT_CONFIG_FILE.is_file():
        path = DEFAULT_CONFIG_FILE
    config = effective_config(args)
    groups = check_system(config, config_source(path))
    if args.json:
        _jsonl.rows("worker_group", ({"group": g, "agents": list(a)} for g, a in groups.items()))
        models = {role: m.backend for role, m in config.models.items()}
        _jsonl.summary({"config": str(path or ""), "ok": True, "journal": config.journal.path, "models": models})
        return 0
    given = any((args.model, args.base_url, args.model_name, args.model_setting))
    flags = " with the command line's model flags" if given else ""
    print(f"{path}{flags}: ok" if path else f"no config file: built-in defaults{flags}")
    for line in summary(config, groups):
        print(line)
    return 0


def summary(config: Config, groups: dict[str, tuple[str, ...]]) -> list[str]:
    """A few lines that say what a run with this configuration would use; `groups` from `check_system`."""
    nats, runtime = config.nats, config.runtime
    bus = f"{nats.url}" if nats.url else f"embedded nats-server storing in {nats.store_dir}"
    lines = [
        f"nats     {bus}, subject prefix {nats.prefix}",
        f"journal  {config.journal.path}",
        f"runtime  {runtime.concurrency} episodes at once per worker, handler timeout {config.handler_timeout_s:g}s,"
        f" ack wait {runtime.ack_wait_s:g}s, drain timeout {runtime.drain_timeout_s:g}s,"
        f" linger {runtime.linger_s:g}s",
    ]
    workers = [
        f"{name}: {_processes(config.workers[name].count)} running {', '.join(agents) or 'no agent'}"
        + (' ("*": every agent no other group names)' if ALL_AGENTS in config.workers[name].agents else "")
        for name, agents in groups.items()
    ]
    agents = [
        f"{name}: {agent.class_ or 'built-in'}, model role {config.role_of(name)}"
        for name, agent in config.agents.items()
    ]
    lines += _block("system", _system(config))
    lines += _block("workers", workers)
    lines += _block("agents", agents or ["no [agents] tables"])
    lines += _block("models", [f"{role}: {_model(m)}" for role, m in config.models.items()])
    return lines


def _system(config: Config) -> list[str]:
    """What the system is: the built-in tool-use agents, or one's own with its entry, finishers and inputs."""
    ref = system_of(config)
    if not ref.is_user_system:
        return ["tool-use (built-in): env, tool and user on --domain's tasks; env completes and scores episodes"]
    system = ref.system
    inputs = config.system.inputs or "none: give --inputs FILE.jsonl to `run`"
    return [
        f"{ref.path}: agents {', '.join(cls.name for cls in system.agents)}",
        f"entry {system.entry}; finished by {', '.join(system.finishers)}; graded by the scorer ({ref.path}.score)",
        f"inputs {inputs}",
    ]


def _block(title: str, items: list[str]) -> list[str]:
    return [f"{title if i == 0 else '':<8} {item}" for i, item in enumerate(items)]


def _processes(count: int) -> str:
    return "1 process" if count == 1 else f"{count} processes"


def _model(settings: ModelConfig) -> str:
    if settings.backend == "sim":
        return "sim (offline deterministic simulation, not a model)"
    if settings.backend == "scripted":
        return f"scripted (answers from {settings.script}; offline, not a model)"
    if settings.backend != "openai":
        return f"{settings.backend} (a backend of your own)"
    if not settings.api_key_env:
        key = "no API key"
    else:
        state = "set" if os.environ.get(settings.api_key_env) else "not set"
        key = f"key from ${settings.api_key_env} ({state})"
    temperature = "endpoint default" if settings.temperature is None else f"{settings.temperature:g}"
    return (
        f"openai {settings.model} at {settings.base_url}, {key}, temperature {temperature},"
        f" timeout {settings.timeout_s:g}s, {settings.max_retries} retries"
        f" (backoff {settings.backoff_base_s:g}s doubling to {settings.backoff_cap_s:g}s)"
    )
