"""`faultline up`, `faultline worker`, `faultline journal serve` and `faultline status`."""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import anyio
import msgspec
from rich.console import Console
from rich.table import Table
from rich.text import Text

from faultline._errors import ConfigError, JournalError, NoResponderError, ReplyTimeoutError, UsageError
from faultline._files import write_atomically
from faultline.api import (
    config_flag,
    config_source,
    fama_service,
    journal_problem,
    made_tls,
    roster_worker,
    run_supervised,
    with_helpers,
    worker_specs,
)
from faultline.bus import OPERATOR, Access, Bus, FollowSettings, Login, StreamState, TLSFiles, read_rules
from faultline.cli import _jsonl
from faultline.cli._args import add_config_flag, connection_flags, otel_flags, otel_headers
from faultline.cli._connect import STATE_FILE, config_of, login, nats_url, run_on_system, subject_prefix, up_workers
from faultline.cli._text import counted, stderr_console, table_console
from faultline.core import HELPERS, MAX_PARTITIONS
from faultline.journal import MAX_SHARDS
from faultline.runtime import (
    ANY_COMPLETER,
    DEFAULT_CONFIG_FILE,
    STATUS_WAIT_S,
    STATUS_WINDOW_S,
    Config,
    JournalState,
    OtelStream,
    ProcessSpec,
    Rosters,
    Supervisor,
    WorkerPlace,
    WorkerStatus,
    apply_defense_flags,
    ask_journal,
    bus_settings,
    check_system,
    completing_agents,
    follow_settings,
    hold_directories,
    journal_backlog,
    read_rosters,
    run_journal,
    run_worker,
    state_dir,
    system_access,
    system_of,
    worker_places,
    worker_statuses,
)

OTEL_HEADERS_ENV = "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
HEALTH_TIMEOUT_S = 3.0
"""How long `journal health` waits for the journal service's answer."""
T = TypeVar("T")


def add_insecure_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--insecure",
        action="store_true",
        help="run NATS without credentials or permissions (anyone who reaches its port may publish anything); for debugging",
    )
    p.add_argument(
        "--tls",
        action="store_true",
        help="nats-server speaks TLS only, with nats.tls_cert/tls_key/tls_ca, else a CA and certificate made with openssl",
    )


def server_tls(args: argparse.Namespace, config: Config, folder: Path) -> TLSFiles | None:
    """The embedded server's TLS files with --tls (see `made_tls`), else None."""
    return made_tls(config, folder) if args.tls else None


def warn_insecure(console: Console, port_or_url: str) -> None:
    console.print(
        Text.assemble(
            ("warning:", "bold yellow"),
            f" --insecure: NATS {port_or_url} takes no credentials, so anyone who reaches it may publish fault rules,"
            " completions and messages as any agent; use it for debugging only",
        ),
        soft_wrap=True,
        highlight=False,
    )


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("up", help="start nats-server, the journal service and the workers; Ctrl-C stops")
    connection_flags(p, starts_nats=True)
    p.add_argument("--journal", type=Path, help="journal file (default from config)")
    add_insecure_flag(p)
    add_defense_flag(p)
    otel_flags(p)
    p.set_defaults(handler=_up)

    p = sub.add_parser("worker", help="run agents in this process, against a running NATS server")
    connection_flags(p, service="worker-<group>.json of the group that runs the agents")
    p.add_argument("--agents", default="", help="agent names or package.module:Class, comma-separated")
    p.add_argument(
        "--follow-roster",
        action="store_true",
        help="also serve the FAMA helpers the live roster (fl.ctl.helpers) and the running episodes ask for",
    )
    p.add_argument("--shard", default="0/1", metavar="I/N", help="serve the episodes of shard I of N (default 0/1)")
    p.add_argument("--name", default="", help="process name announced to the supervisor")
    add_defense_flag(p)
    p.set_defaults(handler=_worker)

    p = sub.add_parser(
        "credentials",
        help="make the NATS credentials and permissions of the configured system (once; reused after), for other hosts",
    )
    add_config_flag(p)
    p.add_argument("--prefix", default="", help="subject prefix (default from config: fl)")
    p.add_argument(
        "--dir", type=Path, help="where to write them (default: .faultline/credentials beside the journal, as `up`)"
    )
    p.set_defaults(handler=_credentials)

    p = sub.add_parser("status", help="the workers of a running system, their agents and episodes in flight")
    connection_flags(p)
    p.add_argument("--json", action="store_true", help="JSON lines (docs/json.md)")
    p.set_defaults(handler=_status)


def add_defense_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--defense",
        action="append",
        default=[],
        metavar="[AGENT=]NAMES",
        help="inbound defenses (scope,cycle,dedup,rate) for every agent, or AGENT=... for one; 'none' for off",
    )


def journal_health(args: argparse.Namespace) -> int:
    async def ask(bus: Bus) -> JournalState:
        return await ask_journal(bus, HEALTH_TIMEOUT_S)

    state = run_on_system(args, ask)
    if args.json:
        _jsonl.summary(state)
    if state.stuck:
        raise JournalError(f"the journal service cannot write: {state.stuck}")
    if not args.json:
        print(f"journal service up: the journal holds the stream up to sequence {state.last_seq}")
    return 0


def _credentials(args: argparse.Namespace) -> int:
    config = config_of(args)
    groups = _up_groups(config, check_system(config, config_source(args.config)))
    folder = args.dir or state_dir(Path(config.journal.path)) / "credentials"
    access = system_access(folder, config, groups, subject_prefix(args, config)).prepare()
    print(f"{access.server_config}: every NATS node's users and permissions (include it in each node's configuration)")
    for identity in access.identities:
        print(f"{access.credential_file(identity.name)}: {identity.name}")
    if access.removed:
        print(_removed(access))
    return 0


def _removed(access: Access) -> str:
    """What `credentials` and `up` say of the credentials they removed (`Access.removed`)."""
    return (
        f"removed {', '.join(map(str, access.removed))}: the configuration no longer has these users, and"
        f" {access.server_config.name} no longer lets them in (a NATS node that still runs on the earlier one does"
        " until it reloads it: nats-server --signal reload)"
    )


def _shard(text: str) -> tuple[int, int]:
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise UsageError(f"--shard {text!r} must look like I/N, e.g. 0/2") from None
    if not 0 <= index < count:
        raise UsageError(f"--shard {text!r}: I must be in 0..N-1")
    return index, count


def _worker(args: argparse.Namespace) -> int:
    config = apply_defense_flags(config_of(args), args.defense)
    agents = [a.strip() for a in args.agents.split(",") if a.strip()]
    if not agents and not args.follow_roster:
        raise UsageError("worker: give --agents, --follow-roster or both")
    name = args.name or f"worker-{os.getpid()}"
    url = nats_url(args, config)
    shard = _shard(args.shard)
    serves = ", ".join(agents + (["the roster's helpers"] if args.follow_roster else []))
    of = f" (shard {shard[0]} of {shard[1]})" if shard[1] > 1 else ""
    ready = _saying(f"worker {name} serves {serves}{of} on {url}; Ctrl-C drains it and stops")
    run = functools.partial(run_worker, follow_roster=args.follow_roster, on_ready=ready)
    anyio.run(
        run,
        config,
        url,
        subject_prefix(args, config, url),
        agents,
        name,
        shard,
        login(args, config, url, operator=False),
    )
    return 0


def _saying(line: str) -> Callable[[], None]:
    """What a service started by hand tells once it serves: on stderr, where `up` keeps its children's logs."""
    return lambda: print(line, file=sys.stderr, flush=True)


def journal_serve(args: argparse.Namespace) -> int:
    config = config_of(args)
    url = nats_url(args, config)
    otel = OtelStream(args.file, args.otel, otel_headers(args.otel_header, "--otel-header")) if args.otel else None
    completers = _completers(args, config)
    if not 1 <= args.shards <= MAX_SHARDS or not 0 <= args.shard < args.shards:
        raise UsageError(f"--shard {args.shard} --shards {args.shards}: give 1 to {MAX_SHARDS} shards, numbered from 0")
    settings = bus_settings(config)
    if args.partitions is not None:
        if not 1 <= args.partitions <= MAX_PARTITIONS or args.partitions % args.shards:
            raise UsageError(
                f"--partitions {args.partitions}: give 1 to {MAX_PARTITIONS} partitions, a multiple of --shards"
            )
        settings = dataclasses.replace(settings, partitions=args.partitions)
    shard = f" (shard {args.shard} of {args.shards})" if args.shards > 1 else ""
    ready = _saying(f"journal service{shard} writes {args.file} from the stream at {url}; Ctrl-C stops it")
    trim_after_s = config.journal.trim_after_s if args.trim_after_s is None else args.trim_after_s
    if trim_after_s < 0:
        raise UsageError(
            f"--trim-after-s {trim_after_s:g}: give the seconds the stream keeps a settled episode, 0 for ever"
        )
    trim_every_s = config.journal.trim_every_s if args.trim_every_s is None else args.trim_every_s
    if trim_every_s <= 0:
        raise UsageError(f"--trim-every-s {trim_every_s:g}: give the seconds between two trims of the stream, above 0")
    serve = functools.partial(
        run_journal,
        completers=completers,
        shard=args.shard,
        shards=args.shards,
        trim_after_s=trim_after_s,
        trim_every_s=trim_every_s,
        on_ready=ready,
    )
    connect_as = login(args, config, url, operator=False)
    anyio.run(serve, url, subject_prefix(args, config, url), args.file, args.name, settings, connect_as, otel)
    return 0


def _completers(args: argparse.Namespace, config: Config) -> tuple[str, ...] | None:
    """`--completers` (None for `*`: every completion), else the configuration's: its system's agents that complete
    episodes, as `up` passes them."""
    if args.completers == ANY_COMPLETER:
        return None
    if args.completers is not None:
        return tuple(agent.strip() for agent in args.completers.split(",") if agent.strip())
    try:
        return completing_agents(config, check_system(config, config_source(args.config)))
    except ConfigError as exc:
        raise ConfigError(
            f"{exc}; the journal reads the configuration's system for the agents that may complete an episode:"
            " where its code is not installed, name them with --completers"
        ) from None


def _up(args: argparse.Namespace) -> int:
    config = config_of(args)
    if config.nats.cells > 1:
        raise ConfigError(
            f"[nats] cells = {config.nats.cells}: cells are started by `faultline run` (each run its own), not by"
            " `up`, whose system has one nats-server; set cells to 1 for `up`"
        )
    apply_defense_flags(config, args.defense)  # a wrong flag fails here, not in every worker
    defenses = tuple(arg for flag in args.defense for arg in ("--defense", flag))
    journal = args.journal or Path(config.journal.path)
    from faultline.journal import check_journal_target  # SQLite tooling stays out of every command's start-up

    check_journal_target(journal, config.journal.shards)
    groups = check_system(config, config_source(args.config))
    workers = worker_specs(config, groups, args.config)
    if not system_of(config).is_user_system:  # FAMA's helpers and controller serve the built-in tool-use agents
        workers += [roster_worker(args.config), *fama_service(config, args.config, journal)]
    groups = _up_groups(config, groups)
    prefix = subject_prefix(args, config)
    store_dir = Path(config.nats.store_dir)
    if args.tls and (args.nats or config.nats.url):
        raise UsageError("--tls sets up the nats-server `up` starts; for a server of your own, pass --tls-ca")
    tls = server_tls(args, config, state_dir(journal) / "tls")
    supervisor = Supervisor(
        journal_path=journal,
        journal_shards=config.journal.shards,
        journal_trim_after_s=config.journal.trim_after_s,
        workers=[ProcessSpec(s.name, (*s.args, *defenses), s.identity) for s in workers],
        nats_url=args.nats or config.nats.url,
        prefix=prefix,
        bus_settings=bus_settings(config),
        store_dir=store_dir,
        log_dir=journal.parent / "logs",
        access=None
        if args.insecure
        else system_access(state_dir(journal) / "credentials", config, groups, prefix).prepare(),
        completers=completing_agents(config, groups),
        server_tls=tls,
        tls_ca=tls.ca if tls else login(args, config).tls_ca,
        journal_args=(*config_flag(args.config), *_otel_args(args)),
        sync_interval=config.nats.sync_interval,
        server_cores=config.nats.server_cores,
    )
    console = stderr_console()
    if args.insecure:
        warn_insecure(console, supervisor.nats_url or "on its local port")
    elif supervisor.access is not None and supervisor.access.removed:
        console.print(_removed(supervisor.access), soft_wrap=True, highlight=False)
    operator = str(supervisor.access.credential_file(OPERATOR).resolve()) if supervisor.access else ""
    ca = str(supervisor.tls_ca.resolve()) if supervisor.tls_ca else ""

    async def serve(supervisor: Supervisor) -> None:
        state = {"url": supervisor.url, "prefix": supervisor.prefix, "pid": os.getpid(), "credentials": operator}
        state["tls_ca"] = ca
        state["journal"] = str(journal.resolve())
        state["workers"] = ",".join(spec.name for spec in supervisor.workers)  # whom `status` expects to answer
        write_atomically(STATE_FILE, json.dumps(state).encode())  # tests and scripts wait for this file
        try:
            console.print(_process_table(supervisor.status(), supervisor.url, journal))
            if supervisor.bus is not None and (left := await rules_left(supervisor.bus, follow_settings(config))):
                console.print(left, soft_wrap=True, highlight=False)
            console.print("running; Ctrl-C drains the workers and stops")
            await anyio.sleep_forever()
        finally:
            STATE_FILE.unlink(missing_ok=True)

    # The stream store is ours alone only while nats-server is ours.
    held = [STATE_FILE.parent, state_dir(journal), *([] if supervisor.nats_url else [store_dir])]
    with hold_directories(held, "up"):
        anyio.run(run_supervised, supervisor, serve)
    problem = journal_problem(supervisor)
    if problem:
        where = f"on {supervisor.nats_url}" if supervisor.nats_url else f"in {store_dir}"
        raise JournalError(
            f"stopped, but the journal did not catch up: {problem}; the stream {where} keeps the rest,"
            " which the next `faultline up` journals"
        )
    console.print(
        f"stopped: workers drained, journal caught up ({_rows(journal)} rows in {journal})",
        soft_wrap=True,
        highlight=False,
    )
    return 0


async def rules_left(bus: Bus, settings: FollowSettings) -> str:
    """What `up` says of the fault rules its stream still holds from before it started ("" when none): they apply
    to its episodes from the first, and nothing else would tell."""
    now = time.time()
    rules = [r for r in (await read_rules(bus, settings)).rules if not (r.expires_at and now >= r.expires_at)]
    if not rules:
        return ""
    listed = "; ".join(f"{rule.id}: {rule.fault} on {rule.matches()}" for rule in rules)
    return (
        f"{counted(len(rules), 'fault rule')} in force from before this start, on the episodes they match: {listed}"
        " (`faultline faults clear` removes them)"
    )


def _up_groups(config: Config, groups: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """The worker groups whose identities `up` runs: the configured `groups` and, on the built-in tool-use system,
    the helper worker's, whose credential covers every helper. `credentials` makes the same, so that a cluster
    configured with its file lets every process of `up --nats` in."""
    return groups if system_of(config).is_user_system else with_helpers(groups, HELPERS)


def _otel_args(args: argparse.Namespace) -> tuple[str, ...]:
    """`up --otel`, passed on to the journal service that does the sending.

    Headers (often an API key) go through the environment the journal service inherits, in the variable the
    OTLP exporter reads itself: a command line is visible to every user of the machine.
    """
    if not args.otel:
        return ()
    headers = otel_headers(args.otel_header, "--otel-header")  # a wrong flag fails here, not in the journal process
    if headers:
        os.environ[OTEL_HEADERS_ENV] = ",".join(f"{quote(k)}={quote(v)}" for k, v in headers.items())
    return ("--otel", args.otel)


def _rows(journal: Path) -> int:
    from faultline.journal import JournalReader  # SQLite tooling stays out of worker processes

    with JournalReader(journal) as reader:
        return reader.last_pos


def _process_table(rows: list[dict[str, Any]], url: str, journal: Path) -> Table:
    table = Table(title=f"faultline up — NATS {url}, journal {journal}")
    for column in ("process", "pid", "restarts"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["name"], str(row["pid"]), str(row["restarts"]))
    return table


async def _system_status(
    url: str, prefix: str, connect_as: Login, shards: int, expected: list[str], places: list[WorkerPlace]
) -> tuple[list[WorkerStatus], Rosters, _Journal]:
    """What `status` shows, asked over one connection: the workers (waiting for the `expected` ones and those of the
    `places`), the rosters in force, the journal."""
    bus = await Bus.connect(url, prefix=prefix, login=connect_as)
    try:
        window = STATUS_WAIT_S if expected or places else STATUS_WINDOW_S
        workers = await worker_statuses(bus, window, expected=expected, places=places)
        return workers, await read_rosters(bus), await _journal_status(bus, shards)
    finally:
        await bus.close()


def _status(args: argparse.Namespace) -> int:
    config = config_of(args)
    url = nats_url(args, config)
    connect_as = login(args, config, url)
    if connect_as.credential is not None and connect_as.credential.user != OPERATOR:
        user = connect_as.credential.user
        raise UsageError(f"status: the workers tell their answers to the operator alone; {user!r} may not hear them")
    expected, logs = up_workers(url)
    places = [] if expected else _configured_places(args, config)
    replies, rosters, journal = anyio.run(
        _system_status, url, subject_prefix(args, config, url), connect_as, config.journal.shards, expected, places
    )
    silent = sorted(set(expected) - {reply.worker for reply in replies})
    absent = [(place, missing) for place in places if (missing := place.missing(replies))]
    if args.json:
        _jsonl.rows("worker", [msgspec.structs.asdict(reply) for reply in replies])  # every field, defaults too
        _jsonl.rows("roster", _roster_rows(rosters))
        _jsonl.rows("journal", [{"shard": k, "waiting": n} for k, n in enumerate(journal.waiting)])
        _jsonl.rows("stream", [dataclasses.asdict(journal.stream)])
        _jsonl.summary(
            {
                "workers": len(replies),
                "silent": silent,
                "absent": [{"group": p.group, "shard": p.shard_text, "agents": list(m)} for p, m in absent],
                "url": url,
                "journal": journal.says(),
            }
        )
        return 1 if silent or absent else 0
    table = Table(title=f"{len(replies)} worker(s)")
    for column in (
        "worker",
        "user",
        "pid",
        "agents",
        "shard",
        "handled",
        "episodes in flight",
        "services",
        "model calls",
    ):
        table.add_column(column)
    for r in replies:
        episodes = r.episodes
        shown = ", ".join(episodes[:5]) + (f" (+{len(episodes) - 5})" if len(episodes) > 5 else "")
        calls = r.model_calls
        slowest = f"{len(calls)}, the slowest for {max(c.age_s for c in calls):.0f}s" if calls else "-"
        table.add_row(
            r.worker, r.identity, str(r.pid), ",".join(r.agents), r.shard, str(r.handled), shown or "-",
            ", ".join(r.services) or "-", slowest,
        )  # fmt: skip
    console = table_console()
    console.print(table)
    waiting = ", ".join("-" if n is None else f"{n:,}" for n in journal.waiting)
    console.print(f"journal: {journal.says()}; messages not journaled yet, by shard: {waiting}", highlight=False)
    stream, keep_s = journal.stream, config.journal.trim_after_s
    trims = (
        f"trimmed of episodes silent for {keep_s:g} s and of journaled dead letters"
        if keep_s
        else "never trimmed ([journal] trim_after_s = 0)"
    )
    console.print(
        f"stream: {stream.messages:,} messages, {stream.bytes / 2**20:,.1f} MiB, up to sequence {stream.last_seq:,};"
        f" {trims}",
        highlight=False,
    )
    if silent:
        console.print(
            f"no answer within {STATUS_WAIT_S:g}s from {', '.join(silent)}, which the `faultline up` here runs:"
            f" stopped, stuck or restarting (logs: {logs})",
            highlight=False,
        )
    for place, missing in absent:
        console.print(
            f"absent: no worker answered within {STATUS_WAIT_S:g}s for {', '.join(missing)} in shard"
            f" {place.shard_text} of worker group {place.group}, which {config_source(args.config)} runs:"
            " stopped, stuck or never started",
            highlight=False,
        )
    if rosters.domains:
        console.print(_rosters_table(rosters))
    return 0 if replies and not silent and not absent else 1


def _configured_places(args: argparse.Namespace, config: Config) -> list[WorkerPlace]:
    """The workers a configuration file (--config, else ./faultline.toml) runs, which `status` expects to answer
    where no `faultline up` here says whom it runs; none without a file (the built-in defaults say nothing of a
    running system) or where the file's system is not installed here (its agents are not known)."""
    if args.config is None and not DEFAULT_CONFIG_FILE.is_file():
        return []
    try:
        return worker_places(config, check_system(config, config_source(args.config)))
    except ConfigError:
        return []


@dataclasses.dataclass
class _Journal:
    """The journal as `status` shows it: what its shards say, what each has yet to journal, and what the stream
    holds."""

    waiting: list[int | None]
    """By shard, the messages of the stream it has not journaled yet (None: it never started)."""
    stream: StreamState
    stuck: str = ""
    silent: str = ""
    """Why no answer came, when none did."""

    def says(self) -> str:
        if self.silent:
            return f"no answer ({self.silent})"
        return f"cannot write: {self.stuck}" if self.stuck else "writing"


async def _journal_status(bus: Bus, shards: int) -> _Journal:
    """Ask the journal's shards how they are, and the stream how far behind each is (`shards` when none answers)."""
    stream = await bus.stream_state()
    try:
        state = await ask_journal(bus, STATUS_WINDOW_S)
    except (NoResponderError, ReplyTimeoutError) as exc:
        return _Journal(await journal_backlog(bus, shards), stream, silent=str(exc))
    return _Journal(await journal_backlog(bus, state.shards), stream, stuck=state.stuck)


def _roster_rows(rosters: Rosters) -> list[dict[str, Any]]:
    """Each roster in force, with the FAMA controller's counts when it chose it (else None: the operator did)."""
    return [
        {"domain": d, "model": m, "helpers": helpers, "counts": rosters.reasons.get(d, {}).get(m)}
        for d, by_model in sorted(rosters.domains.items())
        for m, helpers in sorted(by_model.items())
    ]


def _rosters_table(rosters: Rosters) -> Table:
    """The rosters in force, and for those the FAMA controller chose, the failure counts behind them."""
    table = Table(title="helper rosters in force")
    for column in ("domain", "model", "helpers", "chosen by"):
        table.add_column(column)
    for row in _roster_rows(rosters):
        counts = row["counts"]
        why = "operator"
        if counts is not None:
            categories = ", ".join(f"{c} {n}" for c, n in counts.get("categories", {}).items())
            why = f"fama over {counts.get('failures', '?')} failures: {categories}"
        table.add_row(row["domain"], row["model"], ",".join(row["helpers"]) or "none", why)
    return table
