"""Stalled episodes: one in which nothing is in flight ends long before its timeout, with who said what last; one
that waits on a slow model or a long timer, or runs on several shards beside stalled ones, is never called
stalled (`runtime.StallWatch`)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import anyio
import pytest

from faultline.agent import Agent, Context, Envelope, Grade, InputRecord, Note, Start, System
from faultline.agents import Scorer
from faultline.api import RunPlan, RunResult, plan_records, run_plan, wait_for_journal
from faultline.bus import Bus, BusSettings, ConsumerState, Delivery, EmbeddedServer
from faultline.cli import main
from faultline.core import (
    ChatMessage,
    DefenseFired,
    EpisodeCompleted,
    ErrorRaised,
    LlmRequest,
    Timer,
    TimerFired,
    episode_shard,
    record_of,
    system_path,
    timer_fired,
)
from faultline.journal import JournalReader
from faultline.runtime import JournalService, ModelConfig, Stall, Worker, WorkerSettings, stall_of
from faultline.runtime._stalls import Busy, judge
from faultline.runtime.models import SimBackend, SimLatency
from faultline.testing import SystemRun, run_system

EPISODE_TIMEOUT_S = 60.0
STALL_AFTER_S = 1.0
SLOW_CALL_S = 2.5
"""Each model call of the slow system: longer than `STALL_AFTER_S`, so that the watch looks while it waits."""
TIMER_S = 3.0


def ask(ctx: Context, text: str) -> Any:
    return ctx.llm(LlmRequest(role="asker", messages=[ChatMessage(role="user", content=text)]))


class Asker(Agent):
    """Asks `silent` for a reply it never gets where its record says `wait`; else asks its model twice and
    finishes, or sets a timer and finishes when it fires."""

    name = "asker"

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        body = msg.body
        if isinstance(body, Start):
            how = body.data["how"]
            if how == "wait":
                ctx.send("silent", Note(text="ping"))
            elif how == "shout":
                ctx.publish("nobody", Note(text="anyone?"))
            elif how == "timer":
                ctx.emit(Timer(after_s=TIMER_S))
            else:
                first = await ask(ctx, "one")
                second = await ask(ctx, "two")
                ctx.finish([first.content, second.content])
        elif isinstance(body, TimerFired):
            ctx.finish("rang")
        elif isinstance(body, Note) and msg.sender == "silent":
            ctx.finish(body.text)


class Silent(Agent):
    """Handles what it is sent and answers nothing: the reply its peer waits for never comes."""

    name = "silent"

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        return None


class Waiting(System):
    name = "waiting"
    agents = (Asker, Silent)
    entry = Asker.name
    finishers = (Asker.name,)
    needs = ("how",)

    def score(self, record: InputRecord, output: Any) -> Grade:
        return Grade(1.0)


def slow_model() -> SimBackend:
    return SimBackend(ModelConfig(latency=SimLatency(distribution="fixed", seconds=SLOW_CALL_S)))


async def run_waiting(
    server: EmbeddedServer, tmp_path: Path, hows: dict[str, str], models: SimBackend | None = None
) -> SystemRun:
    """A run of `Waiting` with a record per id in `hows` (what its asker does), watched for stalls."""
    return await run_system(
        Waiting,
        [{"id": id_, "how": how} for id_, how in hows.items()],
        nats_url=server.url,
        journal=tmp_path / "j.sqlite",
        models=models or SimBackend(),
        episode_timeout_s=EPISODE_TIMEOUT_S,
        stall_after_s=STALL_AFTER_S,
    )


async def test_an_agent_waiting_for_a_reply_nobody_sends_ends_stalled_long_before_its_timeout(
    nats_server: EmbeddedServer, tmp_path: Path
) -> None:
    run = await run_waiting(nats_server, tmp_path, {"w": "wait"})
    done = run.outcome("w")
    assert done.outcome == "failure"
    assert stall_of(done) == Stall(
        quiet_s=STALL_AFTER_S,
        last="note from asker to silent",
        receivers=["silent"],
        last_sent={"asker": "note to silent"},
    )
    assert done.cause.startswith("stalled: nothing of the episode in flight for 1s")
    assert "the last message was note from asker to silent, and silent handled it and sent nothing" in done.cause
    with JournalReader(run.journal) as reader:
        summary = reader.episode(run.episode("w"))
    assert summary is not None and summary.cause == done.cause
    # from its start to its completion, as the journal's rows were stamped: at least the quiet time, and far
    # below the timeout it used to wait out
    assert STALL_AFTER_S <= summary.duration_s < EPISODE_TIMEOUT_S / 4
    assert run.replay().identical


async def test_a_message_on_a_topic_nobody_listens_to_ends_stalled_saying_so(
    nats_server: EmbeddedServer, tmp_path: Path
) -> None:
    run = await run_waiting(nats_server, tmp_path, {"s": "shout"})
    stall = stall_of(run.outcome("s"))
    assert stall is not None
    assert (stall.last, stall.receivers, stall.unheard) == (
        "note from asker on #nobody",
        [],
        "no agent listens on #nobody",
    )


async def test_an_episode_whose_model_is_slower_than_the_stall_time_is_never_called_stalled(
    nats_server: EmbeddedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="faultline.runtime._stalls")
    run = await run_waiting(nats_server, tmp_path, {"a": "ask", "b": "ask"}, slow_model())
    assert {episode: done.outcome for episode, done in run.completed.items()} == dict.fromkeys(run.completed, "success")
    # the watch looked while a call was in flight, and found the call's input not acknowledged
    assert any("has not acknowledged" in record.getMessage() for record in caplog.records)


async def test_an_episode_waiting_on_a_timer_longer_than_the_stall_time_is_never_called_stalled(
    nats_server: EmbeddedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="faultline.runtime._stalls")
    run = await run_waiting(nats_server, tmp_path, {"t": "timer"})
    assert run.outcome("t").outcome == "success"
    assert any(f"asker's timer of {TIMER_S:g}s has not fired" in r.getMessage() for r in caplog.records)


async def test_on_two_worker_shards_stalled_episodes_end_and_the_slow_ones_beside_them_do_not(
    nats_server: EmbeddedServer, tmp_path: Path
) -> None:
    """Partitioned subjects, a worker per shard, the journal's consumer beside theirs: each stalled episode is
    found from its own shard's consumers, while the others' model calls hold theirs."""
    bus = await Bus.connect(nats_server.url, settings=BusSettings(partitions=2))
    records = [record_of({"id": f"{how}{i}", "how": how}, i) for i in range(3) for how in ("wait", "ask")]
    plan = RunPlan(
        domain="",
        system=system_path(Waiting),
        tasks=len(records),
        run_id="sh",
        episode_timeout_s=EPISODE_TIMEOUT_S,
        stall_after_s=STALL_AFTER_S,
    )
    result = RunResult(plan_records(plan, records))
    assert {episode_shard(p.episode, 2) for p in result.planned} == {0, 1}
    try:
        await bus.ensure_stream()
        journal = JournalService(bus, tmp_path / "j.sqlite", completers=(Waiting.completer,))
        workers = [
            Worker(bus, [Asker, Silent, Scorer], backends=lambda _role: slow_model(), settings=settings)
            for settings in (WorkerSettings(shard=k, shards=2, system=plan.system) for k in range(2))
        ]
        async with anyio.create_task_group() as tg:
            for service in (journal, *workers):
                tg.start_soon(service.run)
            await journal.wait_ready()
            for worker in workers:
                await worker.wait_ready()
            with anyio.fail_after(EPISODE_TIMEOUT_S / 2):
                await run_plan(bus, plan, result, lambda _episode, _done: None)
                await wait_for_journal(bus)
            for service in (*workers, journal):
                service.stop()
    finally:
        await bus.close()
    outcomes = {p.task: (done.outcome, stall_of(done) is not None) for p, done in result.outcomes()}
    assert outcomes == {
        **{f"wait{i}": ("failure", True) for i in range(3)},
        **{f"ask{i}": ("success", False) for i in range(3)},
    }


# -- judging what the server holds, without a server -----------------------------------------------------------


def stored(*envelopes: tuple[str, Envelope]) -> list[tuple[Delivery, Envelope]]:
    """Each envelope on its subject, numbered from 1 in stream order."""
    return [(Delivery(subject, b"", "", seq, 1), env) for seq, (subject, env) in enumerate(envelopes, start=1)]


START = ("fl.ep.e.asker.runner", Envelope(id="s1", episode="e", sender="runner", recipient="asker", body=Start()))
PING = ("fl.ep.e.silent.asker", Envelope(id="p1", episode="e", sender="asker", recipient="silent", body=Note()))
ASKER = ConsumerState("agent-asker-0of1", ("fl.ep.*.asker.*",), 1)
SILENT = ConsumerState("agent-silent-0of1", ("fl.ep.*.silent.*",), 2)


def test_an_episode_whose_every_message_is_acknowledged_by_who_receives_it_is_stalled() -> None:
    other = ConsumerState("agent-other-0of1", ("fl.ep.*.other.*",), 0)  # sent none of them
    verdict = judge(stored(START, PING), [ASKER, SILENT, other], quiet_through=2, quiet_s=10)
    assert verdict == Stall(
        quiet_s=10, last="note from asker to silent", receivers=["silent"], last_sent={"asker": "note to silent"}
    )


@pytest.mark.parametrize(
    "floors",
    [
        (ASKER, ConsumerState("agent-silent-0of1", ("fl.ep.*.silent.*",), 1)),
        (ASKER, SILENT, ConsumerState("journal", (), 1)),  # every subject
        (ASKER, ConsumerState("agent-silent-1of2", ("fl.ep.*.silent.*",), 1)),  # another shard's, or no reader
    ],
)
def test_a_message_a_consumer_has_not_acknowledged_keeps_its_episode_busy(floors: tuple[ConsumerState, ...]) -> None:
    verdict = judge(stored(START, PING), floors, quiet_through=2, quiet_s=10)
    assert isinstance(verdict, Busy) and verdict.needed == 2 and verdict.consumer == floors[-1].name


def test_a_message_newer_than_the_quiet_time_keeps_its_episode_busy() -> None:
    assert isinstance(judge(stored(START, PING), [ASKER, SILENT], quiet_through=1, quiet_s=10), Busy)


def test_a_timer_keeps_its_episode_busy_until_its_firing_is_stored() -> None:
    timer = Envelope(id="t1", episode="e", sender="asker", body=Timer(after_s=600))
    set_ = ("fl.ev.timer.e.asker", timer)
    pending = judge(stored(START, set_), [ASKER], quiet_through=2, quiet_s=10)
    assert pending == Busy("asker's timer of 600s has not fired", until_new=True)
    fired = ("fl.ep.e.asker.asker", timer_fired(timer))
    assert isinstance(judge(stored(START, set_, fired), [ASKER], quiet_through=2, quiet_s=10), Busy)  # unhandled
    handled = ConsumerState("agent-asker-0of1", ("fl.ep.*.asker.*",), 3)
    assert isinstance(judge(stored(START, set_, fired), [handled], quiet_through=3, quiet_s=10), Stall)


@pytest.mark.parametrize(
    "end",
    [
        EpisodeCompleted(outcome="success"),
        ErrorRaised(agent="silent", input_id="p1", error_type="ValueError", message="no"),
    ],
)
def test_an_episode_completed_or_failed_by_an_error_is_not_the_watchs(end: EpisodeCompleted | ErrorRaised) -> None:
    over = ("fl.ev.x.e.silent", Envelope(id="x1", episode="e", sender="silent", body=end))
    assert judge(stored(START, PING, over), [ASKER, SILENT], quiet_through=3, quiet_s=10) is None


def test_an_agent_is_not_counted_a_receiver_of_its_own_topic_message() -> None:
    said = Envelope(id="q1", episode="e", sender="asker", topic="q", body=Note())
    listens = ConsumerState("agent-asker-0of1", ("fl.ep.*.asker.*", "fl.tp.*.q.*"), 2)
    verdict = judge(stored(START, ("fl.tp.e.q.asker", said)), [listens], quiet_through=2, quiet_s=10)
    assert isinstance(verdict, Stall)
    assert (verdict.receivers, verdict.unheard) == ([], "no agent listens on #q")


def test_a_defense_that_dropped_the_last_message_is_named_rather_than_its_agent() -> None:
    drop = DefenseFired(defense="dedup", agent="silent", message_id="p1", reason="seen before")
    fired = ("fl.ev.defense.e.silent", Envelope(id="d1", episode="e", sender="silent", body=drop))
    verdict = judge(stored(START, PING, fired), [ASKER, SILENT], quiet_through=3, quiet_s=10)
    assert isinstance(verdict, Stall)
    assert (verdict.receivers, verdict.dropped) == ([], ["the dedup defense dropped it at silent (seen before)"])
    assert "note from asker to silent, and the dedup defense dropped it at silent (seen before);" in verdict.cause()


async def test_faultline_run_ends_a_stalled_episode_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command line on a system it starts, with credentials: the runner, its operator, may ask how far the
    workers' consumers have acknowledged; the note names the stall, and the journal holds it as the cause."""
    inputs = tmp_path / "inputs.jsonl"
    inputs.write_text('{"id": "w", "how": "wait"}\n{"id": "a", "how": "ask"}\n')
    journal = tmp_path / "j.sqlite"
    argv = ["run", "--json", "--system", system_path(Waiting), "--inputs", str(inputs), "--journal", str(journal)]
    code = await anyio.to_thread.run_sync(main, [*argv, "--stall-after", "1", "--episode-timeout", "60"])
    assert code == 0
    out, err = capsys.readouterr()
    summary = json.loads(out.splitlines()[-1])
    assert summary["outcomes"] == {"failure": 1, "success": 1}
    (cause,) = summary["stalled"]
    assert cause.startswith("stalled: nothing of the episode in flight for 1s")
    assert "note: 1 of 2 episodes stalled, counted as failures: nothing of the episode in flight for 1s" in err
    assert main(["journal", "episodes", str(journal), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted((row["outcome"], row["cause"]) for row in rows if row["type"] == "episode") == [
        ("failure", cause),
        ("success", ""),
    ]
