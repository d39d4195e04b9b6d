"""An episode's start records the run it is one of, so that a run is its episodes and no other run's, whatever
their ids begin with; a resumed run's retries record the run they resume."""

from __future__ import annotations

import fnmatch
import functools
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import anyio
import pytest

from faultline import api
from faultline._errors import ConfigError, EpisodeHeldError, SubjectError
from faultline.agent import Agent, Context, Envelope, Grade, InputRecord, Start, System
from faultline.api import (
    PlannedEpisode,
    RunPlan,
    RunResult,
    RunSpec,
    plan_episodes,
    plan_records,
    run_plan,
    start_envelopes,
    wait_for_journal,
)
from faultline.api._plan import check_unheld, episode_id, held_episodes, resumed
from faultline.bus import OPERATOR, Bus, EmbeddedServer, FollowSettings, Login, WorkerId
from faultline.cli import main
from faultline.core import Control, EpisodeStarted, check_token, in_run, record_of, system_path
from faultline.envs import load_domain
from faultline.journal import EpisodeFilter, Journal, JournalReader
from faultline.replay import Replayer
from faultline.runtime import Config, agent_lookup, parse_fault_spec, rules_in_force, scoped_to_run
from faultline.testing import run_system
from tests.journal.conftest import episode_envelopes, incoming
from tests.journal.test_diff import journal_of
from tests.replay.test_concurrent_calls import Unasked
from tests.runtime.live import live_system


class Echo(Agent):
    """Finishes with what it was started with."""

    name = "echo"

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        if isinstance(msg.body, Start):
            ctx.finish(msg.body.data["word"])


class Echoing(System):
    name = "echoing"
    agents = (Echo,)
    entry = "echo"
    finishers = ("echo",)
    needs = ("word",)

    def score(self, record: InputRecord, output: Any) -> Grade:
        return Grade(1.0)


def runs_started(plan: RunPlan) -> list[str]:
    """The run each planned episode's start records."""
    if plan.system:
        planned = plan_records(plan, [record_of({"word": "hi"}, i) for i in (1, 2)])
    else:
        planned = plan_episodes(plan, load_domain("retail"))
    found = []
    for episode in planned:
        body = start_envelopes(plan, episode)[0].body
        assert isinstance(body, EpisodeStarted)
        found.append(body.run)
    return found


def test_each_start_of_a_run_records_the_run_on_the_tool_use_system_and_on_ones_own() -> None:
    assert runs_started(RunPlan(tasks=2, trials=2, run_id="c1-1")) == ["c1-1"] * 4
    assert runs_started(RunPlan(domain="", system=system_path(Echoing), trials=2, run_id="c1-1-x")) == ["c1-1-x"] * 4


async def test_two_runs_in_one_journal_whose_ids_begin_alike_are_told_apart_live(
    nats_server: EmbeddedServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Runs c1-1 and c1-1-x of the same inputs on one nats-server into one journal: every episode id of c1-1-x
    begins as c1-1's do. Each run is its own episodes, and both replay identical."""
    journal = tmp_path / "j.sqlite"
    inputs = [{"id": "a", "word": "one"}, {"id": "b", "word": "two"}]
    runs = {}
    for run in ("c1-1", "c1-1-x"):
        runs[run] = await run_system(
            Echoing, inputs, nats_url=nats_server.url, journal=journal, models=Unasked(), run_id=run
        )
    assert sorted(runs["c1-1-x"].completed) == ["c1-1-x-a-t0", "c1-1-x-b-t0"]
    assert all(done.outcome == "success" for run in runs.values() for done in run.completed.values())
    with JournalReader(journal) as reader:
        for run, ran in runs.items():
            assert reader.of_run(run) == sorted(ran.completed)
            assert sorted(e.episode for e in reader.select(EpisodeFilter(run=run))) == sorted(ran.completed)
    assert main(["journal", "episodes", str(journal), "--run", "c1-1", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted(row["episode"] for row in rows if row["type"] == "episode") == ["c1-1-a-t0", "c1-1-b-t0"]
    report = await anyio.to_thread.run_sync(runs["c1-1"].replay)
    assert report.identical and report.episodes == 4


async def test_a_runs_fault_never_faults_a_concurrent_run_whose_ids_begin_as_its_own(tmp_path: Path) -> None:
    """Runs c1-1, under a storm of its tool calls as `run --fault` scopes it, and c1-1-x, fault-free, at once on one
    live system (worker processes, access control): every episode id of c1-1-x begins as c1-1's do. The rule
    faults each episode of c1-1 and none of c1-1-x, and the journal replays identical."""
    journal = tmp_path / "j.sqlite"
    rule = scoped_to_run(parse_fault_spec("storm:copies=2,kind=tool_call"), "c1-1")
    plans = [RunPlan(tasks=2, run_id=run) for run in ("c1-1", "c1-1-x")]
    results = {plan.run_id: RunResult(plan_episodes(plan, load_domain("retail"))) for plan in plans}
    async with live_system(tmp_path, journal) as supervisor:
        bus = supervisor.bus
        assert bus is not None
        async with rules_in_force(bus, [rule], workers=supervisor.worker_ids, settings=FollowSettings()):
            async with anyio.create_task_group() as tg:
                for plan in plans:
                    tg.start_soon(run_plan, bus, plan, results[plan.run_id], lambda _episode, _done: None)
        await wait_for_journal(bus)
    assert sorted(results["c1-1-x"].completed) == ["c1-1-x-cancel-00-t0", "c1-1-x-cancel-01-t0"]
    with JournalReader(journal) as reader:
        faulted = {e.episode for e in reader.episodes() if e.faults}
    assert faulted == set(results["c1-1"].completed) == {"c1-1-cancel-00-t0", "c1-1-cancel-01-t0"}
    report = await anyio.to_thread.run_sync(Replayer(agent_lookup(Config())).replay, journal)
    assert report.identical and report.episodes == 4


def attempt(episode: str, run: str, *, completed: bool) -> list[Envelope]:
    """An episode whose start records `run` ("" as before starts did), completed or cut short after its start."""
    envelopes = episode_envelopes(episode, run=run)
    return envelopes if completed else envelopes[:1]


@pytest.mark.parametrize("recorded", [True, False], ids=["runs recorded", "runs not recorded"])
def test_a_resumed_run_counts_its_own_retries_and_gives_a_new_one_an_id_no_episode_has(
    tmp_path: Path, recorded: bool
) -> None:
    """Run c1-1 planned tasks a, b and c. a completed; b was cut short and completed when retried; c was cut short,
    and a run named c1-1-r1 completed a task c of its own, whose id is the one c1-1's first retry of c would have."""
    ran = {
        episode_id("c1-1", "a", 0): ("c1-1", True),
        episode_id("c1-1", "b", 0): ("c1-1", False),
        episode_id("c1-1-r1", "b", 0): ("c1-1", True),
        episode_id("c1-1", "c", 0): ("c1-1", False),
        episode_id("c1-1-r1", "c", 0): ("c1-1-r1", True),
    }
    journal = journal_of(
        tmp_path / "j.sqlite",
        *(attempt(e, run if recorded else "", completed=done) for e, (run, done) in ran.items()),
    )
    plan = RunPlan(run_id="c1-1", task_ids=["a", "b", "c"])
    planned = [PlannedEpisode(episode=episode_id("c1-1", t, 0), task=t, trial=0, seed=0) for t in plan.task_ids]
    result = resumed(RunResult(planned), journal, "c1-1")
    if not recorded:  # as before starts recorded their run: c1-1-r1's episode is taken for c1-1's retry, by its id
        assert [p.episode for p in result.planned] == ["c1-1-a-t0", "c1-1-r1-b-t0", "c1-1-r1-c-t0"]
        assert sorted(result.completed) == ["c1-1-a-t0", "c1-1-r1-b-t0", "c1-1-r1-c-t0"]
        return
    assert [p.episode for p in result.planned] == ["c1-1-a-t0", "c1-1-r1-b-t0", "c1-1-r2-c-t0"]
    assert sorted(result.completed) == ["c1-1-a-t0", "c1-1-r1-b-t0"]
    with JournalReader(journal) as reader:
        rows = reader.last_pos
    with Journal.open(journal) as writer:  # the retry starts
        writer.append(incoming(start_envelopes(plan, result.planned[-1]), first_seq=rows + 1))
    with JournalReader(journal) as reader:
        assert reader.of_run("c1-1") == sorted([*(e for e, (run, _) in ran.items() if run == "c1-1"), "c1-1-r2-c-t0"])
        assert reader.of_run("c1-1-r1") == ["c1-1-r1-c-t0"]


CLASHES = [
    (
        "c1",
        "run 'c1' ran already ({journal} holds its episode 'c1-cancel-00-t0'): give another run id, or none for a"
        " fresh one; to run what it left undone, resume it (--resume, RunSpec.resume)",
    ),
    (
        "",  # journaled before starts recorded their run: of the run its id begins with, as --resume takes it
        "run 'c1' ran already ({journal} holds its episode 'c1-cancel-00-t0'): give another run id, or none for a"
        " fresh one; to run what it left undone, resume it (--resume, RunSpec.resume)",
    ),
    (
        "c1-cancel",  # a run c1-cancel with a task 00
        "run 'c1' would start episode 'c1-cancel-00-t0' of its task 'cancel-00', which {journal} holds of run"
        " 'c1-cancel' (whose run id and task make the same id): give another run id, or none for a fresh one",
    ),
]


@pytest.mark.parametrize(("held_by", "said"), CLASHES, ids=["its own", "unrecorded", "another run's"])
def test_a_run_whose_episode_ids_the_journal_holds_is_refused_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], held_by: str, said: str
) -> None:
    """Its episodes and those held would be taken for one episode's each (and replay would diverge): the command
    line and the API refuse it in the same line, naming the episode, whose it is and what to do."""
    journal = journal_of(tmp_path / "j.sqlite", episode_envelopes("c1-cancel-00-t0", run=held_by))
    before = journal.read_bytes()
    with pytest.raises(ConfigError) as refused:
        api.run(RunSpec(run_id="c1", tasks=1, journal=journal))
    assert str(refused.value) == said.format(journal=journal)
    assert main(["run", "--run-id", "c1", "--tasks", "1", "--journal", str(journal)]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == f"faultline: error: {said.format(journal=journal)}"
    assert journal.read_bytes() == before
    assert not (tmp_path / ".faultline").exists()


def test_a_run_whose_episode_ids_no_journaled_episode_has_passes_the_check_and_a_resumed_one_too(
    tmp_path: Path,
) -> None:
    """Another task of the same run ids, or the run resumed: what it starts is no episode the journal holds."""
    journal = journal_of(tmp_path / "j.sqlite", episode_envelopes("c1-cancel-00-t0", run="c1-cancel"))
    check_unheld(
        "c1",
        plan_episodes(RunPlan(run_id="c1", task_ids=["cancel-01"]), load_domain("retail")),
        held_episodes(journal),
        "j",
    )
    planned = plan_episodes(RunPlan(run_id="c1", tasks=1), load_domain("retail"))
    result = resumed(RunResult(planned), journal, "c1")
    assert [p.episode for p in result.planned] == ["c1-r1-cancel-00-t0"]  # a retry's id: none the journal holds
    check_unheld("c1", result.planned, held_episodes(journal), "j")


def test_a_long_task_id_makes_an_episode_id_that_begins_with_its_run_and_no_other_task_makes() -> None:
    """An id over 64 characters kept neither its run id (so a `run --fault` rule, `<run>-*`, faulted none of its
    episodes) nor its trial: it keeps both now, and a digest of the whole task id tells apart tasks whose ids begin
    alike or differ where an id keeps '_' for another character."""
    run, long = "c" * 47, "x" * 50
    tasks = [f"{long}.a", f"{long}_a", f"{long}.b", "short"]
    plan = RunPlan(run_id=run, system="tests.api.test_runs:Echoing", trials=2)
    planned = plan_records(plan, [record_of({"word": "hi", "id": task}, i) for i, task in enumerate(tasks, 1)])
    ids = [p.episode for p in planned]
    assert len(set(ids)) == len(ids) == 8
    assert ids[3] == f"{run}-short-t0" and episode_id("c1", "cancel-00", 0) == "c1-cancel-00-t0"  # as they were
    rule = scoped_to_run(parse_fault_spec("storm"), run)
    for p in planned:
        assert check_token(p.episode) and len(p.episode) <= 64
        assert p.episode.startswith(f"{run}-x") and p.episode.endswith(f"-t{p.trial}") or p.task == "short"
        assert in_run(p.episode, "", run) and fnmatch.fnmatchcase(p.episode, rule.episode)


@pytest.mark.parametrize(
    ("run_id", "said"),
    [
        ("c" * 52, f"run id {'c' * 52!r} is too long for the ids of its episodes, which begin with it and end with a"
         " task's digest and trial (64 characters in all): give one of at most 48 characters"),
        ("c1.a", "run id 'c1.a' is not a valid subject token: use 1-64 letters, digits, '-' or '_'"),
    ],
)  # fmt: skip
def test_a_run_id_its_episode_ids_cannot_begin_with_is_refused_in_one_line_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], run_id: str, said: str
) -> None:
    journal = tmp_path / "j.sqlite"
    with pytest.raises((ConfigError, SubjectError), match=f"^{re.escape(said)}$"):
        api.run(RunSpec(run_id=run_id, tasks=1, journal=journal))
    assert main(["run", "--run-id", run_id, "--tasks", "1", "--journal", str(journal), "--fault", "storm"]) == 1
    assert capsys.readouterr().err.splitlines() == [f"faultline: error: {said}"]
    assert not journal.exists() and not (tmp_path / ".faultline").exists()


def test_two_tasks_whose_ids_make_one_episode_id_are_refused_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An episode id keeps the letters, digits, '_' and '-' of a task's id, so input records 'a.b' and 'a_b' of one
    run made one episode, and their messages would have been taken for one episode's: the plan, and so the API and
    the command line alike, refuse it in one line."""
    records = [record_of({"word": "hi", "id": rid}, i) for i, rid in enumerate(("a.b", "a_b"), 1)]
    said = "tasks 'a.b' and 'a_b' make one episode id, 'r1-a_b-t0' (an id keeps the letters, digits, '_' and '-' of a"
    with pytest.raises(ConfigError, match=re.escape(said)):
        plan_records(RunPlan(run_id="r1", system="tests.api.test_runs:Echoing"), records)
    inputs = tmp_path / "inputs.jsonl"
    inputs.write_text('{"id": "a.b", "word": "hi"}\n{"id": "a_b", "word": "hi"}\n')
    argv = ["run", "--system", "tests.api.test_runs:Echoing", "--inputs", str(inputs), "--run-id", "r1"]
    assert main([*argv, "--journal", str(tmp_path / "j.sqlite")]) == 1
    assert capsys.readouterr().err.splitlines()[-1].startswith(f"faultline: error: {said}")
    assert not (tmp_path / "j.sqlite").exists()


RACES = {
    "one run id": (RunPlan(tasks=2, run_id="r1", start_rate=0), RunPlan(tasks=2, run_id="r1", start_rate=0)),
    "clashing ids": (  # both make episode c1-cancel-and-return-00-t0
        RunPlan(run_id="c1", task_ids=["cancel-and-return-00"]),
        RunPlan(run_id="c1-cancel-and", task_ids=["return-00"]),
    ),
}
REFUSALS = {
    ("r1", "r1"): "run 'r1' would start its episode 'r1-cancel-00-t0', which another process of run 'r1' started first"
    " on this system: give another run id, or none for a fresh one; to resume the run, wait until that process has"
    " ended",
    ("c1", "c1-cancel-and"): "run 'c1' would start episode 'c1-cancel-and-return-00-t0' of its task"
    " 'cancel-and-return-00', which run 'c1-cancel-and' started first on this system (whose run id and task make the"
    " same id): give another run id, or none for a fresh one",
    ("c1-cancel-and", "c1"): "run 'c1-cancel-and' would start episode 'c1-cancel-and-return-00-t0' of its task"
    " 'return-00', which run 'c1' started first on this system (whose run id and task make the same id): give another"
    " run id, or none for a fresh one",
}


def rule_changes(envelopes: Iterable[Envelope]) -> list[tuple[str, str]]:
    """Each fault-rule control of `envelopes`, in order: what it does ("add", "remove") and the id of its rule."""
    changes = []
    for env in envelopes:
        if isinstance(env.body, Control) and env.body.name == "faults":
            data = env.body.data
            changes.append((data["op"], data["rule"]["id"] if data["op"] == "add" else data["id"]))
    return changes


async def fault_controls(bus: Bus) -> list[tuple[str, str]]:
    """The fault-rule controls the stream holds (`rule_changes`)."""
    return rule_changes(env for _, env in await bus.read_envelopes([bus.subjects.ctl("faults")], 10.0))


def journaled_fault_controls(journal: Path) -> list[tuple[str, str]]:
    """The fault-rule controls `journal` holds (`rule_changes`)."""
    with JournalReader(journal) as reader:
        return rule_changes(row.envelope() for row in reader.rows())


@pytest.mark.parametrize("plans", RACES.values(), ids=RACES.keys())
async def test_of_two_runs_that_would_start_one_episode_at_once_one_runs_it_and_the_other_is_refused_first(
    tmp_path: Path, plans: tuple[RunPlan, RunPlan]
) -> None:
    """Two runners on one live system (access control on, each its own operator connection), each under a fault
    rule of its own as `run --fault` puts it in force, plan their runs and start them at the same moment, past every
    check of the journal: the stream stores the start of the episode they share once, so one run starts it and the
    other is refused in one line, having published nothing, not even its rule (whose run id may be the other's)."""
    journal = tmp_path / "j.sqlite"
    results = [RunResult(plan_episodes(plan, load_domain("retail"))) for plan in plans]
    rules = [scoped_to_run(parse_fault_spec("storm:copies=2,kind=tool_call"), plan.run_id) for plan in plans]
    refused: dict[int, EpisodeHeldError] = {}

    async def run(i: int, bus: Bus, workers: list[WorkerId]) -> None:
        in_force = functools.partial(rules_in_force, bus, [rules[i]], workers=workers, settings=FollowSettings())
        try:
            await run_plan(bus, plans[i], results[i], lambda _episode, _done: None, in_force=in_force)
        except EpisodeHeldError as exc:
            refused[i] = exc

    async with live_system(tmp_path, journal) as supervisor:
        assert supervisor.bus is not None and supervisor.access is not None
        other = await Bus.connect(supervisor.url, login=Login(supervisor.access.credential(OPERATOR)))
        try:
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    for i, bus in enumerate((supervisor.bus, other)):
                        tg.start_soon(run, i, bus, supervisor.worker_ids)
        finally:
            await other.close()
        await wait_for_journal(supervisor.bus)
        controls = await fault_controls(supervisor.bus)
    ((lost, held),) = refused.items()
    won, winner = 1 - lost, plans[1 - lost].run_id
    assert str(held) == REFUSALS[plans[lost].run_id, winner]
    assert (held.episode, held.run) == (results[lost].planned[0].episode, winner)
    assert not results[lost].completed and not results[lost].running
    assert controls == [("add", rules[won].id), ("remove", rules[won].id)]
    assert journaled_fault_controls(journal) == controls
    assert sorted(results[won].completed) == sorted(p.episode for p in results[won].planned)
    with JournalReader(journal) as reader:
        for p in results[won].planned:
            rows = [row.envelope() for row in reader.episode_rows(p.episode)]
            (started,) = [env.body for env in rows if isinstance(env.body, EpisodeStarted)]
            assert (started.run, started.task) == (winner, p.task)
            assert sorted(env.recipient for env in rows if isinstance(env.body, Start)) == ["env", "tool", "user"]
    report = await anyio.to_thread.run_sync(Replayer(agent_lookup(Config())).replay, journal)
    assert report.identical and report.episodes == len(results[won].planned)


async def test_a_run_cut_short_after_starting_an_episode_is_resumed_on_the_running_system(tmp_path: Path) -> None:
    """Run r1 started its first episode and stopped before its Starts went out: resumed on the same system, the
    episode it started runs again under a retry's id and the one it never started under its own, both started
    by the resumed run."""
    journal = tmp_path / "j.sqlite"
    plan = RunPlan(tasks=2, run_id="r1")
    first, _ = plan_episodes(plan, load_domain("retail"))
    async with live_system(tmp_path, journal) as supervisor:
        bus = supervisor.bus
        assert bus is not None and supervisor.access is not None
        assert await bus.publish_first(start_envelopes(plan, first)[0], "cut-short")
        await wait_for_journal(bus)
        login = Login(supervisor.access.credential(OPERATOR))
        spec = RunSpec(tasks=2, run_id="r1", resume=True, journal=journal, nats=supervisor.url, login=login)
        with anyio.fail_after(60):
            report = await anyio.to_thread.run_sync(api.run, spec)
    assert sorted(report.episodes.completed) == ["r1-cancel-01-t0", "r1-r1-cancel-00-t0"]
    assert {done.outcome for done in report.episodes.completed.values()} == {"success"}
    with JournalReader(journal) as reader:
        assert reader.of_run("r1") == ["r1-cancel-00-t0", "r1-cancel-01-t0", "r1-r1-cancel-00-t0"]


async def test_a_run_held_up_after_its_claims_and_run_again_in_its_process_finds_its_episodes_its_own(
    tmp_path: Path,
) -> None:
    """A run whose journal refused new episodes after it had claimed one runs its plan again once the journal
    writes: the claim it made is its own (`RunResult.claimant`), and the episode runs under its id."""
    plan = RunPlan(tasks=1, run_id="r1")
    (first,) = plan_episodes(plan, load_domain("retail"))
    result = RunResult([first])
    async with live_system(tmp_path, tmp_path / "j.sqlite") as supervisor:
        bus = supervisor.bus
        assert bus is not None
        assert await bus.publish_first(start_envelopes(plan, first)[0], result.claimant)
        with anyio.fail_after(60):
            await run_plan(bus, plan, result, lambda _episode, _done: None)
    assert result.planned == [first] and list(result.completed) == [first.episode]


async def test_a_resumed_runs_episode_whose_start_the_journal_had_not_copied_runs_again_under_a_retrys_id(
    tmp_path: Path,
) -> None:
    """Resumed while the journal lagged, run r1 plans its episode under its own id (the journal held no start of
    it); the stream holds that start, of r1's cut-short attempt, so the episode runs as a retry would."""
    plan = RunPlan(tasks=1, run_id="r1")
    (first,) = plan_episodes(plan, load_domain("retail"))
    result = RunResult([first], resuming=True)
    async with live_system(tmp_path, tmp_path / "j.sqlite") as supervisor:
        bus = supervisor.bus
        assert bus is not None
        assert await bus.publish_first(start_envelopes(plan, first)[0], "cut-short")
        with anyio.fail_after(60):
            await run_plan(bus, plan, result, lambda _episode, _done: None)
    assert [p.episode for p in result.planned] == ["r1-r1-cancel-00-t0"] == list(result.completed)
    assert result.completed["r1-r1-cancel-00-t0"].outcome == "success"


def test_a_run_whose_episode_another_run_started_first_is_refused_in_one_line_before_publishing_it(
    nats_server: EmbeddedServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run c1-cancel-and started c1-cancel-and-return-00-t0 after run c1's checks (no journal to read here, and the
    stream held no start of c1's first episode): c1 starts its first episode, is refused at the second before
    publishing anything of it, and the command line says so in one line."""
    shared = "c1-cancel-and-return-00-t0"

    async def start_other() -> None:
        async with await Bus.connect(nats_server.url) as bus:
            await bus.ensure_stream()
            other = RunPlan(run_id="c1-cancel-and", task_ids=["return-00"])
            started = start_envelopes(other, plan_episodes(other, load_domain("retail"))[0])[0]
            assert await bus.publish_first(started, "other")

    async def stored() -> list[Envelope]:
        async with await Bus.connect(nats_server.url) as bus:
            s = bus.subjects
            return [env for _, env in await bus.read_envelopes([s.event("*", shared), s.direct(shared, "*")], 10)]

    anyio.run(start_other)
    argv = ["run", "--nats", nats_server.url, "--run-id", "c1", "--task-ids", f"cancel-00,{shared[3:-3]}"]
    assert main([*argv, "--journal", str(tmp_path / "j.sqlite")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.splitlines()[-1] == f"faultline: error: {REFUSALS['c1', 'c1-cancel-and']}"
    (started,) = anyio.run(stored)  # the other run's start alone
    assert isinstance(started.body, EpisodeStarted) and started.body.run == "c1-cancel-and"


def test_a_run_refused_its_first_episode_never_puts_its_fault_rules_in_force(
    nats_server: EmbeddedServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process of run r1 started r1's first episode once this one had checked the running system (the moment
    two processes pass that check together, which a check that finds nothing stands for): `faultline run --fault` is
    refused in one line, and its rule, scoped to run r1 and so to the other process's episodes too, never reached
    the stream."""
    plan = RunPlan(tasks=1, run_id="r1")
    (first,) = plan_episodes(plan, load_domain("retail"))

    async def start_other() -> None:
        async with await Bus.connect(nats_server.url) as bus:
            await bus.ensure_stream()
            assert await bus.publish_first(start_envelopes(plan, first)[0], "other")

    async def unused(*_: object) -> None:
        return None

    async def controls() -> list[tuple[str, str]]:
        async with await Bus.connect(nats_server.url) as bus:
            return await fault_controls(bus)

    anyio.run(start_other)
    monkeypatch.setattr("faultline.api._run._check_unused", unused)
    argv = ["run", "--nats", nats_server.url, "--run-id", "r1", "--tasks", "1", "--fault", "storm:copies=2"]
    assert main([*argv, "--journal", str(tmp_path / "j.sqlite")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.splitlines()[-1] == f"faultline: error: {REFUSALS['r1', 'r1']}"
    assert anyio.run(controls) == []
