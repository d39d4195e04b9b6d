"""Bytes on the NATS wire as any program can write them: for the tests of what no client library would send.

nats-py encodes every subject it is given as UTF-8 and writes headers of its own making, so what a publisher
can put in a subject, a reply subject or a header block beyond that is written here, over a plain socket.
"""

from __future__ import annotations

import json
import re
from urllib.parse import urlsplit

import anyio
from anyio.abc import ByteStream

from faultline.bus import Credential

TIMEOUT_S = 10.0
_PUB_ACK = re.compile(rb"MSG \S+ 1 (\d+)\r\n")


def pub(subject: bytes, data: bytes, reply: bytes = b"") -> bytes:
    """A PUB line and its payload."""
    return b"PUB %s %s%d\r\n%s\r\n" % (subject, reply + b" " if reply else b"", len(data), data)


def hpub(subject: bytes, headers: bytes, data: bytes, reply: bytes = b"") -> bytes:
    """An HPUB line, its header block as given and its payload."""
    spaced = reply + b" " if reply else b""
    return b"HPUB %s %s%d %d\r\n%s%s\r\n" % (subject, spaced, len(headers), len(headers) + len(data), headers, data)


async def send(url: str, operation: bytes, credential: Credential | None = None) -> None:
    """Send `operation` to the server at `url` and return once the server has read it (its PONG came back)."""
    async with await _connected(url, credential) as stream:
        await stream.send(operation + b"PING\r\n")
        await _read_until(stream, re.compile(rb"PONG\r\n"))


async def publish_stored(url: str, operation: bytes, inbox: bytes, credential: Credential | None = None) -> int:
    """Send `operation`, a publish whose reply subject is `inbox`, and return the stream sequence JetStream stored
    it at (its answer, on `inbox`)."""
    async with await _connected(url, credential) as stream:
        await stream.send(b"SUB %s 1\r\n%s" % (inbox, operation))
        answer = await _read_until(stream, _PUB_ACK)
        size = int(answer.group(1))
        rest = answer.string[answer.end() :]
        while len(rest) < size:
            rest += await stream.receive()
        return int(json.loads(rest[:size])["seq"])


async def _connected(url: str, credential: Credential | None) -> ByteStream:
    parts = urlsplit(url)
    stream = await anyio.connect_tcp(parts.hostname or "127.0.0.1", parts.port or 4222)
    login = {"user": credential.user, "pass": credential.password} if credential else {}
    await _read_until(stream, re.compile(rb"INFO [^\r\n]*\r\n"))
    connect = {"verbose": False, "pedantic": False, "headers": True, **login}
    await stream.send(b"CONNECT %s\r\n" % json.dumps(connect).encode())
    return stream


async def _read_until(stream: ByteStream, pattern: re.Pattern[bytes]) -> re.Match[bytes]:
    """Read until `pattern` is found in what came; an `-ERR` from the server fails the test."""
    received = b""
    with anyio.fail_after(TIMEOUT_S):
        while True:
            received += await stream.receive()
            if found := pattern.search(received):
                return found
            assert b"-ERR" not in received, received
