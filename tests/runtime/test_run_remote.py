"""A run on a system already up is refused where that system's workers are of another system: theirs would handle
the run's episodes by the names of their own agents, and the journal would name a system that did not run them."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

from faultline.bus import OPERATOR
from faultline.journal import JournalReader
from tests.runtime.live import live_access, live_system

GOSSIP = "tests.replay.test_fork_topics:Gossip"


async def test_a_run_of_another_system_on_a_running_one_is_refused_before_any_episode_starts(
    tmp_path: Path,
) -> None:
    journal = tmp_path / "journal.sqlite"
    inputs = tmp_path / "in.jsonl"
    inputs.write_text('{"id": "a", "secret": "42"}\n')
    async with live_system(tmp_path, journal) as supervisor:
        creds = str(live_access(tmp_path).credential_file(OPERATOR))
        argv = ["run", "--nats", supervisor.url, "--creds", creds, "--journal", str(journal)]
        argv += ["--system", GOSSIP, "--inputs", str(inputs), "--episode-timeout", "5"]
        done = await anyio.run_process([sys.executable, "-m", "faultline.cli", *argv], check=False)
        url = supervisor.url
    assert done.returncode == 1
    assert done.stderr.decode().splitlines()[-1] == (
        f"faultline: error: the system running at {url} is tool-use, not {GOSSIP}: its workers would handle this"
        " run's episodes; run it on a system of its own (without --nats and outside the folder of a `faultline"
        " up`)"
    )
    with JournalReader(journal) as reader:
        assert reader.episodes() == []
