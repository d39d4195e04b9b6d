"""Attribution names the decision the simulator recorded as its mistake."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faultline.cli import main
from faultline.journal import JournalReader
from faultline.replay import decisions, forks_path


def single_mistake_failures(journal: Path, limit: int) -> dict[str, tuple[list[int], str]]:
    found: dict[str, tuple[list[int], str]] = {}
    with JournalReader(journal) as reader:
        for summary in reader.episodes():
            if summary.outcome != "failure" or len(found) >= limit:
                continue
            made = decisions(list(reader.episode_rows(summary.episode)), "tool")
            carrying = [d for d in made if d.mistake]
            if len({json.dumps(d.mistake, sort_keys=True) for d in carrying}) == 1:
                found[summary.episode] = ([d.index for d in carrying], carrying[0].mistake["category"])  # type: ignore[index]
    return found


def test_attribution_finds_the_known_mistake(
    journal_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    known = single_mistake_failures(journal_copy, 4)
    assert known, "the sim journal has failed episodes with one mistake"
    args = ["attribute", str(journal_copy), "--out", str(tmp_path / "forks.sqlite"), "--json"]
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


def test_attributing_again_reuses_the_repair_forks_and_leaves_the_source_alone(
    journal_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    episode = next(iter(single_mistake_failures(journal_copy, 1)))
    with JournalReader(journal_copy) as reader:
        source = list(reader.rows())
    assert main(["attribute", str(journal_copy), "--episode", episode, "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    forks = forks_path(journal_copy)
    assert first["journal"] == str(forks)
    with JournalReader(forks) as reader:
        written = list(reader.rows())
    assert len({row.episode for row in written}) == first["forks"]
    assert main(["attribute", str(journal_copy), "--episode", episode, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == first
    with JournalReader(forks) as reader, JournalReader(journal_copy) as unchanged:
        assert list(reader.rows()) == written
        assert list(unchanged.rows()) == source
    assert main(["replay", str(forks)]) == 0
    assert main(["replay", str(journal_copy)]) == 0


def test_a_backend_that_cannot_follow_the_ground_truth_is_refused_in_one_line(
    journal_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    episode = next(iter(single_mistake_failures(journal_copy, 1)))
    code = main(
        [
            "attribute",
            str(journal_copy),
            "--episode",
            episode,
            "--model",
            "openai",
            "--model-name",
            "m",
            "--base-url",
            "http://127.0.0.1:9/v1",
        ]
    )
    assert code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "cannot: attribute with --model sim" in line


def test_the_repaired_agent_is_named_and_the_backend_says_whether_it_can(
    journal_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    episode = next(iter(single_mistake_failures(journal_copy, 1)))
    assert main(["attribute", str(journal_copy), "--episode", episode, "--agent", "user"]) == 1
    assert "SimBackend cannot repair decisions of agent 'user'" in capsys.readouterr().err
    assert main(["attribute", str(journal_copy), "--episode", episode, "--agent", "nobody"]) == 1
    assert "SimBackend cannot repair decisions of agent 'nobody'" in capsys.readouterr().err
