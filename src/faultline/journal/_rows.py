"""A journal row, its digest, and the hash chain that links each row to the one before.

body digest = digest(the body as stored) from schema 3, digest(the body as received) before
row digest = digest(msgpack[the digested columns of `_schema.MESSAGE_COLUMNS`, pos ... body_digest])
chain_i    = digest(chain_{i-1} || row digest_i), chain_0 = GENESIS (hex text, concatenated)

The body as stored differs from the body as received only for a model request stored
content-addressed (`_requests`), whose blobs are checked against their own keys.

These definitions are part of the file format: changing one breaks every journal
written before, so they change only with a new schema version.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import msgspec

from faultline._errors import JournalError
from faultline.core import Envelope, MessageBody, decode_body, digest, encode
from faultline.journal._facts import FACT_KINDS, facts_of
from faultline.journal._requests import BlobWriter, is_compact

GENESIS = "0" * 32
"""The chain value before the first row."""

SealedRow = tuple[Any, ...]
"""One row's values in `_schema.COLUMNS` order, ready for INSERT; read them at the `_schema` positions."""


class Incoming(msgspec.Struct, frozen=True):
    """What the writer appends: a message and where the stream held it (`stream_seq` 0: not from a stream).

    With `body`, the bytes as received, the journal keeps exactly what was on the wire,
    fields this version does not know included; without it the body is encoded here.
    """

    stream: str
    stream_seq: int
    subject: str
    envelope: Envelope
    body: bytes | None = None


class JournalRow(msgspec.Struct, frozen=True):
    """One stored message, exactly as the journal holds it; the body stays encoded until asked.

    The fields are `_schema.ROW_COLUMNS`, in order (a test keeps them so). `body` is the
    body as received, unless the reader was asked for stored requests (`_requests`): then
    an `llm` recording's body is its stored form, and its request lists hold item keys.
    """

    pos: int
    stream: str
    stream_seq: int
    subject: str
    id: str
    episode: str
    sender: str
    recipient: str
    topic: str
    kind: str
    causation: str
    hops: int
    ts: float
    body_digest: str
    body: bytes
    digest: str
    chain: str

    def decoded_body(self) -> MessageBody:
        """The body struct; raises DecodeError for a kind this version does not know."""
        return decode_body(self.body[1:] if is_compact(self.body) else self.body)

    def envelope(self) -> Envelope:
        """The envelope as it travelled, rebuilt from the columns and the body."""
        return Envelope(
            id=self.id,
            episode=self.episode,
            sender=self.sender,
            body=self.decoded_body(),
            recipient=self.recipient,
            topic=self.topic,
            causation=self.causation,
            hops=self.hops,
            ts=self.ts,
        )


_pack = msgspec.msgpack.Encoder(order="deterministic").encode
_kinds: dict[type, str] = {}


def _kind(body_type: type) -> str:
    kind = _kinds.get(body_type)
    if kind is None:
        kind = _kinds[body_type] = body_type.__struct_config__.tag  # type: ignore[attr-defined]
    return kind


def row_digest(key: Sequence[object]) -> str:
    """Digest of the digested columns, `COLUMNS[:DIGESTED]` (pos ... body_digest)."""
    return digest(encode(tuple(key)))


def chain_next(previous: str, row_digest_hex: str) -> str:
    return digest((previous + row_digest_hex).encode("ascii"))


def seal(
    batch: Sequence[Incoming],
    last_pos: int,
    last_chain: str,
    blobs: BlobWriter | None = None,
    *,
    digest_stored: bool = False,
) -> list[SealedRow]:
    """Give each incoming message its position, digests and chain value, continuing the tail.

    The hot path of the writer: one body encoding and three digests per row, nothing else.
    The digests are `faultline.bus.digest` and `encode` inlined (a test keeps them equal).
    With `blobs`, model requests are stored content-addressed and their blobs added to its
    batch; `digest_stored` (schema 3 on) makes the body digest that of the body as stored.
    """
    sealed: list[SealedRow] = []
    add = sealed.append
    pack = _pack
    blake2b = hashlib.blake2b
    pos = last_pos
    chain = last_chain
    for item in batch:
        env = item.envelope
        body = env.body
        data = item.body
        if data is None:
            data = pack(body)
        elif is_compact(data):
            raise JournalError("a body in its stored form was given to the writer: read rows expanded to copy them")
        kind = _kind(type(body))
        stored = blobs.compact(data) if blobs is not None and kind == "recording" else None
        body_hex = blake2b(stored if stored and digest_stored else data, digest_size=16).hexdigest()
        pos += 1
        key = (  # the digested columns, in table order (a test keeps them so)
            pos,
            item.stream,
            item.stream_seq,
            item.subject,
            env.id,
            env.episode,
            env.sender,
            env.recipient,
            env.topic,
            kind,
            env.causation,
            int(env.hops),
            float(env.ts),
            body_hex,
        )
        row_hex = blake2b(pack(key), digest_size=16).hexdigest()
        chain = blake2b((chain + row_hex).encode("ascii"), digest_size=16).hexdigest()
        facts = facts_of(body, data) if kind in FACT_KINDS else None
        add((*key, stored or data, row_hex, chain, facts))
    return sealed
