"""An episode started by hand on a `faultline up` of a system of one's own: its start names no system, its workers
hold their agents to the system of their configuration, and `faultline replay` and `fork` with that configuration
reproduce what they did. A worker started by hand beside them for an agent they serve is refused: it would handle
every input of that agent again."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

from faultline.api import wait_for_journal
from faultline.cli import main
from faultline.core import SCORER, EpisodeCompleted, EpisodeStarted, Start
from faultline.journal import JournalReader
from faultline.runtime import Completions, start_episode
from tests.core.test_recipients import Desk, Triage, path
from tests.replay.test_unknown_recipient import CAUSE, TYPO
from tests.runtime.test_processes import Up, faultline, finish, wait_until_up

pytestmark = pytest.mark.slow


async def start_by_hand(
    folder: Path, config: Path, beside: Callable[[Up], Awaitable[None]] | None = None
) -> EpisodeCompleted:
    """Start `faultline up` in `folder` (and then `beside` it), publish a typo's start by hand and wait for the
    episode and its journal."""
    process = faultline("up", "--config", str(config), cwd=folder)
    try:
        up = await wait_until_up(folder, process, timeout=90)
        if beside is not None:
            await beside(up)
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


def desk_config(folder: Path) -> Path:
    """The configuration of a `faultline up` of the help desk in `folder`, its journal `up.sqlite` there."""
    config = folder / "faultline.toml"
    config.write_text(
        f'[system]\nclass = "{path(Desk)}"\n[journal]\npath = "{folder / "up.sqlite"}"\n'
        f'[nats]\nstore_dir = "{folder / "nats"}"\n'
    )
    return config


def test_a_typo_in_an_episode_started_by_hand_replays_and_forks_as_it_ran(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "up.sqlite"
    config = desk_config(tmp_path)
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


def test_a_worker_started_by_hand_for_an_agent_up_serves_is_refused_whatever_its_configuration(
    tmp_path: Path,
) -> None:
    """Both workers would read the agent's one consumer and handle each input: with the same configuration their
    outputs are one (same ids), with another one both land in the journal (here the error and the note to the
    typo, which a worker of no system lets by). Each is refused in one line naming the agent's shard."""
    config = desk_config(tmp_path)
    other = tmp_path / "other.toml"
    other.write_text(f'[agents.triage]\nclass = "{path(Triage)}"\n')
    said: list[tuple[int | None, str]] = []

    async def beside(_up: Up) -> None:
        creds = str(tmp_path / ".faultline" / "credentials" / "worker-main.json")
        hands = [
            faultline("worker", "--agents", "triage", "--creds", creds, "--config", str(c), cwd=tmp_path)
            for c in (config, other)
        ]
        try:
            for hand in hands:
                err = await finish(hand, timeout=30)
                said.append((hand.returncode, err))
        finally:
            for hand in hands:  # one left running when the other was not refused
                if hand.poll() is None:
                    hand.kill()
                    hand.wait()

    done = anyio.run(start_by_hand, tmp_path, config, beside)
    for code, err in said:
        assert code == 1 and "Traceback" not in err, err
        last = err.strip().splitlines()[-1]
        assert last.startswith(
            "faultline: error: agent triage, shard 0/1, is served by another worker already"
            " (its consumer agent-triage-0of1 has a reader)"
        ), last
    assert (done.outcome, done.cause) == ("error", CAUSE)
    with JournalReader(tmp_path / "up.sqlite") as reader:
        kinds = [r.kind for r in reader.episode_rows("by-hand")]
    assert kinds == ["episode_started", "start", "error_raised", "episode_completed"]
