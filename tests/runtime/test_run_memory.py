"""A run with memory on, after a run that filled it, retrieves past episodes (recorded, replayable); with a run
without memory, one with dynamic n and one without the memory extractor beside them, `report --paper memtool` lays
out MemToolAgent's ablation."""

from __future__ import annotations

from pathlib import Path

import pytest

from faultline.cli import main
from faultline.journal import JournalReader
from faultline.services.memory import HashingEmbedder, MemoryStore
from tests import jsonl
from tests.cli.test_report_paper import check_memtool_paper

pytestmark = pytest.mark.slow


def test_a_second_run_retrieves_what_the_first_one_stored(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = tmp_path / "first.sqlite", tmp_path / "second.sqlite"
    base = ["run", "--tasks", "6", "--memory", "topk:3", "--json"]
    assert main([*base, "--error-rates", "0.2", "--journal", str(first), "--run-id", "fill"]) == 0
    first_out = capsys.readouterr().out
    assert main([*base, "--journal", str(second), "--run-id", "use"]) == 0
    second_out = capsys.readouterr().out
    assert main(["memory", "stats", "--store", str(tmp_path / "memory.sqlite"), "--json"]) == 0
    _, stats = jsonl.read(capsys.readouterr().out)
    assert stats["entries"] == 12
    with JournalReader(second) as reader:
        episode = reader.episodes()[0].episode
        recordings = [
            r.envelope().body for r in reader.episode_rows(episode) if r.kind == "recording" and r.sender == "tool"
        ]
    memory = [r for r in recordings if r.call == "request"]  # type: ignore[union-attr]
    assert len(memory) == 1 and not memory[0].error  # type: ignore[union-attr]
    retrieved = memory[0].response["entries"]  # type: ignore[union-attr]
    assert len(retrieved) == 3
    assert {e["entry"]["episode"].split("-")[0] for e in retrieved} <= {"fill", "use"}
    assert main(["journal", "show", str(second), "--episode", episode]) == 0
    shown = capsys.readouterr().out
    assert (
        "request#0" in shown
        and retrieved[0]["entry"]["query"][:30] in shown.replace("\n", " ").replace("  ", " ")
        or '"entries"' in shown
    )
    assert main(["replay", str(second)]) == 0

    # Three more runs for MemToolAgent's ablation tables: memory off, dynamic n with the rating ranker, and top-k
    # without the memory extractor, on a store of its own, where every episode fails (the sim stops early) and is
    # stored without a reflection.
    capsys.readouterr()
    summaries = {"first": jsonl.read(first_out)[1], "second": jsonl.read(second_out)[1]}
    dynamic, noext = tmp_path / "dynamic.toml", tmp_path / "noext.toml"
    dynamic.write_text('[memory]\nmode = "dynamic"\nranker = "rating"\n')
    noext.write_text('[memory]\nmode = "topk"\nk = 3\nextractor = "off"\nstore = "noext-memory.sqlite"\n')
    journals = {
        "first": first,
        "second": second,
        "off": tmp_path / "off.sqlite",
        "dynamic": tmp_path / "dynamic.sqlite",
        "noext": tmp_path / "noext.sqlite",
    }
    for name, flags in (
        ("off", ["--memory", "off"]),
        ("dynamic", ["--config", str(dynamic)]),
        ("noext", ["--config", str(noext), "--error-rate", "early_stop=1.0"]),
    ):
        assert main(["run", "--tasks", "2", *flags, "--journal", str(journals[name]), "--json"]) == 0
        summaries[name] = jsonl.read(capsys.readouterr().out)[1]
    with MemoryStore(tmp_path / "noext-memory.sqlite", HashingEmbedder()) as store:
        stored = [(e.feedback, e.reflection) for e in store.entries()]
    assert stored == [(0, ""), (0, "")], "failures stored without the extractor's critique"
    check_memtool_paper(journals, summaries, capsys)
