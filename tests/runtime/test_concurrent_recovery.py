"""A worker killed while a handler's concurrent model calls were in flight, some answered and recorded, others not:
the worker started in its place handles the input again, serves every recorded call the recording of its own
request, asks the model only the calls it never answered, and the journal replays identical.

The handler runs three branches, each a question and a follow-up on its answer. The model answers the later
questions first, so that live the branches begin their follow-ups in the reverse of their order, and hangs after
three answers: the worker is killed with the answers to `c2`, its follow-up and `c1` recorded.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from nats.aio.msg import Msg

from faultline.core import (
    Agent,
    ChatMessage,
    Context,
    Envelope,
    EpisodeCompleted,
    EpisodeStarted,
    LlmRequest,
    LlmResponse,
    Note,
    Recording,
    Start,
)
from faultline.journal import JournalReader, verify
from faultline.replay import Replayer
from faultline.runtime import (
    Completions,
    ProcessSpec,
    Supervisor,
    agent_lookup,
    ask_journal,
    load_config,
    start_episode,
)

pytestmark = pytest.mark.slow

HERE = "tests.runtime.test_concurrent_recovery"
BRANCHES = 3
ANSWERED_BEFORE_THE_KILL = 3
CALL_LOG = "FAULTLINE_TEST_CALL_LOG"
WAIT_S = 20.0


def ask(text: str) -> LlmRequest:
    return LlmRequest(role="brancher", messages=[ChatMessage(role="user", content=text)])


class Brancher(Agent):
    """Asks a question in each of its branches concurrently, then a follow-up on the answer; publishes the
    follow-ups' answers in the branches' order and completes its episode."""

    name = "brancher"
    completes = True

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        if not isinstance(msg.body, Start):
            return
        answers: dict[int, str] = {}

        async def branch(i: int) -> None:
            first = (await ctx.llm(ask(f"c{i}"))).content
            answers[i] = (await ctx.llm(ask(f"{first} then"))).content

        async with anyio.create_task_group() as tg:
            for i in range(BRANCHES):
                tg.start_soon(branch, i)
        for i in range(BRANCHES):
            ctx.publish("answers", Note(text=answers[i]))
        ctx.emit(EpisodeCompleted(outcome="success", reward=1.0))


class Backwards:
    """A model that answers concurrent questions the last first, each once the branch answered before has asked its
    follow-up (answered at once), and logs every request it is asked, with its process id, to $FAULTLINE_TEST_CALL_LOG.

    The model of the first worker process, which creates the log, answers only `ANSWERED_BEFORE_THE_KILL` calls
    and waits on the others until that worker is killed; the models of the workers after it answer at once."""

    def __init__(self, settings: object = None) -> None:
        self.log = Path(os.environ[CALL_LOG])
        self.first = not self.log.exists()
        self.log.touch()
        self.waiting: list[anyio.Event] = []
        self.answered = 0

    async def complete(self, request: LlmRequest) -> LlmResponse:
        text = request.messages[-1].content
        with self.log.open("a") as f:
            f.write(f"{os.getpid()} {text}\n")
        if self.first:
            if text.endswith("then"):
                if self.waiting:
                    self.waiting.pop().set()
            else:
                arrived = anyio.Event()
                self.waiting.append(arrived)
                if len(self.waiting) == BRANCHES:
                    self.waiting.pop().set()
                await arrived.wait()
            if self.answered == ANSWERED_BEFORE_THE_KILL:
                await anyio.sleep_forever()
            self.answered += 1
        return LlmResponse(content=f"a({text})")

    async def aclose(self) -> None:
        pass


def write_config(tmp_path: Path) -> Path:
    config = tmp_path / "faultline.toml"
    config.write_text(
        f'[models.brancher]\nbackend = "{HERE}:Backwards"\n\n[agents.brancher]\nclass = "{HERE}:Brancher"\n'
    )
    return config


@asynccontextmanager
async def system(tmp_path: Path, config: Path) -> AsyncIterator[Supervisor]:
    supervisor = Supervisor(
        journal_path=tmp_path / "journal.sqlite",
        workers=[ProcessSpec("branches", ("worker", "--agents", "brancher", "--config", str(config)))],
        store_dir=tmp_path / "nats",
        log_dir=tmp_path / "logs",
    )
    async with supervisor.running():
        yield supervisor


def asked_by(log: Path, pid: int) -> list[str]:
    """What the model of worker process `pid` was asked, in order."""
    lines = (line.split(" ", 1) for line in log.read_text().splitlines())
    return [text for at, text in lines if int(at) == pid]


async def test_a_killed_workers_concurrent_calls_are_each_served_their_own_recording_and_replay_identical(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Handled again, a branch whose question is served, or answered at once, begins its follow-up under an index
    whose recording is another branch's question, not begun yet. That recording was served to it, and the episode
    failed as if the code had changed; made live under that index, the call's recording had the other's id, the
    stream dropped it, and the other branch's question, taken for served, was asked again."""
    log = tmp_path / "calls.log"
    monkeypatch.setenv(CALL_LOG, str(log))
    config = write_config(tmp_path)
    async with system(tmp_path, config) as supervisor:
        bus = supervisor.bus
        assert bus is not None
        first = supervisor.pid("branches")
        assert first is not None
        recorded = anyio.Event()
        answered: list[str] = []

        async def on_recording(msg: Msg) -> None:
            answered.append(msg.subject)
            if len(answered) == ANSWERED_BEFORE_THE_KILL:
                recorded.set()

        sub = await bus.nc.subscribe(bus.subjects.rec("ep", Brancher.name), cb=on_recording)
        async with Completions(bus, (Brancher.name,)) as completions:
            await start_episode(bus, "ep", Brancher.name, EpisodeStarted(task="branches"))
            with anyio.fail_after(WAIT_S):
                await recorded.wait()
            os.kill(first, signal.SIGKILL)
            with anyio.fail_after(WAIT_S):
                done = await completions.wait(["ep"])
        await sub.unsubscribe()
        restarted = supervisor.pid("branches")
        assert restarted is not None and restarted != first
        await ask_journal(bus, WAIT_S, until=(await bus.stream_state()).last_seq)
    assert done["ep"].outcome == "success", done["ep"]
    # Only what was never answered is asked again: `c0` and branch 1's follow-up, then branch 0's follow-up.
    assert sorted(asked_by(log, restarted)) == ["a(c0) then", "a(c1) then", "c0"]
    journal = tmp_path / "journal.sqlite"
    assert verify(journal).ok
    with JournalReader(journal) as reader:
        rows = [row.envelope() for row in reader.episode_rows("ep")]
    calls = [
        (r.index, r.request["messages"][-1]["content"]) for r in (env.body for env in rows) if isinstance(r, Recording)
    ]
    assert calls[:ANSWERED_BEFORE_THE_KILL] == [(2, "c2"), (3, "a(c2) then"), (1, "c1")]  # before the kill
    assert len({index for index, _ in calls}) == len(calls)
    assert sorted(text for _, text in calls) == sorted(
        [f"c{i}" for i in range(BRANCHES)] + [f"a(c{i}) then" for i in range(BRANCHES)]
    )
    notes = [env.body.text for env in rows if env.sender == Brancher.name and isinstance(env.body, Note)]
    assert notes == [f"a(a(c{i}) then)" for i in range(BRANCHES)]
    assert [env.sender for env in rows if isinstance(env.body, EpisodeCompleted)] == [Brancher.name]
    report = Replayer(agent_lookup(load_config(config))).replay(journal)
    assert report.identical, report.divergences
