"""Requests on core NATS: one subscriber's answer, or every subscriber's that comes within a window.

Nothing here is stored: a request and its answers reach only whoever listens at that moment.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import anyio
import nats.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import api

from faultline._errors import BusError, NoResponderError, ReplyTimeoutError
from faultline.bus._messaging import nats_failure


class Requests:
    """A connection's requests (`Bus.request`, `Bus.request_all`), and the one subscription that takes every
    answer of `request_all`."""

    def __init__(self, nc: NatsClient) -> None:
        self._nc = nc
        self._questions = itertools.count()
        self._asking: dict[str, Callable[[Msg], None]] = {}
        """The questions of `request_all` waiting for answers, by the last token of their reply subject."""
        self._answers: str = ""
        """The inbox prefix under which one subscription takes every `request_all` answer ("" until the first)."""

    async def request(self, subject: str, payload: bytes, timeout_s: float) -> bytes:
        try:
            reply = await self._nc.request(subject, payload, timeout=timeout_s)
        except nats.errors.NoRespondersError:
            raise NoResponderError(
                f"nobody answers requests on {subject}: start the process that serves it, then ask again"
            ) from None
        except nats.errors.TimeoutError:
            raise ReplyTimeoutError(
                f"no answer on {subject} within {timeout_s:g}s: the process that serves it is busy or stuck"
                " (see its log), or give it more time"
            ) from None
        except nats.errors.Error as exc:
            raise BusError(f"request on {subject} failed: {exc or type(exc).__name__}") from None
        return bytes(reply.data)

    async def request_all(
        self, subject: str, payload: bytes, window_s: float, enough: Callable[[list[bytes]], bool] | None
    ) -> list[bytes]:
        answers: list[bytes] = []
        done = anyio.Event()

        def collect(msg: Msg) -> None:
            if msg.headers and msg.headers.get(api.Header.STATUS) == api.StatusCode.SERVICE_UNAVAILABLE:
                done.set()  # the server's "no responders" notice
                return
            answers.append(msg.data)
            if enough is not None and enough(answers):
                done.set()

        token = str(next(self._questions))
        with nats_failure(f"asking on {subject}"):
            self._asking[token] = collect
            try:
                await self._nc.publish(subject, payload, reply=f"{await self._answer_inbox()}.{token}")
                with anyio.move_on_after(window_s):  # no count to wait for: whoever answers in time is counted
                    await done.wait()
            finally:
                del self._asking[token]
        return answers

    async def _answer_inbox(self) -> str:
        """The inbox prefix of `request_all`'s answers, subscribed once: a subscription per question
        would cost every question two more round trips to the server."""
        if not self._answers:
            prefix = self._nc.new_inbox()

            async def deliver(msg: Msg) -> None:
                collect = self._asking.get(msg.subject.rsplit(".", 1)[-1])
                if collect is not None:  # an answer after its question's window: nobody waits for it
                    collect(msg)

            await self._nc.subscribe(f"{prefix}.*", cb=deliver)
            self._answers = prefix
        return self._answers
