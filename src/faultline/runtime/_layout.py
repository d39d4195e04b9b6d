"""Which agents run in which worker processes, checked before any process starts.

`check_system` is the one check behind `faultline config check`, `run` and
`up`: a configuration it accepts starts, and one it rejects fails with one line
before nats-server or any worker is started. The same groups are the NATS
identities of `system_access`: one per worker group, speaking only as its agents.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from faultline._errors import ConfigError, FaultlineError
from faultline.agents.memory import MEMORY_SERVICE, SYNC_SERVICE
from faultline.bus import (
    Access,
    ConsumerSpec,
    Identity,
    agent_identity,
    agent_reads,
    journal_identity,
    operator_identity,
    recorder_identity,
    worker_reads,
)
from faultline.core import ALL_AGENTS, Subjects, registered
from faultline.faults import FAULTS_CONTROL
from faultline.runtime._agents import CONTROLLER_AGENT, HELPER_AGENTS, agent_names, resolve_agents, system_of
from faultline.runtime._config import Config, WorkerConfig
from faultline.runtime._episodes import JOURNAL_SERVICE, PROCESS_SERVICE, STATUS_SERVICE, WorkerPlace
from faultline.runtime._journal_service import consumer_name as journal_consumer
from faultline.runtime._journal_service import journal_process
from faultline.runtime._roster import HELPERS_CONTROL
from faultline.runtime._worker import agent_filters, consumer_name


def worker_groups(config: Config, source: str = "faultline.toml") -> dict[str, tuple[str, ...]]:
    """The agents each `[workers.<name>]` group runs: the ones it names, or for `"*"` every agent no other group names.

    An agent named by two groups, two groups that both take `"*"`, or a helper or the FAMA
    controller in a group (the runtime places them: the roster's helper worker, `fama serve`),
    is a ConfigError.
    """
    owner: dict[str, str] = {}
    wildcard = ""
    system = system_of(config)
    for group, worker in config.workers.items():
        placed = sorted(set(worker.agents) & (HELPER_AGENTS | {CONTROLLER_AGENT}) - set(system.agent_names))
        if placed:
            raise ConfigError(
                f"{source}: agent {placed[0]!r} is placed by the runtime, not by a worker group (helpers run in"
                f" the helper worker the roster drives, fama in `faultline fama serve`): remove it from"
                f" workers.{group} - at $.workers.{group}.agents"
            )
        if ALL_AGENTS in worker.agents:
            if wildcard:
                raise ConfigError(
                    f'{source}: workers.{wildcard} and workers.{group} both take "*": keep one - at $.workers'
                )
            wildcard = group
            continue
        for agent in worker.agents:
            if agent in owner:
                raise ConfigError(
                    f"{source}: agent {agent!r} is in workers.{owner[agent]} and workers.{group}: pick one - at $.workers"
                )
            owner[agent] = group
    rest = tuple(name for name in agent_names(config) if name not in owner)
    return {group: rest if group == wildcard else worker.agents for group, worker in config.workers.items()}


def check_system(config: Config, source: str = "faultline.toml") -> dict[str, tuple[str, ...]]:
    """Check the system and that each of its agents has a class that imports, under its own name, and exactly one
    worker group; return the groups."""
    try:
        system_of(config)
    except FaultlineError as exc:
        raise ConfigError(f"{source}: {exc} - at $.system.class") from None
    for name, settings in config.agents.items():
        if not settings.class_ and name not in registered("agent") and name not in system_of(config).agent_names:
            known = ", ".join(sorted(registered("agent")))
            raise ConfigError(
                f"{source}: agent {name!r} is not a registered agent ({known}) and has no class:"
                f" set class = 'package.module:ClassName' - at $.agents.{name}"
            )
    groups = worker_groups(config, source)
    where = {agent: f"$.workers.{group}.agents" for group, agents in groups.items() for agent in agents}
    where |= {name: f"$.agents.{name}.class" for name, settings in config.agents.items() if settings.class_}
    for agent, path in where.items():
        try:
            (cls,) = resolve_agents([agent], config)
        except ConfigError as exc:
            raise ConfigError(f"{source}: {exc} - at {path}") from None
        if cls.name != agent:
            raise ConfigError(
                f"{source}: agent {agent!r} is class {cls.__module__}.{cls.__qualname__}, whose name is {cls.name!r}:"
                f" messages to {agent!r} would reach no one; name the table [agents.{cls.name}] - at {path}"
            )
    placed = {agent for agents in groups.values() for agent in agents}
    system = system_of(config)
    own = [name for name, settings in config.agents.items() if settings.class_]
    unplaced = [name for name in (*(system.agent_names if system.is_user_system else ()), *own) if name not in placed]
    if unplaced:
        raise ConfigError(
            f"{source}: agent {unplaced[0]!r} is in no worker group, so its messages would wait"
            f' forever: add it to a [workers.<name>] agents list, or give one group "*" - at $.workers'
        )
    return groups


HELPER_GROUP = "helpers"
"""The worker group that runs the helper agents: a run's, in a process of their own, and `up`'s helper pool."""


def worker_services(group: str) -> tuple[str, ...]:
    """What a worker process of `group` answers: who it is and what it runs (`faultline status`), the fault rules it
    took in, and that it serves; in HELPER_GROUP, also the helper rosters its pool took in (no other group may)."""
    return (STATUS_SERVICE, FAULTS_CONTROL, PROCESS_SERVICE, *((HELPERS_CONTROL,) if group == HELPER_GROUP else ()))


MEMORY_SERVICES = (MEMORY_SERVICE, SYNC_SERVICE, PROCESS_SERVICE)
"""What the memory service answers: searches of the memory, and the syncs of the agents' copies of it; and, as every
process, when it serves."""

MEMORY_IDENTITY = "memory"
"""The memory service's NATS user; it records its reflections as the agent of the same name, and reads
completions through the durable consumer of that name too."""

FAMA_CONSUMERS = ("fama-cases", "fama-rosters")
"""The durable consumers of the FAMA service, which runs as the operator: the cases it learns from and
the roster controls it follows."""


def worker_identity(group: str, shard: int = 0, shards: int = 1, partitions: int = 1) -> str:
    """The NATS user a worker process of `[workers.<group>]` connects as: the group's, or, where the subjects are
    partitioned among the group's `shards`, shard `shard`'s own, which speaks and reads only in its partitions."""
    return f"worker-{group}-{shard}of{shards}" if shards > 1 and partitions > 1 else f"worker-{group}"


def worker_places(config: Config, groups: Mapping[str, Sequence[str]]) -> list[WorkerPlace]:
    """One place per worker instance of `groups` (what `check_system` accepted, and `with_helpers`): each shard of
    its group's `count`, one for a group the configuration does not declare, none for a group of no agent."""
    return [
        WorkerPlace(group, tuple(agents), shard, count)
        for group, agents in groups.items()
        if agents
        for count in (config.workers.get(group, WorkerConfig()).count,)
        for shard in range(count)
    ]


def identity_shards(count: int, partitions: int) -> list[tuple[int, int]]:
    """The (shard, shards) each credential of a group of `count` workers stands for: each shard its own where the
    subjects are partitioned among them (`worker_identity`), else one for the whole group."""
    return [(k, count) for k in range(count)] if count > 1 and partitions > 1 else [(0, 1)]


def completing_agents(config: Config, groups: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    """The agents of `groups` that may complete episodes (`Agent.completes`: the environment)."""
    names = sorted({agent for agents in groups.values() for agent in agents})
    return tuple(name for name, cls in zip(names, resolve_agents(names, config), strict=True) if cls.completes)


def agent_consumers(config: Config, groups: Mapping[str, Sequence[str]], prefix: str) -> list[ConsumerSpec]:
    """The durable consumer of every agent of `groups` for every shard of its group, each read by its group's identity."""
    subjects = Subjects(prefix, config.partitions)
    specs = []
    for group, agents in groups.items():
        shards = config.workers.get(group, WorkerConfig()).count
        for cls in resolve_agents(list(agents), config):
            for shard in range(shards):
                name = consumer_name(cls.name, shard, shards)
                filters = tuple(agent_filters(subjects, cls, shard, shards))
                owner = worker_identity(group, shard, shards, subjects.partitions)
                specs.append(ConsumerSpec(name, filters, owner, config.runtime.ack_wait_s))
    return specs


def system_access(
    folder: Path,
    config: Config,
    groups: Mapping[str, Sequence[str]],
    prefix: str = "",
) -> Access:
    """The credentials of a system with these worker groups: the operator's, the journal's, one per group, memory's;
    and the durable consumers the operator makes for the groups.

    Only the agents that complete episodes (`completing_agents`) may complete one; a group reads the
    stream only through its agents' consumers and on its agents' subjects (`agent_reads`, `worker_reads`).
    No identity may make a consumer under the name of one of the system's durable consumers (the groups',
    the journal's, memory's, and the FAMA service's). Journal shard 0 of a partitioned set may ask how far the
    other shards' consumers are: it trims the dead letters once every shard holds them.
    """
    subjects = Subjects(prefix or config.nats.prefix, config.partitions)
    completers = completing_agents(config, groups)
    consumers = agent_consumers(config, groups, subjects.prefix)
    shards = config.journal.shards
    journals = [(journal_process(k, shards), journal_consumer(k, shards)) for k in range(shards)]
    durables = (*(spec.name for spec in consumers), *(c for _, c in journals), MEMORY_IDENTITY, *FAMA_CONSUMERS)
    topics = {cls.name: cls.topics for cls in resolve_agents(sorted({a for g in groups.values() for a in g}), config)}

    def group_identities(group: str, agents: Sequence[str]) -> list[Identity]:
        count = config.workers.get(group, WorkerConfig()).count
        identities = []
        for shard in identity_shards(count, subjects.partitions):
            name = worker_identity(group, *shard, subjects.partitions)
            inputs = (r for agent in agents for r in agent_reads(subjects, agent, topics[agent]))
            reads = (*worker_reads(subjects, shard), *(n for r in inputs for n in subjects.in_shard(r, *shard)))
            own = (spec.name for spec in consumers if spec.owner == name)
            identities.append(
                agent_identity(
                    subjects,
                    name,
                    agents,
                    completers,
                    consumers=own,
                    reads=reads,
                    durables=durables,
                    shard=shard,
                    serves=worker_services(group),
                )
            )
        return identities

    return Access(
        folder,
        (
            operator_identity(),
            *(
                journal_identity(
                    subjects,
                    (JOURNAL_SERVICE, PROCESS_SERVICE),
                    name,
                    consumer,
                    subjects.shard_journaled(k, shards),
                    peers=[c for _, c in journals[1:]] if k == 0 and subjects.partitions > 1 else [],
                )
                for k, (name, consumer) in enumerate(journals)
            ),
            *(identity for group, agents in groups.items() for identity in group_identities(group, agents)),
            recorder_identity(subjects, MEMORY_IDENTITY, MEMORY_IDENTITY, MEMORY_IDENTITY, durables, MEMORY_SERVICES),
        ),
        consumers,
    )
