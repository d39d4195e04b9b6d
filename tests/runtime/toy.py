"""Two toy agents that ping-pong, used by runtime tests (also inside worker processes)."""

from __future__ import annotations

from faultline.core import (
    Agent,
    ChatMessage,
    Context,
    Envelope,
    EpisodeCompleted,
    LlmRequest,
    LlmResponse,
    Note,
    Start,
    Usage,
)

ROUNDS = 5


class Pinger(Agent):
    name = "pinger"
    completes = True

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.rounds = ROUNDS

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        if isinstance(msg.body, Start):
            self.rounds = int(msg.body.data.get("rounds", ROUNDS))
            n = 0
        else:
            n = int(msg.body.data["n"])  # type: ignore[union-attr]
        self.seen.append(n)
        if n >= self.rounds:
            ctx.emit(EpisodeCompleted(outcome="success", reward=1.0, turns=len(self.seen)))
            return
        r = await ctx.random()
        ctx.send("ponger", Note(text="ping", data={"n": n + 1, "r": r, "seen": list(self.seen)}))


class Ponger(Agent):
    name = "ponger"

    def __init__(self) -> None:
        self.count = 0

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        self.count += 1
        reply = await ctx.llm(
            LlmRequest(role="ponger", messages=[ChatMessage(role="user", content=f"ping {msg.body.data['n']}")])  # type: ignore[union-attr]
        )
        if msg.body.data.get("crash_at") == self.count:  # type: ignore[union-attr]
            raise RuntimeError("ponger was told to fail")
        ctx.send("pinger", Note(text=reply.content, data={"n": msg.body.data["n"], "count": self.count}))  # type: ignore[union-attr]


class EchoBackend:
    """A model that repeats the last message; counts its calls so tests can prove none is repeated."""

    calls = 0

    def __init__(self, settings: object = None) -> None:
        """Built as every backend is, from its role's settings, which an echo needs none of."""

    async def complete(self, request: LlmRequest) -> LlmResponse:
        type(self).calls += 1
        text = request.messages[-1].content
        return LlmResponse(content=f"echo {text}", usage=Usage(prompt_tokens=len(text.split()), completion_tokens=2))

    async def aclose(self) -> None:
        return None


class SlowCountingBackend(EchoBackend):
    """Echo with a model-like delay; appends one line per real call to $FAULTLINE_TEST_CALL_LOG."""

    delay_s = 0.02

    async def complete(self, request: LlmRequest) -> LlmResponse:
        import os

        import anyio

        await anyio.sleep(self.delay_s)
        log = os.environ.get("FAULTLINE_TEST_CALL_LOG")
        if log:
            with open(log, "a") as f:
                f.write(request.messages[-1].content + "\n")
        return await super().complete(request)
