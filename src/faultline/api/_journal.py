"""`replay`: what a journal file says, re-executed against today's code.

It needs only the journal file and the agents' code, and loads no NATS (nor attribution, forks or
the runner); agents are found by name the way workers find them: `[agents.<name>] class` in
`config`, else registered ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from faultline.replay import Replayer, ReplayProgress, ReplayReport
from faultline.runtime import Config, agent_lookup


def replay(
    journal: str | Path,
    *,
    episodes: Sequence[str] = (),
    config: Config | None = None,
    jobs: int = 1,
    reexecute_tools: bool = False,
    progress: ReplayProgress | None = None,
) -> ReplayReport:
    """Feed every agent its journaled inputs, serve every recorded call from the journal, compare every output.

    `report.identical` says whether today's code did exactly what the journal holds; otherwise
    `report.divergences` names, per episode, the first agent, input and call that differ.
    `episodes` limits the replay to those (default: all); `jobs` spreads it over processes.
    `reexecute_tools` runs the environment's tools again instead of serving their results.
    `progress` is told (episodes replayed, episodes to replay) as they are done.
    """
    config = config or Config()
    replayer = Replayer(agent_lookup(config), jobs=jobs, reexecute_tools=reexecute_tools, system=config.system.class_)
    return replayer.replay(journal, list(episodes) or None, progress=progress)
