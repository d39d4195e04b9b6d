"""A run on a system already up is refused where that system's workers are of another system: theirs would handle
the run's episodes by the names of their own agents, and the journal would name a system that did not run them."""

from __future__ import annotations

import json
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


async def test_a_fault_rule_naming_an_agent_the_running_system_lacks_is_refused_before_it_is_in_force(
    tmp_path: Path,
) -> None:
    """`run --nats` and `inject` learn the running system's agents from its workers: a rule that names another
    would never apply, and is refused in one line naming the agents there are."""
    journal = tmp_path / "journal.sqlite"
    async with live_system(tmp_path, journal) as supervisor:
        creds = ["--nats", supervisor.url, "--creds", str(live_access(tmp_path).credential_file(OPERATOR))]
        commands = [
            ["run", *creds, "--journal", str(journal), "--tasks", "1", "--fault", "role_ambiguity:agents=tol"],
            ["inject", "storm", "--to", "tol", "--from", "tool", *creds],
            ["faults", "list", "--json", *creds],
        ]
        done = [
            await anyio.run_process([sys.executable, "-m", "faultline.cli", *argv], check=False) for argv in commands
        ]
    assert [d.returncode for d in done] == [1, 1, 0]
    assert done[0].stderr.decode().splitlines()[-1] == (
        "faultline: error: --fault 'role_ambiguity:agents=tol': the system has no agent 'tol' (its agents: env,"
        " tool, user), so the rule would never apply"
    )
    assert done[1].stderr.decode().splitlines() == [
        "faultline: error: storm: the system has no agent 'tol' (its agents: dce, env, planner, tool, tor, tsa, user,"
        " user_context, verifier), so the rule would never apply"
    ]
    assert json.loads(done[2].stdout) == {"type": "summary", "rules": 0, "applied": 0}
    with JournalReader(journal) as reader:
        assert reader.episodes() == []


async def test_a_run_takes_the_running_system_from_the_configurations_nats_url(tmp_path: Path) -> None:
    """`[nats] url` names the system a run uses, as it does for `status` and `inject`; a run used to start a
    system of its own beside it, journal and all, and the running system's fault rules never met its episodes."""
    journal = tmp_path / "journal.sqlite"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    async with live_system(tmp_path, journal) as supervisor:
        creds = live_access(tmp_path).credential_file(OPERATOR)
        (elsewhere / "faultline.toml").write_text(f'[nats]\nurl = "{supervisor.url}"\ncredentials = "{creds}"\n')
        argv = [sys.executable, "-m", "faultline.cli", "run", "--tasks", "1", "--run-id", "byconfig", "--json"]
        done = await anyio.run_process(argv, cwd=elsewhere, check=False)
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout.decode().splitlines()[-1])["outcomes"] == {"success": 1}
    assert not (elsewhere / "runs").exists()
    with JournalReader(journal) as reader:
        assert [e.episode for e in reader.episodes()] == ["byconfig-cancel-00-t0"]


async def test_a_credential_for_a_run_without_a_running_system_is_refused(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "faultline.cli", "run", "--tasks", "1", "--creds", "operator.json"]
    done = await anyio.run_process(argv, cwd=tmp_path, check=False)
    assert done.returncode == 2
    assert done.stderr.decode().splitlines() == [
        "faultline: usage error: --creds and --tls-ca go with a running system (--nats, [nats] url); without one,"
        " `run` starts a system of its own"
    ]
    assert not (tmp_path / "runs").exists()
