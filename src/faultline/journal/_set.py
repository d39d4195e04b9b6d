"""Journal sets: one journal written by several journal services, a file each, and read as one.

A set is a folder holding `journal-set.json` (its shard count) and `shard-<k>.sqlite` for k in
0..shards-1. Shard k holds every row whose episode `core.episode_shard(episode, shards)` puts
there (all of an episode's rows in one file, in stream order; controls and dead letters by
their episode names too). Each file is a journal of its own, with its own
hash chain, so each is verified, copied and replayed like any journal; the stream sequence every
row keeps orders rows across files.

The shard count is part of the set: a set is never written with another count (the episodes
would move), so a changed `[journal] shards` is refused, not silently re-partitioned.

A set written by cells (`[nats] cells`: independent nats-servers, one shard each) says so: each
cell's shard holds its own stream's controls and dead letters beside its episodes, so those two
episodes (`CELL_EPISODES`) are in every shard, and each shard's stream sequences are its own. Its
episodes lie where `core.episode_cell` puts them (its `partition`), a hash independent of the
worker shards' within each cell.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import msgspec

from faultline._errors import JournalError
from faultline._files import not_a_file
from faultline.core import CONTROL_EPISODE, DLQ_EPISODE, episode_cell, episode_shard

MANIFEST = "journal-set.json"
MAX_SHARDS = 64
CELL_EPISODES = frozenset({CONTROL_EPISODE, DLQ_EPISODE})
"""The episodes every shard of a set written by cells holds its own part of: its stream's controls and dead letters."""


class SetManifest(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What `journal-set.json` says: which partition the set uses and how many shards it has."""

    format: Literal["faultline-journal-set"] = "faultline-journal-set"
    partition: Literal["crc32-episode", "blake2b-episode"] = "crc32-episode"
    """Which shard holds an episode: `core.episode_shard`, or `core.episode_cell` for a set written by cells."""
    shards: int
    cells: bool = False
    """Each shard was written from a stream of its own (a cell), with that stream's controls and dead letters."""

    def shard_of(self, episode: str) -> int:
        """The shard that holds `episode`'s rows (one of them, for a cell's controls and dead letters)."""
        if self.partition == "blake2b-episode":
            return episode_cell(episode, self.shards)
        return episode_shard(episode, self.shards)


def is_journal_set(path: Path) -> bool:
    return (path / MANIFEST).is_file()


def journal_exists(path: Path) -> bool:
    """Whether `path` is there to read as a journal: a file, or a journal set's folder."""
    return path.is_file() or is_journal_set(path)


def absent_journal(path: Path) -> str:
    """Why `path`, which `journal_exists` says is no journal, cannot be read as one, in words."""
    if path.is_dir():
        return f"{path}: is a folder, but no journal set (it has no {MANIFEST})"
    return not_a_file(path, "a journal file or journal set")


def shard_path(folder: Path, shard: int) -> Path:
    return folder / f"shard-{shard}.sqlite"


def read_manifest(folder: Path) -> SetManifest:
    try:
        manifest = msgspec.json.decode((folder / MANIFEST).read_bytes(), type=SetManifest)
    except FileNotFoundError:
        raise JournalError(f"{folder}: not a journal set (no {MANIFEST})") from None
    except (OSError, msgspec.DecodeError) as exc:
        raise JournalError(f"{folder / MANIFEST}: not a journal set manifest ({exc})") from None
    if not 1 <= manifest.shards <= MAX_SHARDS:
        raise JournalError(f"{folder / MANIFEST}: {manifest.shards} shards; a set has 1 to {MAX_SHARDS}")
    return manifest


def create_set(folder: Path, shards: int, *, cells: bool = False) -> SetManifest:
    """Make the set at `folder` with `shards` shards (written by `cells`), or check that the one there is that.

    Safe for several shards' services starting at once: the manifest appears whole or not at all.
    """
    if not 1 <= shards <= MAX_SHARDS:
        raise JournalError(f"{folder}: {shards} shards; a journal set has 1 to {MAX_SHARDS}")
    if folder.is_file():
        raise JournalError(f"{folder}: is a journal file, not a journal set; give the set a folder of its own")
    if not is_journal_set(folder):
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{MANIFEST}.{os.getpid()}"
        manifest = (
            SetManifest(shards=shards, cells=True, partition="blake2b-episode") if cells else SetManifest(shards=shards)
        )
        partial.write_bytes(msgspec.json.encode(manifest))
        try:
            os.link(partial, folder / MANIFEST)  # fails if another process made it first
        except FileExistsError:
            pass
        finally:
            partial.unlink()
    return set_of(folder, shards, cells=cells)


def set_of(folder: Path, shards: int, *, cells: bool = False) -> SetManifest:
    """The manifest of the set at `folder`; JournalError when it has another count than `shards`, or was (not)
    written by `cells`."""
    manifest = read_manifest(folder)
    if manifest.shards != shards:
        raise JournalError(
            f"{folder}: a journal set of {manifest.shards} shards, asked to write {shards}: its episodes are"
            f" partitioned by the count; set `[journal] shards = {manifest.shards}` or use a new folder"
        )
    if manifest.cells != cells:
        written, asked = ("cells", "one stream") if manifest.cells else ("one stream", "cells")
        raise JournalError(
            f"{folder}: a journal set written by {written}, asked to be written by {asked}: their controls and"
            " dead letters lie differently; use a new folder"
        )
    return manifest


def journal_files(path: Path) -> list[Path]:
    """The files of the journal at `path`: itself for a file, the shards in order for a set."""
    if path.is_dir() and is_journal_set(path):
        return [shard_path(path, k) for k in range(read_manifest(path).shards)]
    return [path]
