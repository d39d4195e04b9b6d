"""A campaign folder: one journal per cell and a manifest that says which cells are finished.

A cell is one fault type (or the fault-free baseline) under one defense set (or none),
on the campaign's tasks, trials and seed. The manifest is rewritten whole (to a temporary
file, then renamed) after each finished cell, so an interruption leaves either the old
manifest or the new one, never half of one.
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from faultline._errors import CampaignError

MANIFEST = "manifest.json"
BASELINE = "baseline"
"""The fault name of the fault-free cell of each defense set."""
NO_DEFENSE = ""
"""The defense name of the cells that run without defenses."""


class CampaignSettings(msgspec.Struct, frozen=True, kw_only=True):
    """What makes two campaigns the same: a re-run with other settings is refused, not mixed in."""

    domain: str
    model: str
    tasks: list[str]
    """The task ids, in order."""
    trials: int
    seed: int
    faults: list[str]
    defenses: list[str]
    helpers: str = ""


class CampaignCell(msgspec.Struct, frozen=True, kw_only=True):
    fault: str
    """A fault type, or BASELINE."""
    defense: str = NO_DEFENSE
    done: bool = False
    seconds: float = 0.0
    """Wall time of the finished cell."""

    @property
    def name(self) -> str:
        return f"{self.fault}+{self.defense}" if self.defense else self.fault

    @property
    def journal(self) -> str:
        """The cell's journal, relative to the campaign folder."""
        return f"cells/{self.name}/journal.sqlite"


class CampaignManifest(msgspec.Struct, frozen=True, kw_only=True):
    version: int = 1
    settings: CampaignSettings
    cells: list[CampaignCell]

    def finished(self, cell: CampaignCell, seconds: float) -> CampaignManifest:
        """This manifest with `cell` marked done."""
        done = msgspec.structs.replace(cell, done=True, seconds=seconds)
        return msgspec.structs.replace(self, cells=[done if c.name == cell.name else c for c in self.cells])


def plan_cells(faults: list[str], defenses: list[str]) -> list[CampaignCell]:
    """The baseline then every fault, without defenses and then under each defense on its own."""
    return [
        CampaignCell(fault=fault, defense=defense)
        for defense in (NO_DEFENSE, *defenses)
        for fault in (BASELINE, *faults)
    ]


def read_manifest(folder: Path) -> CampaignManifest:
    path = folder / MANIFEST
    try:
        return msgspec.json.decode(path.read_bytes(), type=CampaignManifest)
    except FileNotFoundError:
        raise CampaignError(f"{folder} is not a campaign folder: it has no {MANIFEST}") from None
    except msgspec.DecodeError as exc:
        raise CampaignError(f"{path}: not a campaign manifest ({exc})") from None


def write_manifest(folder: Path, manifest: CampaignManifest) -> None:
    """Replace the manifest in one rename, so a reader never sees half of it."""
    path = folder / MANIFEST
    temporary = path.with_suffix(".tmp")
    temporary.write_bytes(msgspec.json.format(msgspec.json.encode(manifest)))
    os.replace(temporary, path)
