"""An episode started by hand on a `faultline up` of a system of one's own: its start names no system, its workers
hold their agents to the system of their configuration, and `faultline replay` and `fork` with that configuration
reproduce what they did."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from faultline.api import wait_for_journal
from faultline.cli import main
from faultline.core import SCORER, EpisodeCompleted, EpisodeStarted, Start
from faultline.journal import JournalReader
from faultline.runtime import Completions, start_episode
from tests.core.test_recipients import Desk, path
from tests.replay.test_unknown_recipient import CAUSE, TYPO
from tests.runtime.test_processes import faultline, finish, wait_until_up

pytestmark = pytest.mark.slow


async def start_by_hand(folder: Path, config: Path) -> EpisodeCompleted:
    """Start `faultline up` in `folder`, publish a typo's start by hand and wait for the episode and its journal."""
    process = faultline("up", "--config", str(config), cwd=folder)
    try:
        up = await wait_until_up(folder, process, timeout=90)
        bus = await up.connect()
        try:
            async with Completions(bus, (SCORER,)) as completions:
                await start_episode(bus, "by-hand", "triage", EpisodeStarted(), Start(data=TYPO))
                with anyio.fail_after(30):
                    done = await completions.wait(["by-hand"])
            await wait_for_journal(bus)
            return done["by-hand"]
        finally:
            await bus.close()
    finally:
        process.terminate()
        await finish(process)


def test_a_typo_in_an_episode_started_by_hand_replays_and_forks_as_it_ran(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "up.sqlite"
    config = tmp_path / "faultline.toml"
    config.write_text(
        f'[system]\nclass = "{path(Desk)}"\n[journal]\npath = "{journal}"\n[nats]\nstore_dir = "{tmp_path / "nats"}"\n'
    )
    done = anyio.run(start_by_hand, tmp_path, config)
    assert (done.outcome, done.cause) == ("error", CAUSE)
    with JournalReader(journal) as reader:
        rows = list(reader.episode_rows("by-hand"))
    assert [r.kind for r in rows][:3] == ["episode_started", "start", "error_raised"]

    assert main(["replay", str(journal), "--config", str(config)]) == 0
    assert capsys.readouterr().out.startswith("identical: 1 episodes")
    fork = ["fork", str(journal), "-e", "by-hand", "--at", str(rows[1].pos), "--keep", "--config", str(config)]
    assert main([*fork, "--json"]) == 0
    forked = json.loads(capsys.readouterr().out.splitlines()[0])
    assert (forked["outcome"]["outcome"], forked["outcome"]["cause"]) == ("error", CAUSE)
    assert main(["replay", forked["journal"], "--config", str(config)]) == 0
    assert capsys.readouterr().out.startswith("identical: 1 episodes")
