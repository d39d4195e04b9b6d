"""The live roster on a running `faultline up`: `faultline helpers set|list|clear`, real processes."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from faultline.agents import EpisodeSpec
from faultline.api import RunPlan, plan_episodes, roster_worker, start_envelopes, with_helpers, worker_specs
from faultline.cli import main
from faultline.core import (
    HELPERS,
    RUNNER,
    ContextRequest,
    Control,
    Envelope,
    EpisodeCompleted,
    EpisodeStarted,
    Notice,
    derive_id,
)
from faultline.envs import load_domain
from faultline.journal import JournalReader
from faultline.runtime import (
    HELPERS_CONTROL,
    Completions,
    Supervisor,
    check_system,
    completing_agents,
    load_config,
    publish_roster,
    read_rosters,
    roster_control,
    start_episode,
    system_access,
)
from tests import jsonl
from tests.runtime.live import EPISODE_TIMEOUT_S, journal_everything, live_system, processes, retail
from tests.runtime.test_processes import faultline, finish, wait_until_up
from tests.runtime.test_supervisor import supervisor_log

pytestmark = pytest.mark.slow


async def helpers(capsys: pytest.CaptureFixture[str], *args: str) -> dict:  # type: ignore[type-arg]
    """`faultline helpers ARGS --json`, in a thread: the command runs an event loop of its own."""
    assert await anyio.to_thread.run_sync(main, ["helpers", *args, "--json"]) == 0
    _, summary = jsonl.read(capsys.readouterr().out)
    return summary


async def run_on(cwd: Path, url: str, run_id: str) -> None:
    """`faultline run --nats URL` on two tasks, as a process of its own (it handles signals)."""
    process = faultline("run", "--nats", url, "--tasks", "2", "--run-id", run_id, "--json", cwd=cwd)
    err = await finish(process)
    assert process.returncode == 0, err[-2000:]


async def test_a_roster_change_reaches_new_episodes_only_and_helpers_follow_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # where `helpers` and `run --nats` find the `up` running here
    config = tmp_path / "faultline.toml"
    config.write_text(f'[journal]\npath = "{tmp_path / "up.sqlite"}"\n[nats]\nstore_dir = "{tmp_path / "nats"}"\n')
    process = faultline("up", "--config", str(config), cwd=tmp_path)
    try:
        up = await wait_until_up(tmp_path, process)
        assert (await helpers(capsys, "list"))["served"] == []

        taken = await helpers(capsys, "set", "retail", "dce,memory:2")
        assert taken["taken"]["served"] == ["dce", "user_context"] and taken["seconds"] < 1.0
        await run_on(tmp_path, up.url, "before")

        # An episode that keeps running: it took the planner, and keeps it after the roster moves on.
        bus = await up.connect()
        spec = EpisodeSpec(domain="retail", task=load_domain("retail").tasks()[0].id, helpers=["planner"])
        await start_episode(bus, "held", "planner", EpisodeStarted(domain="retail", roster=["planner"]), spec.start())
        with anyio.fail_after(5):
            while "planner" not in (await helpers(capsys, "list"))["served"]:
                await anyio.sleep(0.05)
        taken = await helpers(capsys, "set", "retail", "tsa")
        assert taken["taken"]["served"] == ["planner", "tsa"] and taken["seconds"] < 1.0
        await run_on(tmp_path, up.url, "after")
        done = EpisodeCompleted(outcome="failure", cause="ended by the test")
        await bus.publish(Envelope(id=derive_id("held", 0, "t"), episode="held", sender=RUNNER, body=done))
        with anyio.fail_after(5):
            while (await helpers(capsys, "list"))["served"] != ["tsa"]:
                await anyio.sleep(0.05)
        await bus.close()

        assert (await helpers(capsys, "clear"))["taken"]["served"] == []
        listed = await helpers(capsys, "list")
        assert listed == {"type": "summary", "rosters": {}, "served": []}
    finally:
        process.terminate()
        err = await finish(process)
    assert process.returncode == 0, err[-2000:]
    with JournalReader(tmp_path / "up.sqlite") as reader:
        rows = list(reader.rows())
    rosters = {r.episode.split("-")[0]: r.envelope().body.roster for r in rows if r.kind == "episode_started"}  # type: ignore[union-attr]
    assert rosters == {"before": ["dce", "memory:2"], "after": ["tsa"], "held": ["planner"]}
    replies = {(r.episode.split("-")[0], r.sender) for r in rows if r.kind == "context_reply"}
    assert {("before", "dce"), ("before", "user_context"), ("after", "tsa")} <= replies
    assert not {s for e, s in replies if e == "after"} - {"tsa"}
    assert [r for r in rows if r.kind == "control" and r.envelope().body.name == "helpers"]  # type: ignore[union-attr]
    assert main(["replay", str(tmp_path / "up.sqlite")]) == 0


async def test_a_helper_killed_mid_episode_costs_one_wait_and_the_episode_completes_and_replays(
    tmp_path: Path,
) -> None:
    journal = tmp_path / "journal.sqlite"
    plan = RunPlan(tasks=1, run_id="killed", helpers=["dce"], helper_wait_s=1.0)
    (planned,) = plan_episodes(plan, retail())
    with supervisor_log() as said:
        async with live_system(tmp_path, journal, helpers=("dce",)) as supervisor:
            bus = supervisor.bus
            assert bus is not None
            helper = supervisor.pid("worker-helpers")
            assert helper is not None
            os.kill(helper, signal.SIGSTOP)  # frozen, so that it dies holding the episode's request
            requests = await bus.consumer(None, [bus.subjects.direct(planned.episode, "dce")])
            notices = await bus.consumer(None, [bus.subjects.event("notice", planned.episode)])
            async with Completions(bus) as completions:
                await bus.publish_all(start_envelopes(plan, planned))
                with anyio.fail_after(EPISODE_TIMEOUT_S):
                    while not [d for d in await requests.batch() if isinstance(d.envelope().body, ContextRequest)]:
                        pass
                    # Killed once the wait has run out: a helper restarted sooner would answer the request
                    # it was handed again, and the episode would not have paid the wait at all.
                    while not [d for d in await notices.batch() if isinstance(d.envelope().body, Notice)]:
                        pass
                    os.kill(helper, signal.SIGKILL)
                    done = (await completions.wait([planned.episode]))[planned.episode]
            await requests.close()
            await notices.close()
            await said.wait_for("worker-helpers is running again")
            await journal_everything(bus)
    assert done.outcome in ("success", "failure"), done.cause
    with JournalReader(journal) as reader:
        notices = [r.envelope().body for r in reader.episode_rows(planned.episode) if r.kind == "notice"]
    assert any(isinstance(n, Notice) and n.data.get("missing") == ["dce"] for n in notices)
    assert main(["replay", str(journal)]) == 0


MALFORMED_ROSTERS: list[dict[str, Any]] = [
    {"action": "set", "domain": "retail", "helpers": 5},
    {"action": "set", "domain": "retail", "helpers": ["bogus"]},
    {"action": "set", "domain": "retail", "helpers": ["dce"], "counts": 7},
    {"action": "set", "domain": ["retail"], "model": {"a": 1}, "helpers": [["dce"]]},
]
"""Roster controls no `faultline helpers set` writes: the helper pool failed on each, at every restart again."""


async def test_malformed_roster_controls_are_passed_over_and_the_helper_pool_takes_the_next(tmp_path: Path) -> None:
    config_path = tmp_path / "faultline.toml"
    config_path.write_text("")
    config = load_config(config_path)
    groups = check_system(config, str(config_path))
    supervisor = Supervisor(
        journal_path=tmp_path / "journal.sqlite",
        workers=[*worker_specs(config, groups, config_path), roster_worker(config_path)],
        store_dir=tmp_path / "nats",
        log_dir=tmp_path / "logs",
        access=system_access(tmp_path / "credentials", config, with_helpers(groups, HELPERS)).prepare(),
        completers=completing_agents(config, groups),
    )
    async with supervisor.running():
        bus = supervisor.bus
        assert bus is not None
        before = processes(supervisor)
        for i, data in enumerate(MALFORMED_ROSTERS):
            control = roster_control("set", nonce=f"malformed{i}")
            await bus.publish(msgspec.structs.replace(control, body=Control(name=HELPERS_CONTROL, data=data)))
        taken, _ = await publish_roster(bus, roster_control("set", domain="retail", helpers=["dce"]), EPISODE_TIMEOUT_S)
        assert taken is not None and taken.served == ["dce"]
        assert processes(supervisor) == before
        assert (await read_rosters(bus)).domains == {"retail": {"*": ["dce"]}}
