"""Tells: notices that name who sent them.

Core NATS tells a receiver nothing of who published a message, and whoever may
answer a question may answer it in any name. A tell goes on
`<prefix>.svc.<service>.<teller>.<what>` (`Subjects.tell`), the teller being the
sender's NATS user, and the server lets each user tell only under its own name
(`_access`): a receiver takes the teller from the subject, which no body can
change. A worker's word that it took a fault rule in, or what it runs, is so
known to come from its credential.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from faultline.bus._messaging import Message, Subscription
from faultline.bus._transport import Bus

OPEN_TELLER = "open"
"""The teller of a connection with no credential: on a server without users anyone may tell in any name, as
anyone may publish anything there."""


def teller(bus: Bus) -> str:
    """The name `bus` tells under: its NATS user."""
    return bus.user or OPEN_TELLER


async def tell(bus: Bus, service: str, what: str, data: bytes) -> None:
    """Tell whoever listens now `what` this connection did for `service`, under its own name."""
    await bus.notify(bus.subjects.tell(service, teller(bus), what), data)


async def hear(bus: Bus, service: str, what: str, handler: Callable[[str, Message], Awaitable[None]]) -> Subscription:
    """Hand every tell of `what` for `service` from now on to `handler`, with its teller."""

    async def take(msg: Message) -> None:
        await handler(msg.subject.split(".")[-2], msg)

    return await bus.subscribe(bus.subjects.tell(service, "*", what), take)
