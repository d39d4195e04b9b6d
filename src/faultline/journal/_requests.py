"""Model requests stored content-addressed, so a journal grows linearly with the turns.

Every model call is journaled with its request, and a chat request repeats the whole
conversation so far: stored as received, requests grow with the square of the turns.
From schema version 2 the writer stores each message and each tool schema of an `llm`
recording once, in the `blobs` table under the digest of its bytes, and each list as a
list blob: the key of a list stored before that is its prefix (the conversation up to
the previous call, usually) and the keys of the items after it. A list's key is a
digest chained over its item keys, so equal lists have equal keys wherever they occur.
The row's body is the recording with each list replaced by its key, after a first byte
that msgpack never uses (`MARK`).

Expanding a stored body rebuilds the body as received, byte for byte. A body is stored
this way only when encoding what was decoded from it gives its bytes back (true for
everything Faultline encodes); any other body is stored as received.

How `verify` checks it depends on the schema version. In version 2 the row's
`body_digest` is that of the received body, so every stored request is expanded to be
hashed: the cost grows with the conversation, at every call. From version 3 it is that
of the stored body, so the chain covers what is stored, and each blob is checked once
against its own key (`BlobCheck`): a content address is its own checksum.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from faultline._errors import JournalError

MARK = b"\xc1"
"""First byte of a stored body whose request lists are keys (0xc1 is never used by msgpack)."""

LISTS = ("messages", "tools")
"""The request fields stored one item per blob."""

Blob = tuple[bytes, bytes]
"""(key, data): an item keyed by the digest of its bytes, or a list blob keyed by `list_key`."""

_encode = msgspec.msgpack.Encoder().encode  # keeps map order as decoded, so decode + encode is the identity
_decode = msgspec.msgpack.Decoder().decode
_LIST_PERSON = b"faultline-list"  # separates list keys from item keys


def item_key(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def list_key(previous: bytes, item: bytes) -> bytes:
    """The key of a list, chained over its item keys: key(items + [item]) = list_key(key(items), item)."""
    return hashlib.blake2b(previous + item, digest_size=16, person=_LIST_PERSON).digest()


def is_compact(stored: bytes) -> bool:
    return stored[:1] == MARK


class BlobWriter:
    """What the writer knows is stored: the keys it wrote lately, and those of the batch being written.

    Only a list known to be stored serves as another's prefix. A batch that fails is
    forgotten when the next one starts; a cleared memory costs only longer list blobs.
    """

    def __init__(self, *, remember: int = 65536) -> None:
        self._stored: set[bytes] = set()
        self._batch: dict[bytes, bytes] = {}
        self._remember = remember

    def start_batch(self) -> None:
        self._batch = {}

    def known(self, key: bytes) -> bool:
        return key in self._stored or key in self._batch

    def add(self, key: bytes, data: bytes) -> None:
        if key not in self._stored:
            self._batch.setdefault(key, data)

    def batch(self) -> list[Blob]:
        """The blobs of this batch that this writer has not stored lately, each once."""
        return list(self._batch.items())

    def committed(self) -> None:
        if len(self._stored) > self._remember:
            self._stored.clear()
        self._stored.update(self._batch)
        self._batch = {}

    def compact(self, data: bytes) -> bytes | None:
        """The stored form of a received `llm` recording, its blobs added to the batch; None: store `data` as is."""
        body = _decode(data)
        request = body.get("request") if isinstance(body, dict) and body.get("call") == "llm" else None
        if not isinstance(request, dict):
            return None
        lists = {name: items for name in LISTS if isinstance(items := request.get(name), list) and items}
        if not lists or _encode(body) != data:
            return None
        for name, items in lists.items():
            request[name] = self._store_list(items)
        return MARK + _encode(body)

    def _store_list(self, items: list[Any]) -> bytes:
        keys: list[bytes] = []
        heads: list[bytes] = []
        head = b""
        for item in items:
            raw = _encode(item)
            key = item_key(raw)
            self.add(key, raw)
            keys.append(key)
            head = list_key(head, key)
            heads.append(head)
        if not self.known(head):
            start = next((i + 1 for i in range(len(heads) - 2, -1, -1) if self.known(heads[i])), 0)
            self.add(head, _encode([heads[start - 1] if start else None, keys[start:]]))
        return head


class BlobStore:
    """Expands stored bodies for one connection, keeping the blobs and lists it read.

    The same system prompt and tool schemas open every request of a run, and each
    request's list continues the one before, so most lookups never reach SQLite.
    A few expansions (one episode shown) query what they need; a long run of them
    (verify, export, a whole journal read) reads every blob in one scan instead, once
    they fit in `cache_bytes` (blobs are about a tenth of a journal).
    """

    SCAN_AFTER = 32
    """Queries after which reading every blob at once is the cheaper way."""

    def __init__(self, conn: sqlite3.Connection, *, cache_bytes: int = 256 << 20) -> None:
        self._conn = conn
        self._blobs: dict[bytes, bytes] = {}
        self._lists: dict[bytes, list[bytes]] = {}
        self._cache_bytes = cache_bytes
        self._cached_bytes = 0
        self._queries = 0
        self._scanned = False

    def expand(self, stored: bytes, where: str) -> bytes:
        """The received body of a stored one; JournalError naming `where` if it cannot be rebuilt."""
        try:
            body = _decode(stored[1:])
            request = body["request"]
            for name in LISTS:
                if name in request:
                    keys = self._list(request[name])
                    self._need(keys)
                    request[name] = [msgspec.Raw(self._blobs[key]) for key in keys]
            return _encode(body)
        except KeyError as exc:
            key = exc.args[0]
            item = key.hex() if isinstance(key, bytes) else repr(key)
            raise JournalError(f"{where}: request item {item} is missing from blobs (blobs edited)") from None
        except (msgspec.DecodeError, TypeError, ValueError, AttributeError) as exc:
            raise JournalError(f"{where}: stored request does not decode (body or blobs edited: {exc})") from None
        except JournalError as exc:
            raise JournalError(f"{where}: {exc}") from None

    def _list(self, head: bytes) -> list[bytes]:
        """The item keys of the list stored under `head`, following prefixes back to the first."""
        parts: list[list[bytes]] = []
        key: bytes | None = head
        while key is not None and key not in self._lists:
            self._need([key])
            prefix, tail = _decode(self._blobs[key])
            parts.append(tail)
            key = prefix
        keys = list(self._lists[key]) if key is not None else []
        for tail in reversed(parts):
            keys.extend(tail)
        self._lists[head] = keys
        return keys

    def _need(self, keys: list[bytes]) -> None:
        blobs = self._blobs
        missing = [key for key in keys if key not in blobs]
        if not missing:
            return
        if self._cached_bytes > self._cache_bytes:  # start over, never in the middle of fetching what is needed
            blobs.clear()
            self._lists.clear()
            self._cached_bytes = 0
            missing = keys
        self._queries += 1
        if self._queries > self.SCAN_AFTER and not self._scanned:
            self._scanned = True
            if self._query("SELECT coalesce(sum(length(data)), 0) FROM blobs").fetchone()[0] <= self._cache_bytes:
                self._keep(self._query("SELECT key, CAST(data AS BLOB) FROM blobs"))
                return
        missing = list(dict.fromkeys(missing))
        for start in range(0, len(missing), 500):
            chunk = missing[start : start + 500]
            marks = ", ".join("?" * len(chunk))
            self._keep(self._query(f"SELECT key, CAST(data AS BLOB) FROM blobs WHERE key IN ({marks})", chunk))

    def _keep(self, rows: Iterable[tuple[bytes, bytes]]) -> None:
        for key, data in rows:
            self._blobs[key] = data
            self._cached_bytes += len(data)

    def _query(self, sql: str, params: Sequence[bytes] = ()) -> sqlite3.Cursor:
        try:
            return self._conn.execute(sql, params)
        except sqlite3.Error as exc:  # a version 1 journal has no blobs table, so no stored requests either
            raise JournalError(f"cannot read request items ({exc})") from None


class _Lists(msgspec.Struct):
    messages: bytes | None = None
    tools: bytes | None = None


class _Refs(msgspec.Struct):
    """What a stored `llm` recording refers to: the keys of its request lists; every other field is skipped."""

    request: _Lists


_decode_refs = msgspec.msgpack.Decoder(_Refs).decode


class BlobCheck:
    """Checks the blobs that stored bodies refer to against their own keys, each blob once per check.

    An item's key is the digest of its bytes; a list blob's key is `list_key` chained from its
    prefix's key over its item keys. So a blob proves itself without rebuilding a request,
    and a stored body (covered by its body digest, from schema 3) holds when the lists it
    names are stored, each list's prefix too, and every item they name. `every` reads and
    checks every blob in one scan first (a full check, which so also finds an edited blob no
    row refers to); otherwise blobs are fetched as rows reach them (a resumed check).
    """

    def __init__(self, conn: sqlite3.Connection, *, every: bool) -> None:
        self._store = BlobStore(conn)
        self._items: set[bytes] = set()
        self._lists: dict[bytes, tuple[bytes | None, list[bytes]]] = {}
        self._bad: dict[bytes, None] = {}
        self._sound: set[bytes] = set()
        self._reported: set[bytes] = set()
        self._complete = every
        if every:
            for key, data in self._store._query("SELECT key, CAST(data AS BLOB) FROM blobs"):
                self._classify(key, data)

    def row_problem(self, stored: bytes) -> str:
        """Why the blobs a stored body refers to do not hold, or ""."""
        try:
            lists = _decode_refs(stored[1:]).request
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return f"stored request does not decode ({exc})"
        for head in (lists.messages, lists.tools):
            if head is not None:
                problem = self._list_problem(head)
                if problem:
                    return problem
        return ""

    def unreached_problem(self) -> str:
        """A blob that does not match its key and that no checked row reported, or ""."""
        for key in self._bad:
            if key not in self._reported:
                return f"blob {key.hex()} does not match its key (blobs edited)"
        return ""

    def _list_problem(self, head: bytes) -> str:
        walked: list[bytes] = []
        key: bytes | None = head
        while key is not None and key not in self._sound:
            self._fetch([key])
            if key not in self._lists:
                return self._absent(key, "request list")
            prefix, tail = self._lists[key]
            self._fetch(tail)
            for item in tail:
                if item not in self._items:
                    return self._absent(item, "request item")
            walked.append(key)
            key = prefix
        self._sound.update(walked)
        return ""

    def _absent(self, key: bytes, what: str) -> str:
        if key in self._bad:
            self._reported.add(key)
            return f"{what} {key.hex()} does not match its key (blobs edited)"
        return f"{what} {key.hex()} is missing from blobs (blobs edited)"

    def _fetch(self, keys: list[bytes]) -> None:
        if self._complete:
            return
        new = [key for key in keys if key not in self._items and key not in self._lists and key not in self._bad]
        if new:
            self._store._need(new)
            for key in new:
                data = self._store._blobs.get(key)
                if data is not None:
                    self._classify(key, data)

    def _classify(self, key: bytes, data: bytes) -> None:
        """File a blob as an item or a list when its key is the digest it should be, else as bad."""
        if item_key(data) == key:
            self._items.add(key)
            return
        try:
            prefix, tail = _decode(data)
            chained = prefix if prefix is not None else b""
            for item in tail:
                chained = list_key(chained, item)
        except (msgspec.DecodeError, TypeError, ValueError):
            self._bad[key] = None
            return
        if tail and chained == key:  # an empty tail would name its own prefix
            self._lists[key] = (prefix, tail)
        else:
            self._bad[key] = None


INSERT_BLOB = "INSERT OR IGNORE INTO blobs (key, data) VALUES (?, ?)"
