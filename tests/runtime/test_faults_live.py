"""Faults and defenses on a live system: real nats-server, journal service and worker processes."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from nats.aio.msg import Msg

from faultline.api import wait_for_journal
from faultline.cli import main
from faultline.core import (
    DefenseFired,
    Envelope,
    EpisodeCompleted,
    EpisodeStarted,
    FaultApplied,
    Recording,
    Start,
    ToolCall,
    ToolResult,
    UserTurn,
)
from faultline.envs import load_domain
from faultline.faults import DEFENSES, fault_types
from faultline.journal import JournalReader, JournalRow, verify
from faultline.replay import Replayer
from faultline.runtime import Config, ProcessSpec, Supervisor, agent_lookup, start_episode
from tests import jsonl

pytestmark = pytest.mark.slow

TASKS = [t.id for t in load_domain("retail").tasks()[:7]]
TOOL_CALL_MASFIRE = ["tool_selection_error", "parameter_format_error"]
"""The MAS-FIRE names of the structured-reflection benchmark's missing call and argument error."""


def run(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code = main(["run", "--json", *args])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)  # type: ignore[no-any-return]


def episodes(path: Path) -> dict[str, list[JournalRow]]:
    with JournalReader(path) as reader:
        return dict(reader.by_episode())


def bodies(rows: list[JournalRow], kind: type[Any]) -> list[Any]:
    return [b for r in rows if isinstance(b := r.envelope().body, kind)]


def outcome(rows: list[JournalRow]) -> EpisodeCompleted:
    [done] = bodies(rows, EpisodeCompleted)
    return done  # type: ignore[no-any-return]


def handled(rows: list[JournalRow], message_id: str) -> bool:
    """Whether the journal shows an agent handling `message_id` (an output or a recording caused by it)."""
    return any(r.causation == message_id and r.kind not in ("fault_applied", "defense_fired") for r in rows)


def replays_identical(path: Path) -> None:
    assert verify(path).ok
    assert main(["replay", str(path)]) == 0


def test_every_fault_type_shows_in_the_journal_with_its_original(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "j.sqlite"
    e = [f"ft-{task}-t0" for task in TASKS]
    faults = [
        f"cycle:kind=user_turn,from=user,budget=2,episode={e[0]}",
        f"storm:copies=2,kind=tool_call,budget=1,episode={e[1]}",
        f"broadcast:kind=assistant_turn,budget=1,episode={e[2]}",
        f"call_order_swap:budget=1,episode={e[3]}",
        f"redundant_call:budget=1,episode={e[4]}",
        f"tool_selection_error:budget=1,episode={e[5]}",
        f"parameter_format_error:mode=missing,budget=1,episode={e[6]}",
    ]
    summary = run(
        capsys, "--tasks", str(len(TASKS)), "--run-id", "ft", "--journal", str(journal), "--max-turns", "8",
        *(arg for f in faults for arg in ("--fault", f)),
    )  # fmt: skip
    assert summary["episodes"] == len(TASKS)
    rows = episodes(journal)
    applied: dict[str, list[tuple[FaultApplied, Envelope, list[Envelope]]]] = {}
    for episode in e:
        events = bodies(rows[episode], FaultApplied)
        applied[episode] = [
            (a, msgspec.convert(a.original, Envelope), [msgspec.convert(r, Envelope) for r in a.results])
            for a in events
        ]
        ids = {r.id for r in rows[episode]}
        for _, _, results in applied[episode]:
            assert {r.id for r in results} <= ids  # the faulted traffic itself is journaled
    assert [len(applied[x]) for x in e] == [2, 1, 1, 1, 1, 1, 1]
    assert {a.fault for x in e for a, _, _ in applied[x]} == {f.partition(":")[0] for f in faults}

    # cycle: the user's turn went back to the user, which answered it
    for _, original, [looped] in applied[e[0]]:
        assert (original.recipient, looped.recipient, looped.sender) == ("tool", "user", "user")
        assert isinstance(looped.body, UserTurn) and handled(rows[e[0]], looped.id)
    # storm: three deliveries of one call, each executed by the environment
    [(_, original, copies)] = applied[e[1]]
    assert len(copies) == 3 and len({c.id for c in copies}) == 3 and all(c.body == original.body for c in copies)
    assert all(handled(rows[e[1]], c.id) for c in copies)
    # broadcast: the agent's turn also went to the environment
    [(_, original, sent)] = applied[e[2]]
    assert [m.recipient for m in sent] == ["user", "env"]
    # tool-call perturbations: another call than the agent made, under its call id
    for x in e[3:]:
        [(_, original, [changed])] = applied[x]
        assert isinstance(original.body, ToolCall) and isinstance(changed.body, ToolCall)
        assert changed.body != original.body and changed.body.call_id == original.body.call_id
        assert handled(rows[x], changed.id)
    for x in e[3:5]:  # the perturbations fail with the error the injector wrote, answered instead of run
        [(_, _, [changed])] = applied[x]
        assert isinstance(changed.body, ToolCall) and changed.body.injected_error.startswith("Error: ")
        answers = [b for b in bodies(rows[x], ToolResult) if b.call_id == changed.body.call_id]
        assert [a.error for a in answers] == [changed.body.injected_error]
    [(_, original, [changed])] = applied[e[6]]
    assert len(changed.body.arguments) == len(original.body.arguments) - 1  # type: ignore[union-attr]
    replays_identical(journal)


def test_storm_and_cycle_with_defenses_and_without(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Trial 0 runs fault-free, trial 1 under a storm of tool calls, trial 2 under a cycle of user turns."""
    common = [
        "--tasks", "4", "--trials", "3", "--concurrency", "12", "--max-turns", "6",
        "--fault", "storm:copies=2,kind=tool_call,episode=*-t1",
        "--fault", "cycle:kind=user_turn,from=user,episode=*-t2",
    ]  # fmt: skip
    defended, exposed = tmp_path / "defended.sqlite", tmp_path / "exposed.sqlite"
    run(capsys, *common, "--run-id", "d", "--journal", str(defended), "--episode-timeout", "3",
        "--defense", "dedup,cycle,scope,rate")  # fmt: skip
    run(capsys, *common, "--run-id", "n", "--journal", str(exposed), "--episode-timeout", "60")
    on, off = episodes(defended), episodes(exposed)
    tasks = TASKS[:4]

    for task in tasks:
        base, storm, cycle = (on[f"d-{task}-t{k}"] for k in range(3))
        # fault-free traffic passes every defense untouched, and the outcome is the same without them
        assert bodies(base, DefenseFired) == []
        assert outcome(base).outcome == outcome(off[f"n-{task}-t0"]).outcome == "success"
        # storm + dedup: every copy dropped before the environment saw it; the outcome is the fault-free one
        copies = {r["id"] for a in bodies(storm, FaultApplied) for r in a.results[1:]}
        assert copies and {d.message_id for d in bodies(storm, DefenseFired)} == copies
        assert {d.defense for d in bodies(storm, DefenseFired)} == {"dedup"}
        assert not any(handled(storm, c) for c in copies)
        assert outcome(storm).outcome == outcome(base).outcome
        # cycle + breaker: the echo was dropped at once, nothing looped; the stalled episode timed out
        [echo] = bodies(cycle, DefenseFired)
        assert echo.defense == "cycle" and echo.agent == "user"
        assert sum(1 for r in cycle if r.kind == "user_turn") == 1
        assert outcome(cycle).outcome == "timeout"
        # and its cause says where it went quiet: the defense dropped the only message in flight
        dropped = f"the cycle defense dropped user's input {echo.message_id} ({echo.reason})"
        assert re.search(rf"; its last message, \d+s before: {re.escape(dropped)}$", outcome(cycle).cause), outcome(
            cycle
        ).cause

        # without defenses the copies reach the environment and are executed
        storm_off = off[f"n-{task}-t1"]
        copies = {r["id"] for a in bodies(storm_off, FaultApplied) for r in a.results[1:]}
        assert copies and all(handled(storm_off, c) for c in copies)
        # and the cycle runs the user up to its turn limit: a failure with that cause, not a hang
        done = outcome(off[f"n-{task}-t2"])
        assert (done.outcome, done.cause) == ("failure", "turn limit reached (6 user turns)")
        loops = [
            b for r in off[f"n-{task}-t2"] if r.recipient == "user" and isinstance(b := r.envelope().body, UserTurn)
        ]
        assert [b.done for b in loops] == [False] * 6 + [True]  # six turns, then the goodbye, all sent back
    replays_identical(defended)
    replays_identical(exposed)


def test_defenses_for_one_agent_only_and_replay_reruns_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = tmp_path / "j.sqlite"
    run(capsys, "--tasks", "1", "--run-id", "a", "--journal", str(journal), "--episode-timeout", "20",
        "--fault", "storm:copies=1", "--defense", "env=dedup")  # fmt: skip
    fired = bodies(episodes(journal)[f"a-{TASKS[0]}-t0"], DefenseFired)
    assert fired and {d.agent for d in fired} == {"env"}
    replays_identical(journal)
    capsys.readouterr()
    monkeypatch.setattr(DEFENSES["dedup"], "check", lambda self, env, agent: None)  # a dedup that lets copies through
    report = Replayer(agent_lookup(Config())).replay(journal)
    [divergence] = report.divergences
    assert divergence.agent == "env" and divergence.input_id == fired[0].message_id
    assert divergence.what == "defense decision differs: live defense dedup dropped it; now it passes"


def test_fault_and_defense_flags_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--fault", "nope"]) == 2
    assert main(["run", "--fault", "storm:copies=0"]) == 2
    assert main(["run", "--defense", "firewall"]) == 2
    assert main(["run", "--defense", "dedup", "--nats", "nats://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("faultline: usage error: ") for line in err)


def _toy_config(tmp_path: Path) -> Path:
    path = tmp_path / "faultline.toml"
    path.write_text(
        """
[models.ponger]
backend = "tests.runtime.toy:EchoBackend"

[agents.pinger]
class = "tests.runtime.toy:Pinger"

[agents.ponger]
class = "tests.runtime.toy:Ponger"
"""
    )
    return path


async def test_a_rule_injected_into_a_running_system_takes_effect_once_its_workers_say_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`inject` and `faults clear` return once every worker has taken the change in: every pong made
    after that is faulted, or no longer faulted. (How fast a change spreads is a benchmark's
    question, not a test's: on a loaded machine it has no bound.)"""
    config = _toy_config(tmp_path)
    journal = tmp_path / "live.sqlite"
    supervisor = Supervisor(
        journal_path=journal,
        workers=[ProcessSpec("w", ("worker", "--agents", "pinger,ponger", "--config", str(config)))],
        store_dir=tmp_path / "nats",
        log_dir=tmp_path / "logs",
    )
    pongs = 0
    wanted = 0
    reached = anyio.Event()

    async def on_pong(_msg: Msg) -> None:
        nonlocal pongs
        pongs += 1
        if pongs >= wanted:
            reached.set()

    async def more_pongs(n: int) -> None:
        nonlocal wanted, reached
        wanted, reached = pongs + n, anyio.Event()
        with anyio.fail_after(30):
            await reached.wait()

    def cli(*args: str) -> str:
        assert main([*args, "--nats", supervisor.url]) == 0
        return capsys.readouterr().out

    async with supervisor.running():
        bus = supervisor.bus
        assert bus is not None
        await bus.nc.subscribe(bus.subjects.direct("live", "pinger"), cb=on_pong)
        await start_episode(bus, "live", "pinger", EpisodeStarted(task="toy"), Start(data={"rounds": 10**6}))
        await more_pongs(50)
        said = await anyio.to_thread.run_sync(  # user: an agent of the workers' system (tool-use) none of them runs
            cli, "inject", "broadcast", "--from", "ponger", "--targets", "user", "--id", "amp"
        )
        added = time.time()
        assert "taken in by 1/1 worker(s)" in said
        await more_pongs(100)
        [listed], _ = jsonl.read(await anyio.to_thread.run_sync(cli, "faults", "list", "--json"))
        assert (listed["id"], listed["fault"], listed["sender"]) == ("amp", "broadcast", "ponger")
        assert listed["applied"] > 0
        assert "removed" in await anyio.to_thread.run_sync(cli, "faults", "clear", "amp")
        cleared = time.time()
        await more_pongs(100)
        assert jsonl.read(await anyio.to_thread.run_sync(cli, "faults", "list", "--json"))[0] == []
        await wait_for_journal(bus)

    with JournalReader(journal) as reader:
        [add, clear] = [r.envelope() for r in reader.episode_rows("control")]
        rows = list(reader.episode_rows("live"))
    faulted = {a.original["id"] for a in bodies(rows, FaultApplied)}
    pong_times = [(r.ts, r.id) for r in rows if r.sender == "ponger" and r.recipient == "pinger"]
    assert add.ts <= added <= clear.ts <= cleared
    assert all(i in faulted for ts, i in pong_times if added <= ts < clear.ts)
    assert not any(i in faulted for ts, i in pong_times if ts >= cleared or ts < add.ts)
    assert sum(1 for ts, _ in pong_times if added <= ts < clear.ts) > 50
    assert sum(1 for ts, _ in pong_times if ts >= cleared) > 50
    assert {r.recipient for r in rows if r.id not in {i for _, i in pong_times}} >= {"user"}


@pytest.mark.parametrize("defense", ["", "dedup", "cycle", "scope", "rate"])
def test_every_fault_alone_and_with_each_defense_replays_identical(
    defense: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each routing and tool-call fault gets an episode of its own, unbudgeted: storms leave agents far
    behind when the run stops, and replay must still reproduce exactly what was handled. (The other
    MAS-FIRE types, one per episode, are in test_masfire_live.py.)"""
    journal = tmp_path / "j.sqlite"
    mechanisms = ("routing", "tool_call")
    kinds = sorted([n for n, t in fault_types().items() if t.mechanism in mechanisms] + TOOL_CALL_MASFIRE)
    tasks = load_domain("retail").tasks()[: len(kinds)]
    faults = [f"{kind}:episode=m-{task.id}-t0" for kind, task in zip(kinds, tasks, strict=True)]
    extra = ["--defense", defense] if defense else []
    summary = run(
        capsys, "--tasks", str(len(kinds)), "--run-id", "m", "--journal", str(journal), "--max-turns", "6",
        "--episode-timeout", "4", *extra, *(arg for f in faults for arg in ("--fault", f)),
    )  # fmt: skip
    assert summary["episodes"] == len(kinds)
    rows = episodes(journal)
    for kind, task in zip(kinds, tasks, strict=True):
        assert any(a.fault == kind for a in bodies(rows[f"m-{task.id}-t0"], FaultApplied)), kind
    report = Replayer(agent_lookup(Config())).replay(journal)
    assert report.identical, report.divergences[0].what if report.divergences else ""
    assert report.messages > 0


def test_the_tool_agent_reflects_after_a_forced_error_and_recovers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "j.sqlite"
    config = tmp_path / "faultline.toml"
    config.write_text('[models.tool]\nbackend = "sim"\nreflection = "after_error"\n')
    summary = run(
        capsys, "--config", str(config), "--tasks", "3", "--run-id", "rf", "--journal", str(journal),
        "--fault", "redundant_call:budget=1,episode=rf-*",
    )  # fmt: skip
    assert summary["outcomes"] == {"success": 3}, "the agent recovers from the duplicate it did not make"
    reflected = 0
    for rows in episodes(journal).values():
        failed = [b.call_id for b in bodies(rows, ToolResult) if b.error.startswith("Error: duplicate request")]
        turns = [t for t in bodies(rows, Recording) if t.call == "llm"]
        forms = [t.response["content"] for t in turns if "<reflect>" in str(t.response.get("content", ""))]
        assert len(forms) == len(failed), "one reflection for each failed call"
        reflected += len(forms)
        assert all("<call>" in f or "<final>" in f for f in forms)
    assert reflected >= 1
    replays_identical(journal)
    capsys.readouterr()
    assert main(["report", "--reflection", str(journal), "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[-1]["turns"] >= reflected
