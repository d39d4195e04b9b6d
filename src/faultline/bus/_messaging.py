"""Core NATS beside the stream: messages for whoever listens now, never stored.

Requests and their answers, readiness announcements and state notices travel
this way. The types here are ours, so no caller outside `bus/` sees the NATS
client; its errors become BusError through `nats_failure`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

import msgspec
import nats.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription as NatsSubscription

from faultline._errors import BusError

T = TypeVar("T")

log = logging.getLogger(__name__)


@contextmanager
def nats_failure(what: str) -> Iterator[None]:
    """Turn an error of the NATS client into BusError saying `what` failed."""
    try:
        yield
    except nats.errors.Error as exc:
        raise BusError(f"{what} failed: {exc or type(exc).__name__}") from None


def decode_notice(data: bytes, type: type[T], *, subject: str = "") -> T | None:
    """JSON `data` on core NATS (a notice, a question or an answer) as `type`; None, logged, for what is not one.

    Anyone who may publish on a subject can send anything there, nested as deep as they like (RecursionError):
    a handler that raised on it would leave its asker waiting for a timeout.
    """
    try:
        return msgspec.json.decode(data, type=type)
    except (msgspec.DecodeError, RecursionError) as exc:
        log.warning("ignoring a message on %s that is not a %s: %s", subject or "core NATS", type.__name__, exc)
        return None


@dataclass(frozen=True, slots=True)
class Message:
    """One message received on core NATS; `reply` is where its sender waits for an answer ("" if nowhere)."""

    subject: str
    data: bytes
    reply: str
    _client: NatsClient = field(repr=False, compare=False)

    @classmethod
    def _of(cls, msg: Msg, client: NatsClient) -> Message:
        return cls(msg.subject, msg.data, msg.reply, client)

    async def respond(self, data: bytes) -> None:
        """Answer the sender, where one waits (a notice, or anyone's message sent with no reply subject, asks for
        no answer: nothing is sent); BusError if the connection is gone."""
        if not self.reply:
            log.debug("the message on %s asks for no answer; none sent", self.subject)
            return
        with nats_failure(f"answering the message on {self.subject}"):
            await self._client.publish(self.reply, data)


class Subscription:
    """Interest in a subject until `unsubscribe()`; subscribed without a handler, iterate it for the messages."""

    def __init__(self, subscription: NatsSubscription, client: NatsClient) -> None:
        self._subscription = subscription
        self._client = client

    async def __aiter__(self) -> AsyncIterator[Message]:
        with nats_failure(f"reading {self._subscription.subject}"):
            async for msg in self._subscription.messages:
                yield Message._of(msg, self._client)

    async def unsubscribe(self) -> None:
        """Stop receiving. Safe to call twice, and after the connection closed (no interest is left then)."""
        try:
            await self._subscription.unsubscribe()
        except (
            nats.errors.BadSubscriptionError,
            nats.errors.ConnectionClosedError,
            nats.errors.ConnectionDrainingError,
        ):
            pass
        except nats.errors.Error as exc:
            raise BusError(f"unsubscribing from {self._subscription.subject} failed: {exc}") from None
