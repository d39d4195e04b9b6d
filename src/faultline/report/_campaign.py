"""A campaign folder: one journal per cell and a manifest that says which cells are finished.

A cell is one fault type (or the fault-free baseline) under one defense set (or none),
on the campaign's tasks, trials and seed. The manifest is rewritten whole (to a temporary
file, then renamed) after each finished cell, so an interruption leaves either the old
manifest or the new one, never half of one.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from faultline._errors import CampaignError
from faultline._files import write_atomically

MANIFEST = "manifest.json"
BASELINE = "baseline"
"""The fault name of the fault-free cell of each defense set."""
NO_DEFENSE = ""
"""The defense name of the cells that run without defenses."""
RUN_NAME_CHARS = 16
"""How much of a fault's name a cell's run id holds."""


class CampaignSettings(msgspec.Struct, frozen=True, kw_only=True):
    """What makes two campaigns the same: a re-run with other settings is refused, not mixed in."""

    domain: str
    system: str = ""
    """A system of one's own the campaign ran instead of the tool-use agents on `domain`."""
    inputs: str = ""
    """Its input records' file."""
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
    run_id: str = ""
    """The run id of the cell's latest attempt: its episodes are `<run_id>-<task>-t<trial>`."""
    attempts: int = 0

    @property
    def name(self) -> str:
        return f"{self.fault}+{self.defense}" if self.defense else self.fault

    @property
    def folder(self) -> str:
        """The cell's folder, relative to the campaign folder."""
        return f"cells/{self.name}"


class CampaignManifest(msgspec.Struct, frozen=True, kw_only=True):
    version: int = 1
    id: str
    """Names this campaign's runs, so that two campaigns on one running system do not mix."""
    settings: CampaignSettings
    cells: list[CampaignCell]
    journal: str = ""
    """The journal of the running system every cell ran on (`--nats`); empty: one journal per cell."""

    def journal_of(self, folder: Path, cell: CampaignCell) -> Path:
        return Path(self.journal) if self.journal else folder / cell.folder / "journal.sqlite"

    def replaced(self, cell: CampaignCell) -> CampaignManifest:
        """This manifest with the cell of `cell`'s name replaced by `cell`."""
        return msgspec.structs.replace(self, cells=[cell if c.name == cell.name else c for c in self.cells])

    def attempt(self, cell: CampaignCell) -> tuple[CampaignManifest, CampaignCell]:
        """This manifest with a new attempt at `cell` (a run id of its own), and that cell."""
        attempts = cell.attempts + 1
        index = next(i for i, c in enumerate(self.cells) if c.name == cell.name)
        # Short enough that the run's episode ids keep their task ids whole (a long one is shortened after the
        # run id), subject-safe (no "+"), unique by the cell's index; the rest is for a reader of the journal.
        name = cell.fault[:RUN_NAME_CHARS] + (f"-{cell.defense}" if cell.defense else "")
        run_id = f"{self.id}-{index}-{name}-{attempts}"
        started = msgspec.structs.replace(cell, attempts=attempts, run_id=run_id)
        return self.replaced(started), started

    def finished(self, cell: CampaignCell, seconds: float) -> CampaignManifest:
        """This manifest with `cell` marked done."""
        return self.replaced(msgspec.structs.replace(cell, done=True, seconds=seconds))


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
    except (FileNotFoundError, NotADirectoryError):
        if not folder.exists():
            raise CampaignError(f"{folder}: no such campaign folder") from None
        raise CampaignError(f"{folder} is not a campaign folder: it has no {MANIFEST}") from None
    except msgspec.DecodeError as exc:
        raise CampaignError(f"{path}: not a campaign manifest ({exc})") from None


def write_manifest(folder: Path, manifest: CampaignManifest) -> None:
    """Replace the manifest in one rename, so a reader never sees half of it."""
    write_atomically(folder / MANIFEST, msgspec.json.format(msgspec.json.encode(manifest)))
