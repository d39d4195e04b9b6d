"""The event loops a handler is replayed on, where every call it makes is served from the journal.

None at all, first (`NO_LOOP`): a handler driven by hand that reaches for the loop is given up at once and run
again on a loop. Then one without the outside world (`OfflineLoop`): sleeps and the handler's own tasks run as on
any loop, and what would reach outside is refused, so that replay never does a handler's own I/O again.
"""

from __future__ import annotations

import asyncio
import selectors
from typing import TYPE_CHECKING, Any

from faultline._errors import NonDeterminismError

if TYPE_CHECKING:
    from _typeshed import FileDescriptorLike


class _NoLoop:
    """The running loop while a handler is driven by hand: whatever reaches for the loop fails at once, instead
    of scheduling tasks on a loop of the caller's that would run them after the handler was given up."""

    def __getattr__(self, name: str) -> Any:
        raise LoopNeeded(name)


class LoopNeeded(BaseException):
    """A handler driven by hand reached for the event loop (a BaseException: its own `except Exception` stays out)."""


NO_LOOP = _NoLoop()


class OutsideWorld(NonDeterminismError):
    """What a handler on an `OfflineLoop` gets where it reaches outside: an error it is unlikely to catch (no
    `OSError`, which network code retries), turned into one that names the handler once it is over."""


class SealedSelector(selectors.DefaultSelector):
    """A selector that, once sealed, registers no file descriptor: nothing a loop would wait on is opened."""

    def __init__(self) -> None:
        super().__init__()
        self.sealed = False
        self.refused = ""

    def refuse(self, what: str) -> None:
        self.refused = self.refused or what
        raise OutsideWorld(what)

    def register(self, fileobj: FileDescriptorLike, events: int, data: Any = None) -> selectors.SelectorKey:
        if self.sealed:
            self.refuse(f"waiting on file descriptor {fileobj if isinstance(fileobj, int) else fileobj.fileno()}")
        return super().register(fileobj, events, data)


class OfflineLoop(asyncio.SelectorEventLoop):
    """An event loop without the outside world, for a handler whose every call is served from the journal.

    Sleeps, futures and the handler's own tasks run as on any loop; what would reach outside is refused before it
    starts (a connection, a name lookup, a process, a datagram endpoint) or, for anything else that waits on a file
    descriptor (a socket, a pipe), as it is registered. The first refusal is remembered, so a handler that catches
    the error is caught all the same (`Handling.run_offline`).
    """

    def __init__(self) -> None:
        self.sealed = SealedSelector()
        super().__init__(self.sealed)
        self.sealed.sealed = True  # after the loop's own wake-up pipe

    @property
    def refused(self) -> str:
        return self.sealed.refused

    async def getaddrinfo(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        self.sealed.refuse(f"a name lookup of {host}:{port}")

    async def getnameinfo(self, sockaddr: Any, flags: int = 0) -> Any:
        self.sealed.refuse(f"a name lookup of {sockaddr}")

    async def sock_connect(self, sock: Any, address: Any) -> None:
        self.sealed.refuse(f"a connection to {address}")

    async def create_datagram_endpoint(self, protocol_factory: Any, *args: Any, **kwargs: Any) -> Any:
        self.sealed.refuse("a datagram endpoint")

    async def subprocess_exec(self, protocol_factory: Any, program: Any, *args: Any, **kwargs: Any) -> Any:
        self.sealed.refuse(f"a process {program}")

    async def subprocess_shell(self, protocol_factory: Any, cmd: Any, **kwargs: Any) -> Any:
        self.sealed.refuse(f"a process {cmd}")
