"""`replay` and `attribute`: what a journal file says, re-executed and explained.

Both need only the journal file and the agents' code (replay loads no NATS); agents are found
by name the way workers find them: `[agents.<name>] class` in `config`, else registered ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import anyio

from faultline.journal import JournalReader
from faultline.replay import DEFAULT_SAMPLES, Attribution, Method, Replayer, ReplayReport, attribute_episode
from faultline.runtime import Config, agent_lookup, make_backend


def replay(
    journal: str | Path,
    *,
    episodes: Sequence[str] = (),
    config: Config | None = None,
    jobs: int = 1,
    reexecute_tools: bool = False,
) -> ReplayReport:
    """Feed every agent its journaled inputs, serve every recorded call from the journal, compare every output.

    `report.identical` says whether today's code did exactly what the journal holds; otherwise
    `report.divergences` names, per episode, the first agent, input and call that differ.
    `episodes` limits the replay to those (default: all); `jobs` spreads it over processes.
    `reexecute_tools` runs the environment's tools again instead of serving their results.
    """
    config = config or Config()
    replayer = Replayer(agent_lookup(config), jobs=jobs, reexecute_tools=reexecute_tools)
    return replayer.replay(journal, list(episodes) or None)


def attribute(
    journal: str | Path,
    episodes: Sequence[str] = (),
    *,
    config: Config | None = None,
    method: Method = "auto",
    samples: int = DEFAULT_SAMPLES,
    workers: int = DEFAULT_SAMPLES,
    scratch: str | Path | None = None,
) -> list[Attribution]:
    """For each failed episode (default: every failed, unforked one), the decisive agent and step.

    Each answer states its method and confidence, or says it is undecided; forks go to `scratch`
    (default: beside the journal, `forks_path(journal)`). Model roles that continue a fork live
    come from `config` (default: the offline `sim`).
    """
    config = config or Config()
    chosen = list(episodes) or failed_episodes(journal)
    lookup = agent_lookup(config)

    async def each() -> list[Attribution]:
        return [
            await attribute_episode(
                journal,
                episode,
                lookup=lookup,
                backends=lambda role: make_backend(config, role),
                method=method,
                samples=samples,
                workers=workers,
                scratch=scratch,
            )
            for episode in chosen
        ]

    return anyio.run(each)


def failed_episodes(journal: str | Path) -> list[str]:
    """The episodes of `journal` that did not succeed, forks left out, in journal order."""
    with JournalReader(journal) as reader:
        return [e.episode for e in reader.episodes() if e.outcome not in (None, "success") and not e.forked_from]
