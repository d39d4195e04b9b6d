"""Attribution names the decision the simulator recorded as its mistake."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faultline.journal import JournalReader
from faultline.replay import decisions
from faultline.runtime.cli import main


def single_mistake_failures(journal: Path, limit: int) -> dict[str, tuple[list[int], str]]:
    found: dict[str, tuple[list[int], str]] = {}
    with JournalReader(journal) as reader:
        for summary in reader.episodes():
            if summary.outcome != "failure" or len(found) >= limit:
                continue
            made = decisions(list(reader.episode_rows(summary.episode)))
            carrying = [d for d in made if d.mistake]
            if len({json.dumps(d.mistake, sort_keys=True) for d in carrying}) == 1:
                found[summary.episode] = ([d.index for d in carrying], carrying[0].mistake["category"])  # type: ignore[index]
    return found


def test_attribution_finds_the_known_mistake(
    journal_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    known = single_mistake_failures(journal_copy, 4)
    assert known, "the sim journal has failed episodes with one mistake"
    args = ["attribute", str(journal_copy), "--scratch", str(tmp_path / "forks.sqlite"), "--json"]
    for episode in known:
        args += ["--episode", episode]
    assert main(args) == 0
    results = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    for result in results:
        carrying, category = known[result["episode"]]
        assert result["agent"] == "tool"
        assert result["decision"] in carrying
        assert result["category"] == category
        assert 1 <= result["forks"] <= 6


def test_a_successful_episode_has_nothing_to_attribute(journal_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with JournalReader(journal_copy) as reader:
        ok = next(s.episode for s in reader.episodes() if s.outcome == "success")
    assert main(["attribute", str(journal_copy), "--episode", ok]) == 1
    assert "succeeded: there is no failure to attribute" in capsys.readouterr().err
