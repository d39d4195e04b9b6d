"""`faultline.toml`: every setting of a deployment, with defaults that work without a file.

The file is parsed with `tomllib` and converted into frozen structs with
`msgspec.convert`, so a wrong key or type is one line that names its path
(`faultline.toml: Expected int, got str - at $.workers.tool.count`). Unknown
keys are errors. To add a section, add a struct with defaults and a field on
`Config`; a `dict[str, Struct]` field is a family of named tables such as
`[workers.<name>]`, and its errors name the table.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import tomllib
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import msgspec

from faultline._errors import ConfigError, SubjectError
from faultline.agents import EpisodeSpec
from faultline.core import (
    ALL_AGENTS,
    BUILTIN_SYSTEM,
    DEFAULT_HANDLER_TIMEOUT_S,
    DEFAULT_PREFIX,
    MAX_PARTITIONS,
    ModelBackend,
    check_token,
    is_import_path,
    is_plugin_name,
    load_plugin,
    parse_roster,
    plugin_error,
    registered,
)
from faultline.envs import use_plugin_path
from faultline.faults import check_defenses
from faultline.journal import MAX_SHARDS
from faultline.runtime._durations import Amount, Seconds, SecondsOrZero
from faultline.runtime.models import OpenAISettings, SimLatency, load_script

if TYPE_CHECKING:
    from faultline.bus import Bus, BusSettings, Login

DEFAULT_CONFIG_FILE = Path("faultline.toml")
"""Read by `load_config(None)` when it exists in the working directory."""

T = TypeVar("T")

DEFAULT_MODEL_ROLE = "default"
ALL_ROLES = "*"


MAX_WORKERS = 256
"""The most worker processes a group may have."""


class _Section(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of every section: immutable, keyword-only, unknown keys rejected."""


class NatsConfig(_Section, frozen=True):
    """Where the bus is. An empty `url` starts an embedded nats-server that stores into `store_dir`."""

    url: str = ""
    prefix: str = DEFAULT_PREFIX
    store_dir: str = "runs/nats"
    replicas: Annotated[int, msgspec.Meta(ge=1, le=5)] = 1
    """Copies of the journal stream kept by a NATS cluster (1 on a single server; 3 on three nodes)."""
    publish_timeout_s: Seconds = 5.0
    """How long one attempt to publish waits for the stream to confirm."""
    publish_retry_s: Seconds = 60.0
    """How long unconfirmed publishes are sent again, with the same message ids, before the publish (and its
    episode) fails; under the stream's 120 s duplicate window, so a retry is never stored twice."""
    ping_interval_s: Seconds = 5.0
    """How often a process pings its NATS server; two unanswered and it moves to another node."""
    idle_heartbeat_s: Seconds = 5.0
    """How long a long-lived consumer (a worker's, the journal's, a runner's of completions) stays quiet before
    the server names the last delivery it sent: deliveries lost on the way (a node or a route lost) are found
    within this, and a consumer silent for three of them is taken for lost and read again."""
    max_ack_pending: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 10_000
    """Inputs a worker's consumer (one per agent and shard) hands out unacknowledged at most. An episode holds
    one per agent while its handler runs, model calls included: more episodes in flight than this per agent
    and shard wait for others to finish. Applied to the consumers when the system starts."""
    sync_interval: Annotated[str, msgspec.Meta(pattern=r"^(|always|[1-9][0-9]*(ms|s|m|h))$")] = ""
    """How often the embedded nats-server writes the stream to disk: "always" (an fsync before it confirms each
    publish: a confirmed message survives a power cut), a duration such as "10s", or "" for nats-server's default,
    two minutes (a confirmed message survives the server's crash, not the host's). docs/multi-host.md."""
    server_cores: Annotated[int, msgspec.Meta(ge=0, le=4096)] = 0
    """How many cores the embedded nats-server runs Go code on at once (its GOMAXPROCS); 0: a quarter of this
    host's cores, at least one (shared among cells, at least one each), unless GOMAXPROCS is set in the environment.
    docs/scale.md."""
    credentials: str = ""
    """The NATS credential file this host's processes connect with (`--creds` overrides it); empty for none."""
    tls_ca: str = ""
    """The CA certificate clients check the server's against (`--tls-ca` overrides it); empty: no TLS, or the
    CA `faultline up --tls` made."""
    tls_cert: str = ""
    """The embedded server's own certificate for `--tls` (with `tls_key` and `tls_ca`); empty: one is made."""
    tls_key: str = ""
    cells: Annotated[int, msgspec.Meta(ge=1, le=MAX_SHARDS)] = 1
    """Independent embedded nats-servers a local run starts, each with a stream, a journal shard and the workers
    (`[workers]`, each group's `count` in every cell) of its own, among which it divides its episodes: no server
    stores every message. Above 1, `[journal] path` is the folder of a journal set of this many shards.
    docs/scale.md."""


class JournalConfig(_Section, frozen=True):
    path: str = "runs/journal.sqlite"
    """The journal file; with `shards` above 1, the folder of the journal set."""
    shards: Annotated[int, msgspec.Meta(ge=1, le=MAX_SHARDS)] = 1
    """Journal services, each writing the episodes that hash to it into a file of its own (docs/scale.md)."""
    trim_after_s: SecondsOrZero = 3600.0
    """How long after an episode's last message the stream keeps its messages, once journaled (the journal trims
    the rest, so a system that runs for days keeps a bounded store); 0 keeps every message for ever.
    docs/reliability.md says what a settled episode no longer has."""
    trim_every_s: Seconds = 10.0
    """How often the journal looks for what it may trim from the stream (settled episodes, dead letters it journaled):
    a dead letter leaves the stream within about this long of its journaling."""


class RuntimeConfig(_Section, frozen=True):
    """Limits of one worker process."""

    concurrency: Annotated[int, msgspec.Meta(ge=1)] = 256
    """Handlers a worker runs at once. A handler waiting on its model call gives its place up meanwhile, so
    against slow models a worker holds many more episodes in flight than this (see docs/models.md)."""
    handler_timeout_s: SecondsOrZero = 0.0
    """Longest one `on_message` call may run before it is cancelled; 0: `DEFAULT_HANDLER_TIMEOUT_S`, or a minute
    more than the longest call an `openai` role's retries allow, whichever is longer (`Config.handler_timeout_s`)."""
    ack_wait_s: Seconds = 60.0
    """How long NATS waits for an acknowledgement before redelivering."""
    drain_timeout_s: Seconds = 10.0
    """How long a stopping worker waits for handlers in flight."""
    linger_s: SecondsOrZero = 5.0
    """How long a completed episode's agent instances are kept for late messages. A message later than this
    meets them rebuilt from the stream, as replay would (one read of the stream each), so this trades the
    memory of completed episodes against reading them again."""


class WorkerConfig(_Section, frozen=True):
    """One kind of worker process: the agents it runs and how many processes.

    `"*"` stands for every agent that no other kind names; an agent named by two kinds, or two
    kinds with `"*"`, is refused by `check_system` (runtime/_layout.py), before anything starts.
    """

    agents: tuple[str, ...] = (ALL_AGENTS,)
    count: Annotated[int, msgspec.Meta(ge=1, le=MAX_WORKERS)] = 1


class AgentConfig(_Section, frozen=True):
    """A custom agent class (`package.module:Class`; empty for a built-in agent) and its model role.

    An empty `model_role` means the agent's own name; a role without a
    `[models.<role>]` table uses `[models.default]`.
    """

    class_: str = msgspec.field(default="", name="class")
    model_role: str = ""


class ModelConfig(OpenAISettings, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A model role: the offline `sim` stand-in, an OpenAI-compatible endpoint with these
    settings, or a backend of your own: a name registered under the `faultline.models` entry
    points, or `package.module:Class`, called with these settings.

    `tool_calls` says how the tool agent offers its tools to this role's model: "native"
    (OpenAI `tools`), or "text" for servers that lack tool calling (the tools described in
    the prompt, a call answered as a JSON object in the text; see docs/models.md).
    `reflection` "after_error" has the tool agent ask this role's model, after a failed tool
    call, for the structured reflection form (`<reflect>`, then `<call>` or `<final>`).
    """

    backend: str = "sim"
    tool_calls: Literal["native", "text"] = "native"
    reflection: Literal["off", "after_error"] = "off"
    script: str = ""
    """`backend = "scripted"`: a rules file (JSON lines, relative to the config file) or
    `package.module:function` (see `faultline.runtime.models.ScriptedBackend`)."""
    latency: SimLatency = SimLatency()
    """`backend = "sim"`: the emulated speed of a slow model, `[models.<role>.latency]` (see
    `faultline.runtime.models.SimLatency`); by default the simulator answers at once."""


class RunDefaults(_Section, frozen=True):
    """What `faultline run` uses when its command line does not say; 0 means "by backend".

    By backend: `sim` answers at once (8 episodes in flight, 120 s each); with an
    `openai` role, 2 in flight and an episode timeout of at least twice the longest
    call that role can make with its retries (`faultline doctor` measures better ones).
    """

    concurrency: Annotated[int, msgspec.Meta(ge=0)] = 0
    episode_timeout_s: SecondsOrZero = 0.0
    start_rate: Amount = 250.0
    """Episodes started per second while a run fills up to its concurrency (0: all at once); then an episode
    starts as one completes. Thousands started in one burst keep the workers from reading their publishes'
    confirmations for seconds."""
    stall_after_s: SecondsOrZero = 10.0
    """How long nothing of an episode must be in flight before the run ends it as stalled (a `failure` whose cause
    says who sent what last), rather than at its timeout; 0: never (`faultline.runtime.StallWatch`)."""


class MemoryConfig(_Section, frozen=True):
    """The memory service (MemToolAgent): what the tool agent retrieves, where entries live, how queries are embedded.

    `mode` "off" leaves memory out of a run; "topk" retrieves the `k` most
    similar entries; "dynamic" cuts the ranking at a similarity drop (`radius`,
    `prominence`, `peak`, with `fallback_k` when there is no drop, over the
    `candidates` most similar). The defaults are the paper's and the memory
    library's. `embedder` "local" needs no download; "openai" embeds through
    `[memory.openai]` (an OpenAI-compatible `/embeddings` endpoint), with
    `embedding_dim` 0 meaning "ask the endpoint". Reflections on failed
    episodes come from the model role `extractor_role`; with a `sim` backend
    they are written offline from the run's calls, tool answers and last reply. `extractor` "off"
    stores entries without any reflection and asks no extractor (the paper's
    "w/o memory extractor"); each episode records it, so the entry its run
    asked for is what the service and a rebuild write.
    `ranker` "rating" lists the examples grouped by the user's rating (the
    paper's simple ranker for preference tasks); "similarity" most similar first.
    `zero_ratings` is how many 0 ratings of a tool by one user hide it from that
    user: 1 is the paper's rule, 2 Faultline's earlier one (the pattern must recur).
    """

    mode: Literal["off", "topk", "dynamic"] = "off"
    k: Annotated[int, msgspec.Meta(ge=0)] = 5
    radius: Annotated[int, msgspec.Meta(ge=1)] = 10
    prominence: Annotated[float, msgspec.Meta(ge=0.0)] = 1e-5
    peak: Annotated[int, msgspec.Meta(ge=1)] = 1
    fallback_k: Annotated[int, msgspec.Meta(ge=0)] = 5
    candidates: Annotated[int, msgspec.Meta(ge=1)] = 200
    store: str = "runs/memory.sqlite"
    embedder: Literal["local", "openai"] = "local"
    embedding_dim: Annotated[int, msgspec.Meta(ge=0)] = 0
    hnsw_threshold: Annotated[int, msgspec.Meta(ge=1)] = 20_000
    extractor_role: str = "memory_extractor"
    extractor: Literal["on", "off"] = "on"
    ranker: Literal["similarity", "rating"] = "similarity"
    zero_ratings: Annotated[int, msgspec.Meta(ge=1)] = 1
    openai: OpenAISettings = OpenAISettings()


class DefensesConfig(_Section, frozen=True):
    """Inbound defenses (scope, cycle, dedup, rate), switched on per agent.

    `enabled` applies to every agent; `[defenses.agents]` maps an agent name to its
    own list (an empty list switches them off for that agent). The other keys are
    the defenses' parameters; the rate limit counts messages per window of
    causation depths (hops), never seconds, so replay reaches the same decisions.
    """

    enabled: tuple[str, ...] = ()
    agents: dict[str, tuple[str, ...]] = {}
    max_hops: Annotated[int, msgspec.Meta(ge=1)] = 256
    echo: bool = True
    rate_limit: Annotated[int, msgspec.Meta(ge=1)] = 4
    rate_window_hops: Annotated[int, msgspec.Meta(ge=1)] = 4


class FaultsConfig(_Section, frozen=True):
    """How workers follow the fault rules on `fl.ctl.faults`, and how commands wait for them."""

    load_timeout_s: Seconds = 10.0
    """Longest a starting worker may take to read the rules in force."""
    confirm_timeout_s: Seconds = 5.0
    """Longest `faultline inject`, `faults clear` and `run --fault` wait for workers to confirm."""


class PluginsConfig(_Section, frozen=True):
    """Folders of code that is not installed: every process that reads this config (workers,
    services, `replay`) puts them in front of its import path, so that a domain, agent class or
    model backend given as `package.module:Class` is found there."""

    path: tuple[str, ...] = (".",)
    """By default the config file's own folder (the working folder without a file), where a project's code sits."""


class SystemConfig(_Section, frozen=True):
    """The system a run's episodes run on: the built-in `tool-use` (a domain's tasks, `--domain`), or your own
    `package.module:Class` (a `faultline.agent.System`) with its input records in `inputs`, a JSON-lines file
    relative to this file. `--system` and `--inputs` override them."""

    class_: str = msgspec.field(default=BUILTIN_SYSTEM, name="class")
    inputs: str = ""


_EPISODE = EpisodeSpec(domain="", task="")
"""What an episode takes when nothing says otherwise: the helpers' settings default to it."""


class HelpersConfig(_Section, frozen=True):
    """The FAMA helpers: the roster `faultline run` uses when `--helpers` is not given, and how
    the tool agent works with them (see docs/helpers.md).

    `roster` entries are dce, tsa, tor, planner, verifier and memory:K. `wait_s` bounds the
    tool agent's wait for replies; `verifier_revisions` bounds the revised proposals after a
    RECHECK; `tor_threshold` is the tool output length (characters) tor restates. `sim_effect`
    is a parameter of the offline simulator only: the factor by which a helper's note lowers
    the simulated mistake rate it addresses; it says nothing about real models.
    """

    roster: tuple[str, ...] = ()
    wait_s: Seconds = _EPISODE.helper_wait_s
    verifier_revisions: Annotated[int, msgspec.Meta(ge=0)] = _EPISODE.verifier_revisions
    tor_threshold: Annotated[int, msgspec.Meta(ge=0)] = _EPISODE.tor_threshold
    sim_effect: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = _EPISODE.helper_effect
    confirm_timeout_s: Seconds = 5.0
    """Longest `faultline helpers set` and `clear` wait for a running system to take the change in."""


class FamaConfig(_Section, frozen=True):
    """The FAMA controller (docs/fama.md): whether `faultline up` runs it, the model role its judge
    stages ask, and how it turns analysed failures into a roster.

    Per (domain, model), the last `window` analysed failures count; a helper joins the roster when
    the mitigation agent recommended it for at least `share` of them, and no roster is chosen before
    `min_failures`. `dry_run` journals each decision without publishing it on `fl.ctl.helpers`.
    `attribution` adds the replay-based attribution's decisive step to each case ("oracle":
    oracle-guided repair; "auto": every method in turn), in `fama analyze` and `fama loop` and in
    the controller `faultline up` runs, which reads the failed episode from the journal file once the
    journal service has written it. It runs forks, whose agents call their models again, so it is
    off by default.

    `analysts` is what the analysts read. "trajectory", the FAMA paper's mode and the default: the
    conversation, the tool calls and their results, and the outcome as the completed event states it.
    "informed" adds the task's ground-truth actions and required outputs, the evidence that lines the
    trajectory up with them, and the attribution's decisive step; with "trajectory" an attribution
    that is on is reported beside the verdicts, never shown to the analysts.

    `rosters` is how recommendations become rosters. "shared", Faultline's own rule and the default:
    one roster per (domain, model), from `share` of the `window`, as above. "per_task", the FAMA paper's
    use: each task's next attempt takes the helpers recommended for that task's own failure; only
    `fama loop` runs it (a live system keeps one roster per (domain, model), so the controller refuses it).
    """

    enabled: bool = False
    role: str = "judge"
    window: Annotated[int, msgspec.Meta(ge=1)] = 20
    share: Annotated[float, msgspec.Meta(gt=0.0, le=1.0)] = 0.2
    min_failures: Annotated[int, msgspec.Meta(ge=1)] = 3
    dry_run: bool = False
    attribution: Literal["off", "oracle", "auto"] = "off"
    analysts: Literal["trajectory", "informed"] = "trajectory"
    rosters: Literal["shared", "per_task"] = "shared"


class Config(_Section, frozen=True):
    """The whole file. Every field has a default, so `Config()` is a working offline setup."""

    nats: NatsConfig = NatsConfig()
    journal: JournalConfig = JournalConfig()
    runtime: RuntimeConfig = RuntimeConfig()
    workers: dict[str, WorkerConfig] = msgspec.field(default_factory=lambda: {"main": WorkerConfig()})
    agents: dict[str, AgentConfig] = {}
    models: dict[str, ModelConfig] = msgspec.field(default_factory=lambda: {DEFAULT_MODEL_ROLE: ModelConfig()})
    memory: MemoryConfig = MemoryConfig()
    defenses: DefensesConfig = DefensesConfig()
    faults: FaultsConfig = FaultsConfig()
    run: RunDefaults = RunDefaults()
    plugins: PluginsConfig = PluginsConfig()
    system: SystemConfig = SystemConfig()
    helpers: HelpersConfig = HelpersConfig()
    fama: FamaConfig = FamaConfig()

    @property
    def partitions(self) -> int:
        """Into how many partitions the subjects divide the episodes: the least common multiple of the journal's
        shards and every worker group's count, so that each shard's consumer is filtered on the server to its own
        partitions. Where that passes `MAX_PARTITIONS`, one: shards then pass over the others' messages themselves."""
        partitions = math.lcm(self.journal.shards, *(worker.count for worker in self.workers.values()))
        return partitions if partitions <= MAX_PARTITIONS else 1

    @property
    def journal_shards(self) -> int:
        """The journal's shards: one per cell where a run has several (`[nats] cells`), else `[journal] shards`."""
        return self.nats.cells if self.nats.cells > 1 else self.journal.shards

    @property
    def handler_timeout_s(self) -> float:
        """`[runtime] handler_timeout_s`, or when it is 0, long enough for every `openai` role's slowest call:
        a handler cancelled in the middle of a retry would leave its call's attempts unjournaled."""
        if self.runtime.handler_timeout_s:
            return self.runtime.handler_timeout_s
        budgets = (m.call_budget_s + 60.0 for m in self.models.values() if m.backend == "openai")
        return max(DEFAULT_HANDLER_TIMEOUT_S, max(budgets, default=0.0))

    def model(self, role: str) -> ModelConfig:
        """The settings for a model role, falling back to `[models.default]`."""
        if role in self.models:
            return self.models[role]
        return self.models.get(DEFAULT_MODEL_ROLE, ModelConfig())

    def role_of(self, agent: str) -> str:
        """The model role an agent's requests use: its `model_role`, else its own name."""
        settings = self.agents.get(agent)
        return settings.model_role if settings and settings.model_role else agent


def load_config(
    path: Path | None = None,
    *,
    models: Mapping[str, Mapping[str, Any]] | None = None,
    overrides: Callable[[Config], Config] | None = None,
) -> Config:
    """Read a config file; with no path, `./faultline.toml` if it exists, else the defaults.

    Relative paths in the file (journal, NATS store, plugins) are taken relative to the file's
    folder, except in the JSON config `faultline run` hands its processes, whose paths are placed
    already (relative to the folder they share with the run); the plugin folders are put on the
    import path at once. `models` are settings per model role laid over the file's
    `[models.<role>]` tables (the command line's); role `*` sets a key for every role.
    `overrides` makes the command line's other choices (`--model`, `--base-url` ...) on the parsed
    settings before they are checked, so that the check judges the configuration the command uses.
    """
    if path is None:
        if not DEFAULT_CONFIG_FILE.is_file():
            if models or overrides:
                source = "--model-setting" if models else "the command line"
                config = parse_config(with_model_settings({}, models or {}), source=source, overrides=overrides)
            else:
                config = Config()
            use_plugin_path(config.plugins.path)
            return config
        path = DEFAULT_CONFIG_FILE
    source = str(path)
    # JSON is what `faultline run` hands its workers: the effective config after flags.
    handed = path.suffix == ".json"
    try:
        text = path.read_text(encoding="utf-8")
        raw = json.loads(text) if handed else tomllib.loads(text)
    except FileNotFoundError:
        raise ConfigError(f"{source}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{source}: cannot read the file ({exc})") from None
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{source}: invalid {'JSON' if handed else 'TOML'}: {exc}") from None
    if models:
        raw, source = with_model_settings(raw, models), f"{source} with --model-setting"
    config = parse_config(raw, source=source, overrides=overrides)
    if not handed:
        config = _relative_to(config, path.parent)
    use_plugin_path(config.plugins.path)
    check_scripts(config, source)
    return config


def check_scripts(config: Config, source: str = "faultline.toml") -> None:
    """Read every scripted role's rules (or import its function) now: a bad line is one error, before anything starts."""
    for role, settings in config.models.items():
        if settings.backend == "scripted":
            try:
                load_script(settings.script)
            except ConfigError as exc:
                raise ConfigError(f"{source}: {exc} - at $.models.{role}.script") from None


def with_model_settings(raw: dict[str, Any], models: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Parsed TOML with `models` laid over its `[models.<role>]` tables; role `*` reaches every role.

    A key set for every role is also set in each role table the file has, so it wins
    over the file there as it does everywhere else.
    """
    tables = raw.get("models", {})
    if not isinstance(tables, dict):
        return raw
    merged = {role: dict(table) if isinstance(table, dict) else table for role, table in tables.items()}
    for role, settings in models.items():
        targets = [DEFAULT_MODEL_ROLE, *merged] if role == ALL_ROLES else [role]
        for target in dict.fromkeys(targets):
            table = merged.setdefault(target, {})
            if isinstance(table, dict):
                table.update(settings)
    return {**raw, "models": merged}


def parse_config(
    raw: dict[str, Any], *, source: str = "faultline.toml", overrides: Callable[[Config], Config] | None = None
) -> Config:
    """A Config from already-parsed TOML; errors start with `source` and name the key's path. `overrides`
    changes the settings before they are checked (see `load_config`)."""
    document = dict(raw)
    named = _named_tables()
    tables = {name: document.pop(name) for name in named if name in document}
    config = _convert(document, Config, "$", source)
    if "models" in tables:
        tables["models"] = _with_default_model(tables["models"], source)
    for name, entries in tables.items():
        entry_type = named[name]
        if not isinstance(entries, dict):
            raise ConfigError(f"{source}: Expected a table of named entries - at $.{name}")
        for key in entries:
            _check_token(key, f"$.{name}", source, "table name")
        converted = {key: _convert(value, entry_type, f"$.{name}.{key}", source) for key, value in entries.items()}
        config = msgspec.structs.replace(config, **{name: converted})
    if DEFAULT_MODEL_ROLE not in config.models:
        config = msgspec.structs.replace(config, models={DEFAULT_MODEL_ROLE: ModelConfig(), **config.models})
    if overrides is not None:
        config = overrides(config)
    _check(config, source)
    return config


def bus_settings(config: Config) -> BusSettings:
    """The bus's settings from `[nats]`, with the worker's ack wait for every consumer."""
    from faultline.bus import BusSettings  # here, so that reading a config (for replay) loads no NATS

    n = config.nats
    return BusSettings(
        replicas=n.replicas,
        publish_timeout_s=n.publish_timeout_s,
        publish_retry_s=n.publish_retry_s,
        ping_interval_s=n.ping_interval_s,
        idle_heartbeat_s=n.idle_heartbeat_s,
        ack_wait_s=config.runtime.ack_wait_s,
        max_ack_pending=n.max_ack_pending,
        partitions=config.partitions,
    )


async def connect(config: Config, url: str, *, name: str, prefix: str = "", login: Login | None = None) -> Bus:
    """A connection to `url` as client `name`, under `[nats] prefix` (or `prefix`), with `bus_settings(config)`."""
    from faultline.bus import Bus  # here, so that reading a config (for replay) loads no NATS

    return await Bus.connect(
        url, prefix=prefix or config.nats.prefix, settings=bus_settings(config), name=name, login=login
    )


def make_backend(config: Config, role: str) -> ModelBackend:
    """The backend for a model role: the class or factory its `backend` names, called with the role's settings."""
    settings = config.model(role)
    factory = load_plugin("model", settings.backend)
    if not callable(factory):
        raise plugin_error("model", settings.backend, f"a {type(factory).__name__} is not a backend class or factory")
    try:
        backend = factory(settings)
    except Exception as exc:  # noqa: BLE001 - whatever a plugin's constructor raises, the answer is one line
        raise plugin_error("model", settings.backend, f"building it raised {type(exc).__name__}: {exc}") from None
    if not isinstance(backend, ModelBackend):
        raise plugin_error("model", settings.backend, "what it built has no `complete` and `aclose` methods")
    return backend


def _named_tables() -> dict[str, type[msgspec.Struct]]:
    """Config fields of type `dict[str, SomeStruct]`: the `[section.<name>]` families."""
    hints = typing.get_type_hints(Config)
    return {
        name: typing.get_args(hint)[1]
        for name, hint in hints.items()
        if typing.get_origin(hint) is dict and isinstance(typing.get_args(hint)[1], type)
    }


def _with_default_model(entries: Any, source: str) -> Any:
    """Each `[models.<role>]` table inherits the keys it does not set from `[models.default]`."""
    if not isinstance(entries, dict):
        return entries
    default = entries.get(DEFAULT_MODEL_ROLE, {})
    if not isinstance(default, dict):
        raise ConfigError(f"{source}: Expected a table - at $.models.{DEFAULT_MODEL_ROLE}")
    merged: dict[str, Any] = {DEFAULT_MODEL_ROLE: default} if DEFAULT_MODEL_ROLE in entries else {}
    for role, table in entries.items():
        if role != DEFAULT_MODEL_ROLE:
            merged[role] = {**default, **table} if isinstance(table, dict) else table
    return merged


def _convert(value: Any, type_: type[T], path: str, source: str) -> T:
    try:
        return msgspec.convert(value, type_)
    except msgspec.ValidationError as exc:
        message = _with_suggestion(str(exc), type_).replace("`", "")
        if " - at $" in message:
            message = message.replace(" - at $", f" - at {path}", 1)
        elif path != "$":
            message = f"{message} - at {path}"
        raise ConfigError(f"{source}: {message}") from None


_UNKNOWN_FIELD = re.compile(r"^Object contains unknown field `([^`]+)`(?: - at `\$((?:\.[^.`]+)*)`)?$")


def _with_suggestion(message: str, type_: type) -> str:
    """msgspec's message, with the closest key of the table named when it is an unknown key (a typo)."""
    match = _UNKNOWN_FIELD.match(message)
    if match is None:
        return message
    table: Any = type_
    for part in filter(None, (match.group(2) or "").split(".")):
        table = typing.get_type_hints(table).get(part) if isinstance(table, type) else None
    if not (isinstance(table, type) and issubclass(table, msgspec.Struct)):
        return message
    close = difflib.get_close_matches(match.group(1), [f.encode_name for f in msgspec.structs.fields(table)], n=1)
    if not close:
        return message
    unknown, _, where = message.partition(" - at ")
    return f"{unknown} (did you mean `{close[0]}`?)" + (f" - at {where}" if where else "")


_DEFAULT_NATS = NatsConfig()


def _check(config: Config, source: str) -> None:
    """What a type cannot say: names that must be subject tokens, class specs, a model for `openai`."""
    _check_token(config.nats.prefix, "$.nats.prefix", source, "subject prefix")
    try:
        if config.nats.publish_retry_s != _DEFAULT_NATS.publish_retry_s:  # the bus checks it; its default holds
            bus_settings(config)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc} - at $.nats.publish_retry_s") from None
    own_tls = (config.nats.tls_cert, config.nats.tls_key, config.nats.tls_ca)
    if (config.nats.tls_cert or config.nats.tls_key) and not all(own_tls):
        raise ConfigError(
            f"{source}: tls_cert, tls_key and tls_ca go together: set all three, or none for `--tls` to make them"
            " - at $.nats"
        )
    for name, worker in config.workers.items():
        for agent in worker.agents:
            if agent != ALL_AGENTS:
                _check_token(agent, f"$.workers.{name}.agents", source, "agent name")
    if not is_plugin_name("system", config.system.class_):
        known = ", ".join(f'"{name}"' for name in sorted(registered("system")))
        raise ConfigError(f"{source}: class must be {known} or package.module:Class - at $.system.class")
    for name, agent_config in config.agents.items():
        if agent_config.class_ and not is_import_path(agent_config.class_):
            raise ConfigError(
                f"{source}: Expected 'package.module:ClassName', got {agent_config.class_!r} - at $.agents.{name}.class"
            )
    defense_lists = {"enabled": config.defenses.enabled}
    defense_lists |= {f"agents.{agent}": names for agent, names in config.defenses.agents.items()}
    for path, names in defense_lists.items():
        try:
            check_defenses(names)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc} - at $.defenses.{path}") from None
    for role, settings in config.models.items():
        if not is_plugin_name("model", settings.backend):
            known = ", ".join(f'"{name}"' for name in sorted(registered("model")))
            raise ConfigError(f"{source}: backend must be {known} or package.module:Class - at $.models.{role}.backend")
        if settings.backend == "openai" and not settings.model:
            raise ConfigError(f'{source}: a model name is needed with backend = "openai" - at $.models.{role}.model')
        problem = settings.latency.problem()
        if problem:
            raise ConfigError(f"{source}: {problem} - at $.models.{role}.latency")
        if settings.latency.emulated and settings.backend != "sim":
            raise ConfigError(
                f'{source}: an emulated latency is for backend = "sim" only, and this role\'s is {settings.backend!r}'
                f' (set distribution = "none" and tokens_per_s = 0 to inherit none) - at $.models.{role}.latency'
            )
    try:
        parse_roster(config.helpers.roster)
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc} - at $.helpers.roster") from None
    if problem := cells_problem(config):
        raise ConfigError(f"{source}: {problem} - at $.nats.cells")
    if config.memory.embedder == "openai" and not config.memory.openai.model:
        raise ConfigError(f'{source}: an embedding model is needed with embedder = "openai" - at $.memory.openai.model')


def cells_problem(config: Config) -> str:
    """Why `config`'s cells (`[nats] cells`) cannot run as it stands, in words; "" when they can (or there is one)."""
    cells = config.nats.cells
    if cells == 1:
        return ""
    if config.nats.url:
        return f"{cells} cells start a nats-server each, so nats.url ({config.nats.url}) cannot name one"
    if config.journal.shards not in (1, cells):
        return f"{cells} cells write a journal shard each: set [journal] shards to {cells} or leave it out"
    if config.nats.replicas > 1:
        return f"{cells} cells each keep their stream on one server: set [nats] replicas to 1"
    if config.memory.mode != "off":
        return f"{cells} cells have a stream each, and the memory service reads one: set memory to off"
    return ""


def _check_token(value: str, path: str, source: str, what: str) -> None:
    try:
        check_token(value, what)
    except SubjectError as exc:
        raise ConfigError(f"{source}: {exc} - at {path}") from None


_NATS_FILES = ("credentials", "tls_ca", "tls_cert", "tls_key")
"""Keys of `[nats]` that name files, taken relative to the config file's folder."""


def _relative_to(config: Config, folder: Path) -> Config:
    def place(value: str) -> str:
        return value if Path(value).is_absolute() else str(folder / value)

    return msgspec.structs.replace(
        config,
        nats=msgspec.structs.replace(
            config.nats,
            store_dir=place(config.nats.store_dir),
            **{key: place(getattr(config.nats, key)) for key in _NATS_FILES if getattr(config.nats, key)},
        ),
        journal=msgspec.structs.replace(config.journal, path=place(config.journal.path)),
        memory=msgspec.structs.replace(config.memory, store=place(config.memory.store)),
        plugins=PluginsConfig(path=tuple(map(place, config.plugins.path))),
        system=msgspec.structs.replace(config.system, inputs=place(config.system.inputs))
        if config.system.inputs
        else config.system,
        models={role: _script_placed(m, place) for role, m in config.models.items()},
    )


def _script_placed(settings: ModelConfig, place: Callable[[str], str]) -> ModelConfig:
    """A scripted role's rules file, relative to the config file's folder (a function is left as it is)."""
    if not settings.script or is_import_path(settings.script):
        return settings
    return msgspec.structs.replace(settings, script=place(settings.script))
