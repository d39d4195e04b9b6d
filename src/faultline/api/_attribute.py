"""`attribute`: for each failed episode of a journal file, the decisive agent and step.

It needs only the journal file and the agents' code; agents are found by name as for `replay`
(`faultline.api._journal`), and model roles that continue a fork live come from the config.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import anyio

from faultline.journal import JournalReader
from faultline.replay import DEFAULT_SAMPLES, Attribution, Method, ReplayProgress, attribute_episode
from faultline.runtime import Config, agent_lookup, make_backend


def attribute(
    journal: str | Path,
    episodes: Sequence[str] = (),
    *,
    config: Config | None = None,
    method: Method = "auto",
    samples: int = DEFAULT_SAMPLES,
    workers: int = DEFAULT_SAMPLES,
    scratch: str | Path | None = None,
    progress: ReplayProgress | None = None,
) -> list[Attribution]:
    """For each failed episode (default: every failed, unforked one), the decisive agent and step.

    Each answer states its method and confidence, or says it is undecided; forks go to `scratch`
    (default: beside the journal, `forks_path(journal)`). Model roles that continue a fork live
    come from `config` (default: the offline `sim`). `progress` is told (episodes attributed,
    episodes to attribute) after each: with a real model one can take minutes.
    """
    config = config or Config()
    chosen = list(episodes) or failed_episodes(journal)
    lookup = agent_lookup(config)

    async def each() -> list[Attribution]:
        results: list[Attribution] = []
        for episode in chosen:
            results.append(
                await attribute_episode(
                    journal,
                    episode,
                    lookup=lookup,
                    backends=lambda role: make_backend(config, role),
                    method=method,
                    samples=samples,
                    workers=workers,
                    scratch=scratch,
                    handler_timeout_s=config.handler_timeout_s,
                    system=config.system.class_,
                )
            )
            if progress is not None:
                progress(len(results), len(chosen))
        return results

    return anyio.run(each)


def failed_episodes(journal: str | Path) -> list[str]:
    """The episodes of `journal` that did not succeed, forks left out, in journal order."""
    with JournalReader(journal) as reader:
        return [e.episode for e in reader.episodes() if e.outcome not in (None, "success") and not e.forked_from]
