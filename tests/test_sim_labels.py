"""No component reads the `sim` model's own labels of its mistakes: with them removed, or a made-up one on
every decision, whatever the components make of a sim campaign's episodes stays the same.

The simulator keeps its labels for its own tests (tests/runtime/test_sim.py); a result drawn from them
would be true by construction, and a run with a real model has none.
"""

from __future__ import annotations

import anyio
import pytest

from faultline.cli import main
from faultline.journal import JournalReader, JournalRow
from faultline.report import detect, episode_case
from faultline.report._metrics import trace_digest
from faultline.runtime import FamaConfig
from faultline.runtime.models import SimBackend
from faultline.services.fama import FailureCase, analyze_cases, failure_case
from faultline.services.memory import entry_from_episode
from tests.replay.sim_labels import SCRAMBLED, decisions, relabelled


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[JournalRow]]:
    """A sim campaign with mistakes and a storm, by episode: failures, faulted episodes and tallies that a
    storm copied (the fault event then holds the tally, labels and all)."""
    path = tmp_path_factory.mktemp("labels") / "journal.sqlite"
    args = ["run", "--tasks", "16", "--trials", "2", "--error-rates", "0.08", "--seed", "5", "--journal", str(path)]
    assert main([*args, "--fault", "storm:probability=0.1", "--json"]) == 0
    with JournalReader(path) as reader:
        return {e: rows for e, rows in reader.by_episode() if any(r.kind == "episode_started" for r in rows)}


def _variants(rows: list[JournalRow]) -> list[list[JournalRow]]:
    changed = [relabelled(rows, None), relabelled(rows, SCRAMBLED)]
    assert changed[1] != rows, "every episode of the campaign carries labels to change"
    return changed


def test_the_campaign_has_what_the_checks_need(campaign: dict[str, list[JournalRow]]) -> None:
    labelled = [rows for rows in campaign.values() if any(d.mistake for d in decisions(rows, "tool"))]
    stormed = [rows for rows in campaign.values() if any(r.kind == "fault_applied" for r in rows)]
    assert len(labelled) >= 5 and len(stormed) >= 5


def test_memory_entries_attribution_traces_and_detectors_do_not_move(campaign: dict[str, list[JournalRow]]) -> None:
    for rows in campaign.values():
        steps = [(r.pos, r.envelope()) for r in rows]
        for changed in _variants(rows):
            assert entry_from_episode(r.envelope() for r in changed) == entry_from_episode(e for _, e in steps)
            assert trace_digest(changed) == trace_digest(rows)
            moved = [(r.pos, r.envelope()) for r in changed]
            assert detect(moved) == detect(steps)
            assert episode_case("e", "t", 0, moved) == episode_case("e", "t", 0, steps)


@pytest.mark.parametrize("analysts", ["trajectory", "informed"])
def test_fama_cases_and_the_sim_judges_answers_do_not_move(
    campaign: dict[str, list[JournalRow]], analysts: str
) -> None:
    def cases(episodes: list[list[JournalRow]]) -> list[FailureCase]:
        made = (failure_case((r.envelope() for r in rows), analysts) for rows in episodes)  # type: ignore[arg-type]
        return [case for case in made if case is not None]

    original = cases(list(campaign.values()))
    assert len(original) >= 5
    settings = FamaConfig(analysts=analysts)  # type: ignore[arg-type]
    judged = anyio.run(analyze_cases, original, SimBackend(), settings)
    for variant in (0, 1):
        changed = cases([_variants(rows)[variant] for rows in campaign.values()])
        assert changed == original
        again = anyio.run(analyze_cases, changed, SimBackend(), settings)
        assert [c.analysis for c in again.cases] == [c.analysis for c in judged.cases]
