"""A handler that makes its calls concurrently (`asyncio.gather`, a task group) or waits on the loop itself (a
sleep): every call keeps its own recording, and replay runs such a handler on an event loop, as it ran live."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import anyio
import pytest

from faultline.agent import (
    Agent,
    ChatMessage,
    Context,
    Envelope,
    Finished,
    Grade,
    InputRecord,
    LlmRequest,
    LlmResponse,
    Start,
    System,
)
from faultline.bus import EmbeddedServer
from faultline.cli import main
from faultline.core import SCORER, Recording
from faultline.journal import JournalReader
from faultline.replay import Keep, Replayer, _replay, fork_episode
from faultline.runtime import Config, agent_lookup
from faultline.testing import SystemRun, run_system
from tests import jsonl

BRANCHES = 3


def ask(text: str) -> LlmRequest:
    return LlmRequest(role="fan", messages=[ChatMessage(role="user", content=text)])


class Fan(Agent):
    """Asks its questions concurrently, in the way its input's `mode` names."""

    name = "fan"
    changed = False
    """Branch 1 asks its second question otherwise (set by a test, for replay only)."""

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        if not isinstance(msg.body, Start):
            return
        mode = msg.body.data["mode"]
        if mode == "gather":
            answers = await asyncio.gather(*(ctx.llm(ask(f"g{i}")) for i in range(BRANCHES)))
            ctx.finish([a.content for a in answers])
        elif mode == "chains":
            out: dict[int, str] = {}

            async def chain(i: int) -> None:
                first = (await ctx.llm(ask(f"c{i}"))).content
                again = "then, otherwise" if Fan.changed and i == 1 else "then"
                out[i] = (await ctx.llm(ask(f"{first} {again}"))).content

            async with anyio.create_task_group() as tg:
                for i in range(BRANCHES):
                    tg.start_soon(chain, i)
            ctx.finish([out[i] for i in range(BRANCHES)])
        elif mode == "tidy":
            try:
                await asyncio.sleep(0)
                ctx.finish("tidied")
            finally:
                await asyncio.sleep(0.001)
        else:
            await anyio.sleep(0.01)
            ctx.finish("rested")


class FanOut(System):
    name = "fan-out"
    agents = (Fan,)
    entry = "fan"
    finishers = ("fan",)
    needs = ("mode",)

    def score(self, record: InputRecord, output: Any) -> Grade:
        return Grade(1.0)


class Reversing:
    """Answers concurrent calls in the reverse of the order they came in.

    The gather's questions (`g0`...) are answered together once all came, the last first; a chain's first
    questions (`c0`...) one at a time, the last first, each once the branch answered before has asked its
    second question (answered at once): so the second questions begin in the reverse order of the branches.
    """

    def __init__(self) -> None:
        self.waiting: list[anyio.Event] = []

    async def complete(self, request: LlmRequest) -> LlmResponse:
        text = request.messages[-1].content
        if text.endswith(("then", "otherwise")):
            if self.waiting:
                self.waiting.pop().set()
        else:
            arrived = anyio.Event()
            self.waiting.append(arrived)
            if len(self.waiting) == BRANCHES and text.startswith("g"):
                for event in reversed(self.waiting):
                    event.set()
                self.waiting = []
            elif len(self.waiting) == BRANCHES:
                self.waiting.pop().set()
            await arrived.wait()
        return LlmResponse(content=f"a({text})")

    async def aclose(self) -> None:
        pass


async def fan_run(mode: str, nats_server: EmbeddedServer, tmp_path: Path) -> SystemRun:
    run = await run_system(
        FanOut,
        [{"id": mode, "mode": mode}],
        nats_url=nats_server.url,
        journal=tmp_path / "j.sqlite",
        models=Reversing(),
    )
    assert run.outcome(mode).outcome == "success"
    return run


def answered(run: SystemRun, mode: str) -> dict[int, tuple[str, str]]:
    """The fan's recordings by index: (what it asked, what it got)."""
    recordings = [m.body for m in run.messages(mode) if m.sender == "fan" and isinstance(m.body, Recording)]
    return {r.index: (r.request["messages"][-1]["content"], r.response["content"]) for r in recordings}


@pytest.mark.parametrize("mode", ["gather", "chains"])
async def test_concurrent_calls_each_keep_their_recording_and_replay_identical(
    mode: str, nats_server: EmbeddedServer, tmp_path: Path
) -> None:
    """Each call took the index of the calls made before it had answered: all got index 0, one recording id,
    and the stream kept only the first answer; replay, driving the handler by hand, could not run its tasks."""
    run = await fan_run(mode, nats_server, tmp_path)
    calls = answered(run, mode)
    first = mode[0]
    firsts = {index: calls[index] for index in range(BRANCHES)}
    assert firsts == {i: (f"{first}{i}", f"a({first}{i})") for i in range(BRANCHES)}, "indexed as they began"
    if mode == "chains":  # the second calls began as the first answers came: the last branch's first
        assert [calls[index][0] for index in range(BRANCHES, 2 * BRANCHES)] == [
            f"a(c{i}) then" for i in reversed(range(BRANCHES))
        ]
    report = run.replay()
    assert report.identical, report.divergences
    assert report.messages == 3  # the fan's start, the scorer's start and its finished


async def test_a_branch_that_asks_otherwise_diverges_at_its_call(
    nats_server: EmbeddedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside a task group the call's divergence came out wrapped in an exception group, taken for the handler's
    failure: replay reported a changed output instead of the call."""
    run = await fan_run("chains", nats_server, tmp_path)
    monkeypatch.setattr(Fan, "changed", True)
    [divergence] = run.replay().divergences
    assert divergence.agent == "fan" and divergence.input_kind == "start"
    assert "llm() that differs from the journal's llm()" in divergence.what
    assert divergence.got["request"]["messages"][-1]["content"] == "a(c1) then, otherwise"


async def test_a_handler_that_sleeps_replays_identical_within_a_limit(
    nats_server: EmbeddedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sleep awaits no ctx call: replay called it a divergence. On the loop it runs, within a limit, past which
    the handler fails as a live one past its limit would, and replay says so instead of waiting."""
    run = await fan_run("sleep", nats_server, tmp_path)
    assert run.replay().identical
    monkeypatch.setattr(_replay, "LOOP_HANDLER_LIMIT_S", 0.001)
    [divergence] = run.replay().divergences
    assert (
        divergence.what == "the handler now fails: HandlerTimeoutError: the handler ran past its time limit of 0.001s"
    )


async def test_a_handler_whose_cleanup_awaits_as_it_is_given_up_replays_identical(
    nats_server: EmbeddedServer, tmp_path: Path
) -> None:
    """Driven by hand, a handler that suspended was closed there, and its cleanup, awaiting the loop, escaped
    replay as a traceback: it is decided on a loop, as one that reaches for the loop before it suspends is."""
    run = await fan_run("tidy", nats_server, tmp_path)
    assert run.replay().identical


def position(run: SystemRun, mode: str, kind: str, recipient: str) -> int:
    """The journal position of the episode's `kind` message to `recipient`."""
    with JournalReader(run.journal) as reader:
        rows = reader.episode_rows(run.episode(mode))
        return next(row.pos for row in rows if (row.kind, row.recipient) == (kind, recipient))


class Unasked:
    """A backend a fork must not call: everything before its position is served from the journal."""

    async def complete(self, request: LlmRequest) -> LlmResponse:
        raise AssertionError(f"the fork asked the model: {request.messages[-1].content}")

    async def aclose(self) -> None:
        pass


async def test_a_fork_after_chained_calls_answered_out_of_order_reproduces_the_episode(
    nats_server: EmbeddedServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fork rebuilt its agents serving calls by index: the chains' second calls began in the branches' order,
    not the order their first answers came live, so the fork failed at the first of them where replay matched."""
    run = await fan_run("chains", nats_server, tmp_path)
    at = position(run, "chains", "finished", SCORER)
    args = ["fork", str(run.journal), "--episode", run.episode("chains"), "--at", str(at), "--keep", "--json"]
    code = await anyio.to_thread.run_sync(main, args)
    out, err = capsys.readouterr()
    assert code == 0, err
    [result], _ = jsonl.read(out)
    assert result["outcome"]["outcome"] == "success", result["outcome"]
    with JournalReader(result["journal"]) as reader:
        forked = next(row.envelope().body for row in reader.episode_rows(result["episode"]) if row.kind == "finished")
    assert isinstance(forked, Finished) and forked.output == [f"a(a(c{i}) then)" for i in range(BRANCHES)]
    assert Replayer(agent_lookup(Config())).replay(result["journal"]).identical


class Silent:
    """A model that never answers."""

    async def complete(self, request: LlmRequest) -> LlmResponse:
        await anyio.Event().wait()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        pass


async def test_a_fork_whose_handler_waits_forever_fails_within_the_limit(
    nats_server: EmbeddedServer, tmp_path: Path
) -> None:
    """A fork ran its handlers with no limit: one waiting for a model that never answers hung the fork, and an
    attribution with it."""
    run = await fan_run("gather", nats_server, tmp_path)
    at = position(run, "gather", "start", "fan")
    with anyio.fail_after(30):
        result = await fork_episode(
            run.journal,
            run.episode("gather"),
            at,
            Keep(),
            lookup=agent_lookup(Config()),
            backends=lambda _role: Silent(),
            handler_timeout_s=0.2,
        )
    assert result.outcome.outcome == "error"
    assert result.outcome.cause.startswith("HandlerTimeoutError in fan: the handler ran past its time limit of 0.2s")
