"""Export a journal to JSON lines, and rebuild a journal file from them.

The export format, one `ExportedRow` per line in position order:
- every stored column (`pos` ... `ts`, `body_digest`, `digest`, `chain`);
- `body`: the body decoded, for people and tools that read JSON;
- `body_raw`: the body's stored bytes, base64. The journal keeps bodies as they
  came off the wire, and JSON cannot carry every msgpack value (dict key order,
  bytes or non-string keys in untyped fields), so these bytes are what rebuilds
  a row exactly. Exports carry them unless asked not to (`raw=False`);
- `schema`, on the first row of a journal of schema 3 or later: its version, which
  import gives the new journal, since the digests depend on it (`_rows`). An export
  without it comes from a schema 1 or 2 journal, whose digests schema 2 reproduces.

Import takes `body_raw` when present (and refuses a line whose `body` says
something else), re-encodes `body` otherwise, recomputes every digest and the
chain, and refuses the file at the first row that does not match its export.
A file cut between two lines is a shorter valid export: compare the head that
import reports with the source's. Fields are only ever added, with defaults.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TextIO

import msgspec

from faultline._errors import ChainError, DecodeError, JournalError
from faultline.core import Envelope, MessageBody, decode_body
from faultline.journal._head import head_path
from faultline.journal._reader import JournalReader
from faultline.journal._rows import Incoming, JournalRow
from faultline.journal._schema import BODY_DIGEST, CHAIN, DIGEST, POS, SCHEMA_VERSION, STORED_DIGESTS, JournalSettings
from faultline.journal._set import create_set, journal_files, read_manifest, shard_path
from faultline.journal._writer import Journal


class ExportedRow(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One line of an export; see the module docstring for what each field guarantees.

    The fields are `_schema.ROW_COLUMNS` with `body` decoded (and placed before `body_digest`),
    then `body_raw` and `schema` (a test keeps them so).
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
    body: MessageBody
    body_digest: str
    digest: str
    chain: str
    body_raw: bytes | None = None
    schema: int = 0


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(ExportedRow)
_TYPED = '{"type":"row",'
_SUMMARY = '{"type":"summary"'
_SHARD = '{"type":"shard"'


def export_row(row: JournalRow, *, raw: bool = False, schema: int = 0) -> str:
    """One row as a JSON object on one line (no newline); `raw` adds the body bytes as received, as exports do."""
    try:
        body = row.decoded_body()
    except DecodeError as exc:
        raise JournalError(f"row {row.pos}: body does not decode with this version ({exc})") from None
    fields = {**msgspec.structs.asdict(row), "body": body, "body_raw": row.body if raw else None, "schema": schema}
    exported = ExportedRow(**fields)
    return _encoder.encode(exported).decode()


def export_jsonl(
    path: str | Path,
    out: TextIO,
    *,
    raw: bool = True,
    settings: JournalSettings | None = None,
    episodes: Sequence[str] | None = None,
    typed: bool = False,
) -> int:
    """Write every row of the journal at `path` to `out` as JSON lines; return the row count.

    `raw=False` leaves out the stored body bytes: shorter lines, but the export
    imports back only if every body survives JSON unchanged. `episodes` writes only
    their rows, episode by episode: rows to read, which do not import back (the chain
    runs through every row). `typed` writes the shape of every command's `--json`:
    each row with `"type": "row"`, then a summary line; `import_jsonl` reads both.
    A journal set is written shard by shard, each after a `{"type": "shard"}` line,
    and imports back as a set.
    """
    count = 0
    files = journal_files(Path(path))
    cells = len(files) > 1 and read_manifest(Path(path)).cells
    for shard, file in enumerate(files):
        with JournalReader(file, settings) as reader:
            if episodes is not None:
                rows: Iterable[JournalRow] = (
                    row for e in episodes if reader.has_episode(e) for row in reader.episode_rows(e)
                )
            else:
                if len(files) > 1:
                    header = ShardLine(shard=shard, shards=len(files), cells=cells)
                    out.write(_encoder.encode(header).decode() + "\n")
                rows = reader.rows()
            for row in rows:
                schema = reader.version if row.pos == 1 and reader.version >= STORED_DIGESTS else 0
                line = export_row(row, raw=raw, schema=schema)
                out.write(_TYPED + line[1:] if typed else line)
                out.write("\n")
                count += 1
    if typed:
        out.write(_encoder.encode({"type": "summary", "rows": count, "journal": str(path)}).decode() + "\n")
    return count


def import_jsonl(
    lines: Iterable[str | bytes],
    dest: str | Path,
    *,
    batch_rows: int = 5000,
    settings: JournalSettings | None = None,
) -> int:
    """Build a new journal at `dest` from exported JSON lines; return the row count.

    The file (with its head record) appears only when every row matched its exported
    digests and chain value; on any mismatch nothing is left behind and ChainError
    names the row. An export of a journal set builds the set, a shard at a time.
    """
    dest = Path(dest)
    if dest.exists():
        raise JournalError(f"{dest}: already exists; import only creates new journals")
    sections = _sections(lines)
    header, first = next(sections)
    if header is None:
        return _import_file(first, dest, batch_rows, settings)
    partial = dest.with_name(dest.name + ".importing")
    shutil.rmtree(partial, ignore_errors=True)
    count, seen = 0, []
    try:
        create_set(partial, header.shards, cells=header.cells)
        for shard, section in itertools.chain([(header, first)], sections):
            if shard is None or (shard.shards, shard.cells) != (header.shards, header.cells) or shard.shard in seen:
                raise JournalError(f"{dest}: the export's shard lines do not describe one journal set")
            seen.append(shard.shard)
            count += _import_file(section, shard_path(partial, shard.shard), batch_rows, settings)
        if sorted(seen) != list(range(header.shards)):
            raise JournalError(f"{dest}: the export holds shards {sorted(seen)} of {header.shards}; import needs all")
        os.replace(partial, dest)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return count


class ShardLine(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="shard", omit_defaults=True):
    """The line before a journal set's shard in an export."""

    shard: int
    shards: int
    cells: bool = False
    """The set was written by cells (`SetManifest.cells`)."""


_shard_decoder = msgspec.json.Decoder(ShardLine)


def _sections(lines: Iterable[str | bytes]) -> Iterator[tuple[ShardLine | None, Iterator[str | bytes]]]:
    """The export cut at its shard lines: (its shard line, or None for a single journal's, its lines)."""
    numbered: Iterator[tuple[int, str | bytes]] = enumerate(lines, start=1)
    header: ShardLine | None = None
    first = next(numbered, None)
    pending = [first] if first is not None and _is_shard(first[1]) else []
    if not pending and first is not None:
        numbered = itertools.chain([first], numbered)

    def until_next_shard() -> Iterator[str | bytes]:
        for number, line in numbered:
            if _is_shard(line):
                pending.append((number, line))
                return
            yield line

    while True:
        if pending:
            number, line = pending.pop()
            try:
                header = _shard_decoder.decode(line)
            except msgspec.DecodeError as exc:
                raise JournalError(f"line {number}: not a shard line ({exc})") from None
        yield header, until_next_shard()
        if not pending:
            return


def _import_file(lines: Iterable[str | bytes], dest: Path, batch_rows: int, settings: JournalSettings | None) -> int:
    partial = dest.with_name(dest.name + ".importing")
    _remove(partial)
    batches = _batches(lines, batch_rows)
    first = next(batches, [])
    version = (first[0][1].schema or STORED_DIGESTS - 1) if first else SCHEMA_VERSION
    done = False
    try:
        with Journal.open(partial, settings, version=version) as journal:
            for batch in itertools.chain([first], batches):
                _write_checked(journal, batch)
            count = journal.last_pos
        os.replace(partial, dest)
        with contextlib.suppress(FileNotFoundError):  # the writer logged why it has none
            os.replace(head_path(partial), head_path(dest))
        done = True
        return count
    finally:
        if not done:
            _remove(partial)


def _remove(path: Path) -> None:
    for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), head_path(path)):
        name.unlink(missing_ok=True)


def _batches(lines: Iterable[str | bytes], size: int) -> Iterator[list[tuple[int, ExportedRow]]]:
    batch: list[tuple[int, ExportedRow]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip() or _is_summary(line):
            continue
        try:
            batch.append((number, _decoder.decode(line)))
        except msgspec.DecodeError as exc:
            raise JournalError(f"line {number}: not an exported journal row ({exc})") from None
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _is_shard(line: str | bytes) -> bool:
    if isinstance(line, bytes):
        return line.startswith(_SHARD.encode())
    return line.startswith(_SHARD)


def _is_summary(line: str | bytes) -> bool:
    """The last line of a typed export (`typed=True`), which holds no row."""
    if isinstance(line, bytes):
        return line.startswith(_SUMMARY.encode())
    return line.startswith(_SUMMARY)


def _incoming(number: int, row: ExportedRow) -> Incoming:
    body = row.body
    if row.body_raw is not None:
        try:
            body = decode_body(row.body_raw)
        except DecodeError as exc:
            raise JournalError(f"line {number}: body_raw does not decode ({exc})") from None
    envelope = Envelope(
        id=row.id,
        episode=row.episode,
        sender=row.sender,
        body=body,
        recipient=row.recipient,
        topic=row.topic,
        causation=row.causation,
        hops=row.hops,
        ts=row.ts,
    )
    return Incoming(
        stream=row.stream, stream_seq=row.stream_seq, subject=row.subject, envelope=envelope, body=row.body_raw
    )


def _write_checked(journal: Journal, batch: list[tuple[int, ExportedRow]]) -> None:
    incoming = [_incoming(number, row) for number, row in batch]
    sealed, blobs = journal._seal(incoming, journal.last_pos, journal.head)
    for (number, row), item, values in zip(batch, incoming, sealed, strict=True):
        pos = values[POS]
        where = f"line {number} (row {row.pos})"
        if row.pos != pos:
            raise ChainError(f"{where}: expected position {pos}; exports hold every row in order", pos)
        if row.body_raw is not None and _encoder.encode(item.envelope.body) != _encoder.encode(row.body):
            raise ChainError(f"{where}: body differs from body_raw (one of them edited)", pos)
        if row.body_digest != values[BODY_DIGEST]:
            raise ChainError(
                f"{where}: body digest differs from the exported one"
                " (body edited, or JSON lost a value type: export with raw bodies)",
                pos,
            )
        if row.digest != values[DIGEST]:
            raise ChainError(f"{where}: row digest differs from the exported one (a column edited)", pos)
        if row.chain != values[CHAIN]:
            raise ChainError(f"{where}: chain differs from the exported one (row removed or reordered before it)", pos)
    journal._write_sealed(sealed, blobs)
