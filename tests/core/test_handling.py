"""A handler past its time limit fails its episode (the runner completes it) with a cause that says what it waited on;
one run again with recordings fails where it no longer makes a recorded call, and faults the calls it makes live."""

from __future__ import annotations

import asyncio

import anyio
import pytest

from faultline._errors import NonDeterminismError
from faultline.core import (
    RUNNER,
    Agent,
    AgentHarness,
    ChatMessage,
    Context,
    Envelope,
    EpisodeCompleted,
    ErrorRaised,
    Handling,
    LlmRequest,
    LlmResponse,
    Note,
    Recorder,
    Recording,
    digest,
    encode,
    error_completion,
)


class Asks(Agent):
    name = "asker"

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        if msg.body.text == "ask":  # type: ignore[union-attr]
            await ctx.llm(LlmRequest(role="slow", messages=[ChatMessage(role="user", content="hi")]))
        elif msg.body.text == "ask both":  # type: ignore[union-attr]
            await asyncio.gather(
                *(
                    ctx.llm(LlmRequest(role=role, messages=[ChatMessage(role="user", content="hi")]))
                    for role in ("slow", "quick")
                )
            )
        else:
            await anyio.sleep_forever()


class NeverAnswers:
    """Answers the role `quick` only."""

    async def complete(self, request: LlmRequest) -> LlmResponse:
        if request.role == "quick":
            return LlmResponse(content="hello")
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        pass


async def failure_of(text: str) -> tuple[ErrorRaised, EpisodeCompleted]:
    services = AgentHarness(Asks(), backend=NeverAnswers())
    message = Envelope(id="m1", episode="e", sender="runner", recipient="asker", body=Note(text=text))
    handling = Handling(Asks(), "asker", message, Recorder(services=services), services=services)
    [raised] = await handling.run(timeout_s=0.05)  # the error only: the agent does not complete its episode
    completion = error_completion(raised)
    error, completed = raised.body, completion.body
    assert isinstance(error, ErrorRaised) and isinstance(completed, EpisodeCompleted)
    assert raised.sender == "asker" and completion.sender == RUNNER and completion.causation == raised.id
    assert services.model_calls == set(), "a cancelled call is no longer listed in flight"
    return error, completed


async def test_a_handler_stuck_on_a_model_call_names_the_call() -> None:
    error, completed = await failure_of("ask")
    assert error.error_type == "HandlerTimeoutError"
    assert (
        error.message
        == "the handler ran past its time limit of 0.05s, waiting for its model call (role slow, attempt 1)"
    )
    assert completed.outcome == "error"
    assert completed.cause == f"HandlerTimeoutError in asker: {error.message}"


async def test_a_handler_stuck_on_one_of_its_concurrent_model_calls_names_that_call() -> None:
    """The handler's one model call in flight was forgotten as soon as any of its calls answered: the cause named
    no call, or the last to begin rather than the one still waited on."""
    error, _ = await failure_of("ask both")
    assert (
        error.message
        == "the handler ran past its time limit of 0.05s, waiting for its model call (role slow, attempt 1)"
    )


async def test_a_handler_stuck_elsewhere_says_only_its_limit() -> None:
    error, _ = await failure_of("wait")
    assert error.message == "the handler ran past its time limit of 0.05s"


def greeting(text: str) -> LlmRequest:
    return LlmRequest(role="quick", messages=[ChatMessage(role="user", content=text)])


class Greets(Agent):
    name = "greeter"

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        ctx.send("runner", Note(text=(await ctx.llm(greeting("hi"))).content))


async def test_a_handler_run_again_that_no_longer_makes_a_recorded_call_fails_as_it_returns() -> None:
    """Handled again after a crash, a call with no recording of its own request is made live, even where its index
    holds another's (a concurrent branch's, maybe, yet to begin): the recording left unserved is what tells that
    the code changed since."""
    before = greeting("hello")
    recorded = Recording(call="llm", index=0, request_digest=digest(encode(before)), request=before, response="hi")
    services = AgentHarness(Greets(), backend=NeverAnswers())
    message = Envelope(id="m1", episode="e", sender="runner", recipient="greeter", body=Note(text="greet"))
    recorder = Recorder(recorded={0: recorded}, services=services)
    handling = Handling(Greets(), "greeter", message, recorder, services=services)
    with pytest.raises(NonDeterminismError) as raised:
        await handling.run()
    assert str(raised.value) == (
        "agent 'greeter' handling note m1: the journal holds call #0 llm() that the code no longer makes"
    )
    assert [(made.index, made.request.messages[-1].content) for made in recorder.made] == [(1, "hi")]


async def test_a_call_made_live_under_an_index_another_request_holds_is_faulted_as_any_live_call() -> None:
    """Handled again after a crash, a concurrent branch's call may begin under an index whose recording is another
    branch's: it runs live, and the fault rules in force change what it sends, as they did every live call. They
    were passed over, since a recording held its index."""
    other = greeting("hello")
    recorded = Recording(call="llm", index=0, request_digest=digest(encode(other)), request=other, response="hi")
    services = AgentHarness(Greets(), backend=NeverAnswers())
    faulted: list[int] = []

    async def shout(ctx: Context, index: int, request: LlmRequest) -> LlmRequest:
        faulted.append(index)
        return greeting(request.messages[-1].content.upper())

    message = Envelope(id="m1", episode="e", sender="runner", recipient="greeter", body=Note(text="greet"))
    recorder = Recorder(recorded={0: recorded}, services=services, faults=shout, any_order=True)
    ctx = Handling(Greets(), "greeter", message, recorder, services=services).ctx
    assert await recorder.faulted(ctx, 0, greeting("hi")) == greeting("HI")
    assert await recorder.faulted(ctx, 0, other) == other, "a call its recording serves sent what it holds"
    assert faulted == [0]
