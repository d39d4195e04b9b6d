"""The NATS client of every connection: nats-py's, made to read whatever a publisher can put on the wire.

nats-server passes on a subject or reply subject as its publisher wrote it, any byte but a space, a tab and a
line end, and a header block as it came. nats-py reads them strictly, while it reads the connection: a subject
that is not UTF-8, one with a vertical tab or a form feed in it (which its parser takes for a separator), or a
header block that does not begin `NATS/1.0` stopped its reading for good or had it reconnect. One such message
from any credential left a process deaf while it seemed to run, and a JetStream consumer delivered the same
message again after every reconnect. Here such a message arrives like any other, its subject readable (what
could not be read is U+FFFD), so the receiver refuses and dead-letters it; a reply subject that cannot be read
asks for no answer, and a header block that cannot be read is no headers.
"""

from __future__ import annotations

import re
from typing import Any

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import ProtocolError
from nats.protocol.parser import AWAITING_CONTROL_LINE, Parser

_MESSAGE_LINES = (b"MSG ", b"HMSG ")
_LINE_END = b"\r\n"
_UNREADABLE = "\N{REPLACEMENT CHARACTER}".encode()
_NOT_SEPARATORS = re.compile(rb"[\x0b\x0c]")
"""The bytes nats-py's parser splits a message line on that nats-server leaves inside a subject."""


class Client(NatsClient):
    """nats-py's client; see the module docstring for what it reads that nats-py alone stopped on."""

    def __init__(self) -> None:
        super().__init__()
        self._ps = _Parser(self)

    def _build_message(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: dict[str, str] | None
    ) -> Msg:
        try:
            return super()._build_message(sid, subject, reply, data, headers)  # type: ignore[no-any-return]
        except UnicodeDecodeError:
            readable = subject.decode(errors="replace").encode()
            return super()._build_message(sid, readable, reply if _is_utf8(reply) else b"", data, headers)  # type: ignore[no-any-return]

    async def _process_headers(self, headers: Any) -> dict[str, str] | None:
        try:
            return await super()._process_headers(headers)
        except (IndexError, UnicodeDecodeError):  # no `NATS/1.0` line, or a status that is not UTF-8
            return None


class _Parser(Parser):
    """nats-py's parser, which reads a message line its own regular expressions cannot once that line's subject
    has its separator-like bytes replaced, and its reply subject, where that has them, left out."""

    async def parse(self, data: bytes = b"") -> None:
        while True:
            try:
                await super().parse(data)
                return
            except ProtocolError:
                if not self._mend_message_line():
                    raise
                data = b""

    def _mend_message_line(self) -> bool:
        """Rewrite the message line the buffer begins with so that the parser reads it; False if there is none
        to rewrite (the error was another)."""
        if self.state != AWAITING_CONTROL_LINE or not self.buf.startswith(_MESSAGE_LINES):
            return False
        end = self.buf.find(_LINE_END)
        if end < 0:
            return False
        tokens = bytes(self.buf[:end]).split(b" ")
        sizes = 2 if tokens[0] == b"HMSG" else 1
        if len(tokens) < 3 + sizes:
            return False
        subject, sid, replies = tokens[1], tokens[2], tokens[3:-sizes]
        replies = [reply for reply in replies if not _NOT_SEPARATORS.search(reply)]
        line = b" ".join([tokens[0], _NOT_SEPARATORS.sub(_UNREADABLE, subject), sid, *replies, *tokens[-sizes:]])
        if line == self.buf[:end]:
            return False
        self.buf[:end] = line
        return True


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True
