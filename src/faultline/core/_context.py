"""The context an agent handler gets: its only door to the outside world.

Outputs (`send`, `publish`, `emit`) are collected and published by the runtime
after the handler returns, with ids derived from the input's id, so a handler
that runs twice (after a crash) publishes nothing new. Nondeterministic calls
(`llm`, `request`, `now`, `random`) go through a `Recorder`: live it executes
the call and hands a `Recording` for `fl.rec` to `store` before returning (a
worker sends it at once and confirms it with the handler's outputs); in replay it
serves the journaled answer after checking that the request digest matches.
"""

from __future__ import annotations

import difflib
import functools
import random as _random
import time
import traceback
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import msgspec

from faultline._errors import FaultlineError, ModelError, NonDeterminismError, UnknownRecipientError
from faultline.core._messages import (
    RUNNER,
    SCORER,
    Body,
    Envelope,
    EpisodeCompleted,
    ErrorRaised,
    Finished,
    Recording,
    derive_id,
    digest,
    encode,
    handling_id,
)
from faultline.core._models import LlmRequest, LlmResponse, ModelAttempt, ModelBackend, ModelCall, ReportsAttempts

DEFAULT_REQUEST_TIMEOUT_S = 10.0


class Services(Protocol):
    """What live calls need from the worker around them; `model_calls` holds the model calls in flight."""

    model_calls: set[ModelCall]

    def backend_for(self, role: str) -> ModelBackend: ...

    async def request(self, service: str, payload: bytes, timeout_s: float) -> bytes: ...


RequestFault = Callable[["Context", int, LlmRequest], Awaitable[LlmRequest]]
"""What the runtime sends for model call #index of a handler instead of the agent's request
(the fault rules in force on the agent's own model requests); the request itself when none applies."""


@dataclass
class Recorder:
    """Serves recorded calls and, when `services` is set, executes and records the rest.

    `recorded` maps call index to the journal's recording for the input being
    handled. With `services` None (exact replay) a call without a recording is a
    divergence; with services (live, or a worker recovering after a crash) it runs.
    `faults` may change a model request that runs live: the recording then holds what
    was sent, and its digest is still that of the agent's request, which replay compares.
    """

    recorded: Mapping[int, Recording] = field(default_factory=dict)
    services: Services | None = None
    store: Callable[[Envelope], Awaitable[None]] | None = None
    made: list[Recording] = field(default_factory=list)
    faults: RequestFault | None = None
    begun: int = 0
    """Calls begun so far: the index of the next one."""
    any_order: bool = False
    """Whether a served call whose index holds another request takes the first unserved recording of its own:
    a handler's concurrent branches begin their later calls in the order their answers came live. Set where a
    handler runs on a loop (`Handling.run`); driven by hand (`Handling.run_served`) a handler has no branches."""

    def begin(self) -> int:
        """The index of a call, taken as it begins: calls a handler makes concurrently (`asyncio.gather`, a task
        group) each get their own, in the order they were made, where counting the calls made so far gave every
        one of them the same index, and the same recording id, so the stream kept only the first to answer."""
        index = self.begun
        self.begun += 1
        return index

    async def faulted(self, ctx: Context, index: int, request: LlmRequest) -> LlmRequest:
        """What call #`index` sends: `request` unless it runs live and a fault rule changes it. Whether it runs
        live is whether a recording serves it, not whether one holds its index: handled again after a crash, a
        concurrent branch's call may begin under an index that another's recording holds, and runs live."""
        if self.faults is None or self.services is None:
            return request
        if self._recording(index, "llm", digest(encode(request))) is not None:
            return request
        return await self.faults(ctx, index, request)

    async def call(
        self,
        ctx: Context,
        index: int,
        call: str,
        request: Any,
        execute: Callable[[], Awaitable[Any]],
        attempts: list[ModelAttempt] | None = None,
        sent: Any = None,
    ) -> Any:
        """Serve or make call #`index` of this handler (`begin`). `request` is digested as it is encoded
        (a Struct in field order), so replay never converts it to plain data. `attempts`
        is filled in by `execute` (a retrying backend) and journaled with the outcome;
        `sent`, what went out instead of `request` (a fault), is recorded in its place."""
        request_digest = digest(encode(request))
        recorded = self._recording(index, call, request_digest)
        if recorded is not None:
            if recorded.call != call or recorded.request_digest != request_digest:
                raise NonDeterminismError(
                    f"agent {ctx.agent!r} handling {ctx.message.kind} {ctx.message.id} made call #{index} "
                    f"{call}() that differs from the journal's {recorded.call}()",
                    got={"call": call, "index": index, "request": msgspec.to_builtins(request)},
                )
            self.made.append(recorded)
            if recorded.error:
                raise _error_from(recorded.error)
            return recorded.response
        if self.services is None:
            raise NonDeterminismError(
                f"agent {ctx.agent!r} handling {ctx.message.kind} {ctx.message.id} made call #{index} "
                f"{call}() that the journal does not hold",
                got={"call": call, "index": index, "request": msgspec.to_builtins(request)},
            )
        if index in self.recorded:  # another request's: a concurrent branch's, recorded before a crash
            index = self._unheld()
        error = ""
        response: Any = None
        try:
            response = await execute()
        except FaultlineError as exc:
            error = f"{type(exc).__name__}: {exc}"
        recording = Recording(
            call=call,  # type: ignore[arg-type]
            index=index,
            request_digest=request_digest,
            request=request if sent is None else sent,
            response=response,
            error=error,
            attempts=list(attempts or ()),
        )
        self.made.append(recording)
        if self.store is not None:
            await self.store(ctx.envelope_for(recording, derive_id(handling_id(ctx.message, ctx.agent), index, "r")))
        if error:
            raise _error_from(error)
        return response

    def _recording(self, index: int, call: str, request_digest: str) -> Recording | None:
        """The recording that serves call #`index`: the one of that index, or with `any_order`, where that one is
        another request's or served already, the first unserved one of this request, if any.

        Where none is and the call may run live (a worker handling an input again after a crash cut its handler
        off), it does: the recording of its index may be that of a concurrent branch that began its call later
        than it did live, and is yet to begin it now. A request the code no longer makes is told by its recording,
        left unserved when the handler returns (`unserved`, `Handling.run`)."""
        recorded = self.recorded.get(index)
        if not self.any_order or not self.recorded:
            return recorded
        served = {made.index for made in self.made}
        if recorded is not None and recorded.index in served:
            recorded = None
        if recorded is not None and (recorded.call, recorded.request_digest) == (call, request_digest):
            return recorded
        same = (
            r
            for r in self.recorded.values()
            if r.index not in served and (r.call, r.request_digest) == (call, request_digest)
        )
        return next(same, recorded if self.services is None else None)

    def _unheld(self) -> int:
        """The index of a call made live where a recording holds the one it began with: the next that no call
        began with and no recording holds, so that its recording's id is its own (the stream would drop it as a
        copy of the other's)."""
        while self.begun in self.recorded:
            self.begun += 1
        return self.begin()

    def unserved(self) -> Recording | None:
        """The first recording, by index, that served no call of the handler: a call it no longer makes."""
        if not self.recorded:
            return None
        served = {made.index for made in self.made}
        return next((self.recorded[i] for i in sorted(self.recorded) if i not in served), None)


@functools.cache
def _reports_attempts(kind: type[ModelBackend]) -> bool:
    """Whether backends of `kind` report their attempts: asked of the class once, since a protocol check
    (about 10 us) on every model call is a measurable share of a worker's time."""
    return issubclass(kind, ReportsAttempts)


def _error_from(text: str) -> FaultlineError:
    kind, _, message = text.partition(": ")
    return ModelError(message) if kind == "ModelError" else FaultlineError(text)


@dataclass(frozen=True, slots=True)
class Recipients:
    """The agents a handler may send direct messages to: those of its system (`SystemRef.recipients`).

    They are a function of the system's code alone. A worker holds the agents of the system of its configuration to
    them, and replay and a fork hold an agent to whom the journal shows its worker held it (`faultline.replay`'s
    `held_to`), so a send to a name outside them fails alike live, in replay and in a fork. `system` names the
    system in the error."""

    system: str
    agents: frozenset[str]

    def allows(self, to: str) -> bool:
        """Whether a send to `to` passes: one of `agents`, or the runner, which is let by, as ever: an agent that
        answers whoever sent it a message answers the runner for a Start, and under a `broadcast` of the entry's
        Start, the runtime's doing, agents that never expected one do; the answer reaches no one, and ends nothing."""
        return to in self.agents or to == RUNNER

    def check(self, to: str) -> None:
        """Raise `UnknownRecipientError` where a send to `to` does not pass (`allows`)."""
        if self.allows(to):
            return
        agents = tuple(sorted(self.agents))
        close = difflib.get_close_matches(to, agents, n=1)
        meant = f": did you mean {close[0]!r}?" if close else ""
        raise UnknownRecipientError(
            f"system {self.system} has no agent {to!r} to send to{meant} (its agents: {', '.join(agents)})",
            recipient=to,
            agents=agents,
            closest=close[0] if close else "",
        )


class Context:
    """What a handler may do: send, publish, emit events, and make recorded calls."""

    def __init__(
        self,
        *,
        agent: str,
        message: Envelope,
        recorder: Recorder,
        services: Services | None = None,
        settings: Mapping[str, Any] | None = None,
        recipients: Recipients | None = None,
    ) -> None:
        self.agent = agent
        self.message = message
        self.settings: Mapping[str, Any] = settings or {}
        self.recipients = recipients
        """Whom `send` may address (None: anyone, as for an agent outside a system of one's own)."""
        self.outputs: list[Envelope] = []
        self.model_calls: list[ModelCall] = []
        """The model calls being made now, in the order they began (for the cause of a handler timeout): a handler's
        concurrent branches may each wait on one."""
        self._recorder = recorder
        self._services = services

    @property
    def episode(self) -> str:
        return self.message.episode

    # -- outputs ------------------------------------------------------------------------------

    def envelope_for(self, body: Body, id: str, *, recipient: str = "", topic: str = "") -> Envelope:
        return Envelope(
            id=id,
            episode=self.episode,
            sender=self.agent,
            recipient=recipient,
            topic=topic,
            body=body,  # type: ignore[arg-type]
            causation=self.message.id,
            hops=self.message.hops + 1,
            ts=time.time(),
        )

    def _output(self, body: Body, *, recipient: str = "", topic: str = "") -> Envelope:
        env = self.envelope_for(
            body, derive_id(handling_id(self.message, self.agent), len(self.outputs)), recipient=recipient, topic=topic
        )
        self.outputs.append(env)
        return env

    def send(self, to: str, body: Body) -> Envelope:
        """A direct message to agent `to` in this episode; `UnknownRecipientError` where the agent's system has no
        agent `to` (a typo): the handler, and its episode, fail at once, naming it and the agents there are."""
        if self.recipients is not None:
            self.recipients.check(to)
        return self._output(body, recipient=to)

    def publish(self, topic: str, body: Body) -> Envelope:
        """A message to every agent subscribed to `topic` in this episode."""
        return self._output(body, topic=topic)

    def finish(self, output: Any) -> Envelope:
        """Finish this episode with `output`: the system's scorer grades it (only from its finishers)."""
        return self._output(Finished(output=output), recipient=SCORER)

    def emit(self, body: Body) -> Envelope:
        """A lifecycle event (episode completed, ...) on its own subject."""
        return self._output(body)

    # -- recorded nondeterminism --------------------------------------------------------------

    async def llm(self, request: LlmRequest) -> LlmResponse:
        """A model call through the backend configured for `request.role`, listed in flight while it runs."""
        call = ModelCall(episode=self.episode, agent=self.agent, role=request.role)
        index = self._recorder.begin()
        sent = await self._recorder.faulted(self, index, request)

        async def execute() -> LlmResponse:
            services = self._services
            assert services is not None
            backend = services.backend_for(request.role)
            services.model_calls.add(call)
            self.model_calls.append(call)  # left in when the handler is cancelled, so its timeout can name the call
            try:
                if _reports_attempts(type(backend)):
                    response = await cast(ReportsAttempts, backend).complete_call(sent, call)
                else:
                    response = await backend.complete(sent)
            except Exception:
                self.model_calls.remove(call)
                raise
            finally:
                services.model_calls.discard(call)
            self.model_calls.remove(call)
            return response

        raw = await self._recorder.call(
            self, index, "llm", request, execute, call.attempts, None if sent is request else sent
        )
        return raw if isinstance(raw, LlmResponse) else msgspec.convert(raw, LlmResponse)

    async def request(self, service: str, body: Any, *, timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S) -> Any:
        """A request/reply call to a service on `fl.svc.<service>`; `body` is plain data."""

        async def execute() -> Any:
            assert self._services is not None
            reply = await self._services.request(service, encode(body), timeout_s)
            return msgspec.msgpack.decode(reply)

        return await self._recorder.call(
            self, self._recorder.begin(), "request", {"service": service, "body": body}, execute
        )

    async def now(self) -> float:
        """Wall-clock time, recorded so that replay sees the same value."""

        async def execute() -> float:
            return time.time()

        return float(await self._recorder.call(self, self._recorder.begin(), "now", None, execute))

    async def random(self) -> float:
        """A float in [0, 1), seeded from (episode, agent, input, call), recorded."""
        index = self._recorder.begin()
        seed = f"{self.episode}/{self.agent}/{self.message.id}/{index}"

        async def execute() -> float:
            return _random.Random(seed).random()

        return float(await self._recorder.call(self, index, "random", None, execute))


def failure_envelopes(agent: str, message: Envelope, exc: BaseException) -> list[Envelope]:
    """What a raising handler leaves behind: an error event naming the cause.

    Live and in replay alike, so a replayed failure compares equal to the journaled one.
    The agent does not complete the episode itself (only the environment and the
    runner may): the runner turns the error into the completion (`error_completion`).
    """
    error = ErrorRaised(
        agent=agent,
        input_id=message.id,
        error_type=type(exc).__name__,
        message=str(exc),
        traceback="".join(traceback.format_exception(exc))[-4000:],
    )
    return [
        Envelope(
            id=derive_id(handling_id(message, agent), 0, "e"),
            episode=message.episode,
            sender=agent,
            body=error,
            causation=message.id,
            hops=message.hops + 1,
            ts=time.time(),
        )
    ]


def failed_by_agent(env: Envelope) -> bool:
    """Whether `env` is the completion a raising handler sent itself, in journals from before `error_completion`.

    Replay serves such a completion as recorded instead of expecting the handler to send it again.
    """
    return (
        isinstance(env.body, EpisodeCompleted)
        and env.body.outcome == "error"
        and bool(env.causation)
        and env.id == derive_id(env.causation, 1, "e")
    )
