"""`faultline report --paper`: each paper's tables, in the paper's shape, from small real runs on `sim`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from faultline.cli import main
from faultline.core import Envelope, EpisodeStarted, Recording, ToolCall
from faultline.envs import load_domain
from tests import jsonl
from tests.report.journals import Step, episode, write_journal

pytestmark = pytest.mark.slow

SIM_SAYS = "its numbers measure the runtime's mechanisms, not a model"


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sim campaign of two tasks: the baseline and a message storm (each cell its own nats-server)."""
    folder = tmp_path_factory.mktemp("masfire") / "c"
    assert main(["campaign", "--model", "sim", "--tasks", "2", "--faults", "storm", "--out", str(folder)]) == 0
    return folder


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[list[dict[str, object]], dict[str, object]]:
    capsys.readouterr()
    assert main(["report", *args, "--json"]) == 0
    return jsonl.read(capsys.readouterr().out)


def test_masfire_lays_out_table_2_and_figure_4_from_the_campaigns_own_rows(
    campaign: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ours, _ = _json(capsys, str(campaign))
    rows, summary = _json(capsys, "--paper", "masfire", str(campaign))
    table2 = [r for r in rows if r["type"] == "table2"]
    figure4 = [r for r in rows if r["type"] == "figure4"]
    assert table2 and {r["category"] for r in table2} == {"Message Storm"}
    behaviours = {r["behaviour"]: r for r in ours if r["type"] == "behaviour"}
    for row in table2:  # the report's behaviour rows, grouped as the paper groups them
        assert row["by_tier"] == behaviours[str(row["behaviour"])]["by_tier"]
    tiers = [{k: v for k, v in r.items() if k != "type"} for r in ours if r["type"] == "tier"]
    assert [{k: v for k, v in r.items() if k != "type"} for r in figure4] == tiers
    assert [r["tier"] for r in figure4] == ["mechanism", "rule", "prompt", "reasoning"]
    assert summary["paper"] == "masfire" and summary["behaviour_source"] == "rules"
    assert SIM_SAYS in str(summary["note"])
    assert "storm" not in summary["not_run"] and "hallucination" in summary["not_run"]  # type: ignore[operator]

    assert main(["report", "--paper", "masfire", str(campaign)]) == 0
    out = capsys.readouterr().out
    assert "MAS-FIRE Table 2" in out and "MAS-FIRE Figure 4" in out and "Message Storm" in out
    assert all(f"{tier} " in out for tier in ("Mechanism", "Rule", "Prompt", "Reasoning"))
    assert "✓" in out or "✗" in out
    assert " ".join(out.split()).count(SIM_SAYS) == 2  # under every table


def test_masfire_takes_the_judges_behaviours_with_marks_per_tier(
    campaign: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows, summary = _json(capsys, "--paper", "masfire", str(campaign), "--behaviours", "judged")
    assert summary["behaviour_source"] == "judged" and str(summary["judge"]).startswith("sim")
    table2 = [r for r in rows if r["type"] == "table2"]
    assert table2 and all(r["by_tier"] for r in table2)
    assert "the sim judge is a stand-in" in str(summary["note"])


def test_masfire_input_that_is_not_one_campaign_is_one_line(
    campaign: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", "--paper", "masfire", str(tmp_path)]) == 1
    assert (
        capsys.readouterr().err == f"faultline: error: {tmp_path} is not a campaign folder: it has no manifest.json\n"
    )
    assert main(["report", "--paper", "masfire", str(campaign), str(campaign)]) == 2
    assert capsys.readouterr().err == "faultline: usage error: report --paper masfire reads one CAMPAIGN_DIR\n"
    assert main(["report", "--paper", "masfire", str(campaign), "--plot", str(tmp_path / "p.png")]) == 2
    assert capsys.readouterr().err == "faultline: usage error: report --paper masfire takes no --html or --plot\n"
    assert main(["report", "--paper", "masfire"]) == 2
    assert capsys.readouterr().err == "faultline: usage error: report --paper masfire needs one CAMPAIGN_DIR\n"


def check_fama_paper(folder: Path, rounds: list[dict[str, object]], capsys: pytest.CaptureFixture[str]) -> None:
    """`report --paper fama` of a sim loop folder lays out the rounds the loop printed (its `round` lines): a row per
    round in each table, with the overhead, the main-error counts and the recommendations the loop recorded.
    Called by the loop's own test (tests/services/test_fama.py), so that no loop runs for this one alone."""
    assert rounds[0]["analysed"], "the baseline round had failures to analyse"
    rows, summary = _json(capsys, "--paper", "fama", str(folder))
    by_type = {kind: [r for r in rows if r["type"] == kind] for kind in ("table2", "figure4", "figure5")}
    assert all(len(found) == len(rounds) for found in by_type.values())
    for r, table2, figure4, figure5 in zip(rounds, *by_type.values(), strict=True):
        assert table2["round"] == figure4["round"] == figure5["round"] == r["round"]
        assert table2["overhead"] == r["overhead"] and table2["domain"] == "retail" and table2["model"] == "sim"
        assert figure4["categories"] == r["categories"] and figure4["analysed"] == r["analysed"]
        assert figure5["recommended"] == r["recommended"]
    recommended = by_type["figure5"][0]["recommended"]
    assert isinstance(recommended, dict) and sum(recommended.values()) >= rounds[0]["analysed"]  # type: ignore[operator]
    assert summary["paper"] == "fama" and SIM_SAYS in str(summary["note"])

    assert main(["report", "--paper", "fama", str(folder)]) == 0
    out = capsys.readouterr().out
    for title in ("FAMA Table 2", "FAMA Figure 4", "FAMA Figure 5", "Overhead (%)", "DPV", "Planner"):
        assert title in out
    assert " ".join(out.split()).count(SIM_SAYS) == 3  # under every table


def check_memtool_paper(
    journals: dict[str, Path], summaries: dict[str, dict[str, object]], capsys: pytest.CaptureFixture[str]
) -> None:
    """`report --paper memtool` of sim runs made with memory top-k:3 (journals `first` and `second`), off (`off`),
    dynamic n with the rating ranker (`dynamic`) and top-k:3 without the memory extractor (`noext`): a row per setting
    the episodes recorded, their pass rates the runs' own. Called by the memory run's test
    (tests/runtime/test_run_memory.py), which made the runs."""
    rows, summary = _json(capsys, "--paper", "memtool", *(str(j) for j in journals.values()))
    table3 = [r for r in rows if r["type"] == "table3"]
    topk: dict[str, object] = {"mode": "topk", "k": 3, "ranker": "similarity", "zero_ratings": 1}
    assert [r["setting"] for r in table3] == [
        {"mode": "off"},
        {**topk, "extractor": "off"},
        {**topk, "extractor": "on"},
        {"mode": "dynamic", "radius": 10, "prominence": 1e-05, "peak": 1, "fallback_k": 5, "ranker": "rating",
         "zero_ratings": 1, "extractor": "on"},
    ]  # fmt: skip
    off, noext, with_extractor, dynamic = table3
    assert {r["model"] for r in rows} == {"sim"}
    assert with_extractor["journals"] == [str(journals["first"]), str(journals["second"])]
    assert noext["journals"] == [str(journals["noext"])]
    runs_of = ((off, ["off"]), (noext, ["noext"]), (with_extractor, ["first", "second"]), (dynamic, ["dynamic"]))
    for row, runs in runs_of:
        assert row["episodes"] == sum(summaries[r]["episodes"] for r in runs)  # type: ignore[misc]
        solved = sum(summaries[r]["outcomes"].get("success", 0) for r in runs)  # type: ignore[attr-defined]
        assert row["successes"] == solved and row["pass_rate"] == solved / row["episodes"]  # type: ignore[operator]
    assert noext["successes"] == 0 and noext["retrievals"] == noext["episodes"]
    assert off["tool_accuracy"] == off["param_accuracy"] == 1.0  # sim without mistakes makes the gold calls
    assert off["retrievals"] == 0 and with_extractor["retrievals"] == with_extractor["episodes"]
    assert with_extractor["retrieved"] > 0  # type: ignore[operator]
    figure5, table4 = (
        [(s["mode"], s["extractor"]) for s in (r["setting"] for r in rows if r["type"] == kind)]  # type: ignore[index]
        for kind in ("figure5", "table4")
    )
    assert figure5 == [("topk", "on"), ("topk", "off"), ("dynamic", "on")]  # by k, then dynamic n
    assert table4 == [("topk", "on"), ("dynamic", "on"), ("topk", "off")]  # as met
    assert summary["models"] == ["sim"] and summary["skipped"] == 0 and SIM_SAYS in str(summary["note"])

    assert main(["report", "--paper", "memtool", *(str(j) for j in journals.values())]) == 0
    out = capsys.readouterr().out
    for title in ("MemToolAgent Table 3", "MemToolAgent Figure 5", "MemToolAgent Table 4", "w/o memory", "Tool Acc."):
        assert title in out
    assert "top-k k=3, by similarity" in out and "dynamic n (R 10, prominence 1e-05, peak 1), by rating" in out
    assert "top-k k=3, by similarity, w/o extractor" in out
    assert " ".join(out.split()).count(SIM_SAYS) == 3


def _memory_episode(name: str, model: str, memory: dict[str, Any], *, gold: bool) -> list[Envelope]:
    """A retail episode of task cancel-00 whose tool agent was answered by `model`, with the `[memory]` table
    `memory` recorded: the task's ground-truth calls (`gold`), or one wrong call."""
    task = load_domain("retail").task("cancel-00")
    calls = [(a.name, a.arguments) for a in task.actions] if gold else [("cancel_pending_order", {"order_id": "#W1"})]
    answer = Recording(call="llm", index=0, request_digest="d", response={"model": model, "content": ""})
    steps: list[Step] = [
        ("tool", "", answer),
        *(("tool", "env", ToolCall(call_id=f"c{i}", name=n, arguments=a)) for i, (n, a) in enumerate(calls)),
    ]
    envelopes = episode(name, task.id, steps, outcome="success" if gold else "failure")
    started = EpisodeStarted(domain="retail", task=task.id, settings={"memory": memory})
    return [msgspec.structs.replace(envelopes[0], body=started), *envelopes[1:]]


def _without_memory(envelopes: list[Envelope]) -> list[Envelope]:
    started = msgspec.structs.replace(envelopes[0].body, settings={})  # type: ignore[type-var]
    return [msgspec.structs.replace(envelopes[0], body=started), *envelopes[1:]]


def test_memtool_rows_are_per_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Episodes of one setting answered by two models, in one journal, are two rows, each model's its own group."""
    topk = {"mode": "topk", "k": 3}
    journal = write_journal(
        tmp_path / "two-models.sqlite",
        _memory_episode("e1", "sim", {}, gold=True),
        _memory_episode("e2", "sim", topk, gold=True),
        _memory_episode("e3", "scripted", topk, gold=False),
        _memory_episode("e4", "scripted", topk, gold=False),
        _memory_episode("e6", "/models/small.Q4_1.gguf", topk, gold=False),  # as llama.cpp's server names it
        _without_memory(_memory_episode("e5", "other", {}, gold=True)),  # recorded no memory: skipped
    )
    rows, summary = _json(capsys, "--paper", "memtool", str(journal))
    table3 = [r for r in rows if r["type"] == "table3"]
    assert [(r["model"], r["setting"]["mode"], r["episodes"]) for r in table3] == [  # type: ignore[index]
        ("/models/small.Q4_1.gguf", "topk", 1),
        ("scripted", "topk", 2),
        ("sim", "off", 1),
        ("sim", "topk", 1),
    ]
    _, scripted, _, sim = table3
    assert (scripted["pass_rate"], scripted["tool_accuracy"]) == (0.0, 0.0)
    assert (sim["pass_rate"], sim["tool_accuracy"], sim["param_accuracy"]) == (1.0, 1.0, 1.0)
    assert [r["model"] for r in rows if r["type"] == "table4"] == ["/models/small.Q4_1.gguf", "scripted", "sim"]
    assert summary["models"] == ["/models/small.Q4_1.gguf", "scripted", "sim"] and summary["skipped"] == 1

    assert main(["report", "--paper", "memtool", str(journal)]) == 0
    lines = capsys.readouterr().out.splitlines()
    table = lines[: next(i for i, line in enumerate(lines) if "Figure 5" in line)]
    shown = [line.split("│")[1:3] for line in table if line.count("│") > 3 and "Method" not in line]
    assert [(m.strip(), method.strip()) for m, method in shown] == [
        ("small.Q4_1.gguf", "top-k k=3, by similarity"),  # the table shows the file, the JSON its whole path
        ("scripted", "top-k k=3, by similarity"),
        ("sim", "w/o memory"),
        ("sim", "top-k k=3, by similarity"),
    ]
    assert any("├" in line for line in table), "a line parts the two models' groups"


def test_memtool_input_that_is_no_run_journal_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--paper", "memtool", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"faultline: usage error: report --paper memtool: {tmp_path} is a folder: give run journals"
        " (`run --journal FILE`)\n"
    )
    (tmp_path / "notes.txt").write_text("not a journal")
    assert main(["report", "--paper", "memtool", str(tmp_path / "notes.txt")]) == 1
    assert capsys.readouterr().err.startswith(f"faultline: error: {tmp_path / 'notes.txt'}: not a Faultline journal")


def test_fama_input_that_is_no_loop_folder_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--paper", "fama", str(tmp_path)]) == 2
    not_a_loop = f"{tmp_path} is not a fama loop folder: it has no loop.json (`faultline fama loop` writes it)"
    assert capsys.readouterr().err == f"faultline: usage error: {not_a_loop}\n"
    (tmp_path / "loop.json").write_text("{}")
    assert main(["report", "--paper", "fama", str(tmp_path)]) == 2
    assert "not a fama loop record (Object missing required field `settings`)" in capsys.readouterr().err
