"""Handle one input: the determinism contract in one place.

Every path that runs an agent's handler (a live worker, a worker rebuilding an
instance after a crash, exact replay, a fork) goes through `Handling`, so they
share one error policy and one idea of what a handled input leaves behind:

- a `NonDeterminismError` (a recorded call that differs, one the journal
  lacks where nothing may run live, or one it holds that a handler run again
  with recordings no longer makes) propagates: the caller reports it;
- any other exception, a handler timeout included, becomes the failure events
  of `failure_envelopes`: the episode fails, the worker goes on;
- a handler that emits nothing leaves a `NoOutput` marker, so the journal
  always shows which inputs were handled (a live worker may publish only the
  last of a run of markers, see `runtime._worker`: handling is in order, so
  any later evidence covers the earlier inputs).
"""

from __future__ import annotations

import asyncio
import logging
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any

import anyio

from faultline._errors import HandlerTimeoutError, NonDeterminismError
from faultline.core._agent import Agent
from faultline.core._context import Context, Recipients, Recorder, Services, failure_envelopes
from faultline.core._loops import NO_LOOP, LoopNeeded, OfflineLoop
from faultline.core._messages import Envelope, NoOutput, derive_id, handling_id

log = logging.getLogger(__name__)

DEFAULT_HANDLER_TIMEOUT_S = 300.0
"""How long a handler may run where no configuration says otherwise (`[runtime] handler_timeout_s` is 0, or a fork
or an attribution is run without a configuration): a handler that waits forever fails its episode, never hangs it."""


def _first(group: BaseExceptionGroup[NonDeterminismError]) -> NonDeterminismError:
    """The first exception of `group`, however deeply its task groups nest."""
    first = group.exceptions[0]
    return first if isinstance(first, NonDeterminismError) else _first(first)


def no_output_marker(agent: str, message: Envelope) -> Envelope:
    """The evidence that `agent` handled `message` and emitted nothing."""
    return Envelope(
        id=derive_id(handling_id(message, agent), 0, "q"),
        episode=message.episode,
        sender=agent,
        body=NoOutput(),
        causation=message.id,
        hops=message.hops + 1,
        ts=time.time(),
    )


class Handling:
    """One input through one agent instance, with its calls served or made by `recorder`."""

    def __init__(
        self,
        agent: Agent,
        name: str,
        message: Envelope,
        recorder: Recorder,
        *,
        services: Services | None = None,
        settings: Mapping[str, Any] | None = None,
        recipients: Recipients | None = None,
    ) -> None:
        self.agent = agent
        self.name = name
        self.message = message
        self.recorder = recorder
        self.ctx = Context(
            agent=name, message=message, recorder=recorder, services=services, settings=settings, recipients=recipients
        )

    async def run(self, timeout_s: float = DEFAULT_HANDLER_TIMEOUT_S) -> list[Envelope]:
        """Run the handler on the event loop; return what it leaves behind, in publishing order.

        A handler past `timeout_s` is cancelled and fails with a `HandlerTimeoutError`
        that names the model call it was waiting on, if any. On a loop a handler's concurrent
        branches may begin their calls in another order than they did live, so each recorded
        call is served to the call of its own request (`Recorder.any_order`): every path that
        runs handlers on a loop (a worker, its rebuild after a restart, replay, a fork) serves alike.
        """
        self.recorder.any_order = True
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + timeout_s) as scope:
                await self.agent.on_message(self.message, self.ctx)
            if scope.cancelled_caught:
                raise HandlerTimeoutError(self._timed_out(timeout_s))
        except NonDeterminismError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failing handler fails its episode, never the caller
            if isinstance(exc, ExceptionGroup) and (group := exc.subgroup(NonDeterminismError)) is not None:
                raise _first(group) from exc  # a call of one of the handler's own tasks differs
            log.warning(
                "handler failed on %s %s: %s: %s",
                self.message.kind,
                self.message.id,
                type(exc).__name__,
                exc,
                extra={"episode": self.message.episode, "agent": self.name},
            )
            return failure_envelopes(self.name, self.message, exc)
        self._check_served()
        return self._outputs()

    def _check_served(self) -> None:
        """Raise a `NonDeterminismError` where a handler that may call live (a worker handling an input again after
        a crash, a fork) left a recording unserved: served by request (`Recorder._recording`), a call whose
        request changed is made live, and only its recording left over tells of the change."""
        if self.recorder.services is None:
            return  # replay reports what is left over itself, with the call it expected
        missing = self.recorder.unserved()
        if missing is not None:
            raise NonDeterminismError(
                f"agent {self.name!r} handling {self.message.kind} {self.message.id}: the journal holds call"
                f" #{missing.index} {missing.call}() that the code no longer makes"
            )

    @staticmethod
    @contextmanager
    def by_hand() -> Iterator[None]:
        """Where handlers run by hand (`run_served`): a handler that began calls for tasks of its own, which only a
        loop runs, leaves them unawaited, and runs again on a loop. Entered once for many handlers: the warnings
        filters are the process's, and changing them for each handler cost replay about a tenth of its time."""
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "coroutine .* was never awaited", RuntimeWarning)
            yield

    def run_served(self) -> list[Envelope] | None:
        """Run a handler whose every call is served from memory, without an event loop; None where that
        cannot decide, and the handler must run on one (`run`) from a fresh instance instead.

        Under exact replay no awaited call suspends, so driving the coroutine by hand
        is exact and several times faster than a loop round trip per await. A handler
        that suspends, or reaches for the loop (`asyncio.gather`, a task group, a sleep),
        runs its own tasks: only a loop runs them as live. A handler that fails here
        runs there too, so that its failure is the one it had live, not the loop's absence.
        The calls it had begun for tasks of its own are dropped unawaited here (Python warns of
        each: `by_hand` silences that).
        """
        coro = self.agent.on_message(self.message, self.ctx)
        running = asyncio.events._get_running_loop()
        asyncio.events._set_running_loop(NO_LOOP)  # type: ignore[arg-type]
        try:
            coro.send(None)
        except StopIteration:
            return self._outputs()
        except NonDeterminismError:
            raise
        except (Exception, LoopNeeded):  # noqa: BLE001 - a failure, or the loop reached for: decided on a loop
            return None
        else:
            # Given up: cleanup of its own that awaits (the loop, or again) is undecided here too, not replay's error.
            with suppress(Exception, LoopNeeded):
                coro.close()
        finally:
            asyncio.events._set_running_loop(running)
        return None

    def run_offline(self, timeout_s: float) -> list[Envelope]:
        """`run` on an event loop of its own that reaches nothing outside (`OfflineLoop`), for a handler whose every
        call is served: one that connects, looks up a name, starts a process or waits on a file descriptor by
        itself would do it again under replay, so it is a `NonDeterminismError` instead, whether or not the
        handler caught the refusal. Blocking calls (`requests`, a socket used synchronously) never reach the loop,
        and are out of its reach."""
        loop = OfflineLoop()
        try:
            return anyio.run(self._sealed_run, loop, timeout_s, backend_options={"loop_factory": lambda: loop})
        finally:
            loop.close()

    async def _sealed_run(self, loop: OfflineLoop, timeout_s: float) -> list[Envelope]:
        try:
            return await self.run(timeout_s)
        finally:
            if loop.refused:
                raise NonDeterminismError(
                    f"agent {self.name!r} handling {self.message.kind} {self.message.id} did I/O outside ctx"
                    f" ({loop.refused}): replay runs nothing live, so a handler reaches outside only through its"
                    " ctx calls (ctx.request, ctx.llm)",
                    got={"io": loop.refused},
                ) from None

    def _timed_out(self, timeout_s: float) -> str:
        text = f"the handler ran past its time limit of {timeout_s:g}s"
        if not self.ctx.model_calls:
            return text
        call, *others = self.ctx.model_calls
        more = f" and {len(others)} more" if others else ""
        return f"{text}, waiting for its model call (role {call.role}, attempt {call.attempt}){more}"

    def _outputs(self) -> list[Envelope]:
        return self.ctx.outputs or [no_output_marker(self.name, self.message)]
