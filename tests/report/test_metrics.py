"""RS, O, L and S of a hand-made campaign, against counts worked out here from how it was made."""

from __future__ import annotations

import html
import json
from pathlib import Path

import msgspec
import pytest

from faultline._errors import ConfigError
from faultline.cli import main
from faultline.core import (
    AssistantTurn,
    DefenseFired,
    Envelope,
    FaultApplied,
    FaultSkipped,
    Tally,
    ToolResult,
    UserTurn,
)
from faultline.report import (
    DEFINITIONS,
    RS_VARIANTS,
    CampaignManifest,
    CampaignSettings,
    SkipReason,
    campaign_report,
    plan_cells,
    read_cell,
    write_manifest,
)

from .journals import Step, addressed, episode, faulted, write_journal

ASKED: list[Step] = [
    ("user", "tool", faulted("m9", "m9", "m9-copy")),
    ("tool", "user", AssistantTurn(text="Did you say order A1?"), "m9-copy"),
    ("user", "tool", UserTurn(text="Yes.")),
]
"""A storm, then a question in answer to its copy, answered: the copy's effect (acted_on_copy), failed in rule and
reasoning; no repair, though the user answered."""
GAVE_UP: list[Step] = [
    ("user", "tool", faulted("m9", "m9", "m9-copy")),
    ("env", "tool", ToolResult(call_id="c1", name="get_order", error="no such order")),
]
"""A fault, then a tool error never corrected: no behaviour."""
SILENT: list[Step] = [("user", "tool", faulted("m9", "m9", "m9-copy"))]
STRAY_DEFENSE: list[Step] = [
    ("user", "tool", faulted("m9", "m9", "m9-copy")),
    ("tool", "", DefenseFired(defense="dedup", agent="tool", message_id="m5")),
]
"""A defense dropped a message the fault did not send: rule tier, not repaired."""
FILTERED: list[Step] = [
    ("user", "tool", faulted("m9", "m9", "m9-copy")),
    ("tool", "", DefenseFired(defense="dedup", agent="tool", message_id="m9-copy")),
]


Outcomes = dict[str, list[tuple[str, list[Step], str]]]
"""Per cell name, the episodes of its journal: (task, steps, outcome)."""


def _campaign(folder: Path, *, last_done: bool = True) -> Path:
    settings = CampaignSettings(
        domain="retail", model="sim", tasks=["t1", "t2", "t3", "t4"], trials=1, seed=0, faults=["storm"],
        defenses=["dedup"],
    )  # fmt: skip
    outcomes: Outcomes = {
        "baseline": [("t1", [], "success"), ("t2", [], "success"), ("t3", [], "success"), ("t4", [], "failure")],
        "storm": [("t1", ASKED, "success"), ("t2", GAVE_UP, "failure"), ("t3", SILENT, "success"),
                  ("t4", STRAY_DEFENSE, "success")],
        "baseline+dedup": [(t, [], "success") for t in settings.tasks],
        "storm+dedup": [(t, FILTERED, "success") for t in settings.tasks],
    }  # fmt: skip
    return _write(folder, settings, outcomes, unfinished="" if last_done else "storm+dedup")


def _write(
    folder: Path,
    settings: CampaignSettings,
    outcomes: dict[str, list[tuple[str, list[Step], str]]],
    unfinished: str = "",
) -> Path:
    """A campaign folder whose cells hold an episode per (task, steps, outcome) of `outcomes[cell]`."""
    cells = plan_cells(settings.faults, settings.defenses)
    assert [c.name for c in cells] == list(outcomes)
    for cell in cells:
        episodes = [episode(f"{cell.name}-{t}", t, steps, outcome=o) for t, steps, o in outcomes[cell.name]]
        write_journal(folder / cell.folder / "journal.sqlite", *episodes)
    done = [msgspec.structs.replace(c, done=c.name != unfinished) for c in cells]
    write_manifest(folder, CampaignManifest(id="c1", settings=settings, cells=done))
    return folder


def test_rs_o_l_s_per_fault_and_tier_with_their_counts(tmp_path: Path) -> None:
    report = campaign_report(_campaign(tmp_path / "c"))
    plain, defended = report.faults
    # T_base = {t1, t2, t3}; under storm t1, t3 and t4 are solved (equation 1 counts t4, which the baseline failed)
    assert (plain.base_solved, plain.solved, plain.rs) == (3, 3, 1.0)
    # injected: all 4; triggered: t1 (acted on the copy) and t4 (stray defense); fixed: none; solved of those: t1, t4
    assert (plain.injected, plain.triggered, plain.fixed, plain.final_success) == (4, 2, 0, 2)
    assert (plain.o, plain.l, plain.s) == (0.5, 0.0, 1.0)
    assert (defended.defense, defended.rs, defended.o, defended.l, defended.s) == ("dedup", 1.0, 1.0, 1.0, 1.0)
    tiers = {(t.defense, t.tier): (t.triggered, t.fixed, t.final_success, t.o, t.l) for t in report.tiers}
    assert tiers[("", "reasoning")] == (1, 0, 1, 0.25, 0.0)
    assert tiers[("", "rule")] == (2, 0, 2, 0.5, 0.0)
    assert tiers[("", "mechanism")] == (0, 0, 0, 0.0, None)
    assert tiers[("dedup", "rule")] == (4, 4, 4, 1.0, 1.0)
    behaviours = {(b.defense, b.behaviour): (b.tier, b.units, b.repaired, b.solved) for b in report.behaviours}
    assert behaviours == {
        ("", "acted_on_copy"): ("rule", 1, 0, 1),
        ("", "defense_filtered"): ("rule", 1, 0, 1),
        ("dedup", "defense_filtered"): ("rule", 4, 4, 4),
    }
    [effect] = report.effects
    assert (effect.fault, effect.defense, effect.delta) == ("storm", "dedup", 0.0)
    assert (report.summary.cells_done, report.summary.episodes, report.summary.rs) == (4, 16, "paper")


def test_rs_baseline_solved_counts_only_the_baselines_successes(tmp_path: Path) -> None:
    report = campaign_report(_campaign(tmp_path / "c"), rs="baseline-solved")
    plain, defended = report.faults
    # of T_base = {t1, t2, t3}, storm solved t1 and t3; t4 it solved does not count
    assert (plain.base_solved, plain.solved) == (3, 2) and plain.rs == pytest.approx(2 / 3)
    assert (defended.base_solved, defended.solved, defended.rs) == (4, 4, 1.0)
    [effect] = report.effects
    assert effect.delta == pytest.approx(1 / 3)
    assert (plain.o, plain.l, plain.s) == (0.5, 0.0, 1.0)  # equation 2 does not depend on it
    assert report.summary.rs == "baseline-solved"
    assert report.definitions()["RS_f"] == RS_VARIANTS["baseline-solved"] != DEFINITIONS["RS_f"]


def test_rs_of_equation_1_exceeds_1_when_the_fault_cell_solves_what_the_baseline_failed(tmp_path: Path) -> None:
    """Baseline: t1 solved, t2 failed; under storm both solved: 2/1 as the paper counts, 1/1 of the baseline's."""
    settings = CampaignSettings(
        domain="retail", model="sim", tasks=["t1", "t2"], trials=1, seed=0, faults=["storm"], defenses=[]
    )
    outcomes: Outcomes = {
        "baseline": [("t1", [], "success"), ("t2", [], "failure")],
        "storm": [("t1", SILENT, "success"), ("t2", SILENT, "success")],
    }
    _write(tmp_path, settings, outcomes)
    (paper,) = campaign_report(tmp_path).faults
    (kept,) = campaign_report(tmp_path, rs="baseline-solved").faults
    assert (paper.solved, paper.base_solved, paper.rs) == (2, 1, 2.0)
    assert (kept.solved, kept.base_solved, kept.rs) == (1, 1, 1.0)


def test_an_unknown_way_of_counting_rs_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="paper, baseline-solved"):
        campaign_report(_campaign(tmp_path / "c"), rs="intersection")  # type: ignore[arg-type]


def test_report_command_counts_rs_as_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _campaign(tmp_path / "c")
    rs = {}
    for variant in ("paper", "baseline-solved"):
        assert main(["report", str(folder), "--json", "--rs", variant]) == 0
        lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        rs[variant] = [(line["rs"], line["solved"]) for line in lines if line["type"] == "fault"]
        assert lines[-1]["rs"] == variant
    assert rs == {"paper": [(1.0, 3), (1.0, 4)], "baseline-solved": [(pytest.approx(2 / 3), 2), (1.0, 4)]}


def test_an_unfinished_cell_is_left_out(tmp_path: Path) -> None:
    report = campaign_report(_campaign(tmp_path / "c", last_done=False))
    assert [(r.fault, r.defense) for r in report.faults] == [("storm", "")]
    assert report.effects == [] and report.summary.cells_done == 3


def test_report_command_prints_json_lines_and_writes_html_and_a_heatmap(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _campaign(tmp_path / "c")
    page, plot = tmp_path / "r.html", tmp_path / "r.png"
    assert main(["report", str(folder), "--json", "--html", str(page), "--plot", str(plot)]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["type"] for line in lines].count("fault") == 2 and lines[-1]["type"] == "summary"
    assert lines[-1]["note"].startswith("sim ")
    text = page.read_text()
    assert "acted_on_copy" in text and "http" not in text.replace("http-equiv", "")  # nothing fetched from elsewhere
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"tEXtDescription\x00note: " + lines[-1]["note"].encode() in plot.read_bytes()
    assert html.escape(lines[-1]["note"]) in " ".join(text.split())


def test_report_of_a_folder_without_a_campaign_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path)]) == 1
    assert (
        capsys.readouterr().err == f"faultline: error: {tmp_path} is not a campaign folder: it has no manifest.json\n"
    )


def test_a_campaign_folder_of_other_settings_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _campaign(tmp_path / "c")
    before = (folder / "manifest.json").read_bytes()
    assert main(["campaign", "--model", "sim", "--tasks", "4", "--faults", "storm", "--out", str(folder)]) == 1
    err = capsys.readouterr().err
    assert (
        err == f"faultline: error: {folder} holds a campaign with other settings (tasks, defenses): use another --out\n"
    )
    assert (folder / "manifest.json").read_bytes() == before


def test_a_fault_that_changed_nothing_an_agent_acted_on_counts_as_no_effect(tmp_path: Path) -> None:
    """A storm whose copy nobody answered left every agent doing what it did without the fault: no effect; one
    whose copy the user answered did change what happened, whether the unit was solved or not."""
    reply = AssistantTurn(text="Your order A1 is cancelled.")
    sent = msgspec.to_builtins(Envelope(id="m1", episode="x", sender="tool", recipient="user", body=reply))
    storm = FaultApplied(rule_id="r1", fault="storm", original=sent, results=[{"id": "m1"}, {"id": "m2"}])
    ignored: list[Step] = [("tool", "user", reply), ("tool", "user", reply), ("tool", "", storm)]
    answered: list[Step] = [*ignored, ("user", "tool", UserTurn(text="You said that already."))]
    settings = CampaignSettings(
        domain="retail", model="sim", tasks=["t1", "t2"], trials=1, seed=0, faults=["storm"], defenses=[]
    )
    sent_once: list[Step] = [("tool", "user", reply)]
    outcomes: Outcomes = {
        "baseline": [("t1", sent_once, "success"), ("t2", sent_once, "success")],
        "storm": [("t1", ignored, "success"), ("t2", answered, "success")],
    }
    (row,) = campaign_report(_write(tmp_path, settings, outcomes)).faults
    assert (row.injected, row.no_effect, row.rs) == (2, 1, 1.0)


def test_the_simulators_own_mistake_labels_in_a_tally_change_no_count(tmp_path: Path) -> None:
    """A tally carries the sim model's labels of its mistakes: a faulted run whose tally's labels differ from
    the baseline's (and whose storm copied the tally) did what the baseline did, so the fault had no effect."""
    reply = AssistantTurn(text="Your order A1 is cancelled.")
    labelled = Tally(tokens=5, mistakes=[{"category": "wrong_entity", "step": 1, "intended": "A1", "made": "A2"}])
    sent = msgspec.to_builtins(Envelope(id="m2", episode="x", sender="tool", recipient="env", body=labelled))
    storm = FaultApplied(rule_id="r1", fault="storm", original=sent, results=[{"id": "m2"}, {"id": "m3"}])
    scrambled = Tally(tokens=5, mistakes=[{"category": "early_stop", "step": 0, "intended": "x", "made": "y"}])
    settings = CampaignSettings(
        domain="retail", model="sim", tasks=["t1"], trials=1, seed=0, faults=["storm"], defenses=[]
    )
    outcomes: Outcomes = {
        "baseline": [("t1", [("tool", "user", reply), ("tool", "env", Tally(tokens=5))], "success")],
        "storm": [("t1", [("tool", "user", reply), ("tool", "env", labelled), ("tool", "env", scrambled),
                          ("tool", "", storm)], "success")],
    }  # fmt: skip
    (row,) = campaign_report(_write(tmp_path, settings, outcomes)).faults
    assert (row.injected, row.no_effect) == (1, 1)


REFUSED = "the injector's answer holds no <rewrite> block (a refusal or a malformed answer)"
UNCHANGED = "the injector returned the message unchanged"
NO_REASON = "no reason journaled"


def _skip(reason: str, fault: str = "hallucination") -> Step:
    return ("tool", "user", FaultSkipped(rule_id="r1", fault=fault, original={"id": "m1"}, reason=reason))


def _skipping_campaign(folder: Path) -> Path:
    """storm: applied in t1, skipped (and never applied) in t2; hallucination: skipped in both, thrice in all."""
    settings = CampaignSettings(
        domain="retail", model="sim", tasks=["t1", "t2"], trials=1, seed=0, faults=["storm", "hallucination"],
        defenses=[],
    )  # fmt: skip
    outcomes: Outcomes = {
        "baseline": [("t1", [], "success"), ("t2", [], "success")],
        "storm": [("t1", SILENT, "success"), ("t2", [_skip(UNCHANGED, "storm")], "success")],
        "hallucination": [("t1", [_skip(REFUSED), _skip(REFUSED)], "success"), ("t2", [_skip("")], "failure")],
    }
    return _write(folder, settings, outcomes)


def test_skipped_injections_are_counted_per_cell_with_their_commonest_reasons(tmp_path: Path) -> None:
    storm, hallucination = campaign_report(_skipping_campaign(tmp_path)).faults
    assert (storm.injected, storm.skipped, storm.skipped_units, storm.all_skipped) == (1, 1, 1, False)
    assert storm.skip_reasons == [SkipReason(reason=UNCHANGED, count=1)]
    assert (hallucination.injected, hallucination.skipped, hallucination.skipped_units) == (0, 3, 2)
    assert hallucination.all_skipped and hallucination.o is None
    assert hallucination.skip_reasons == [SkipReason(reason=REFUSED, count=2), SkipReason(reason=NO_REASON, count=1)]


def test_report_says_plainly_that_every_injection_of_a_cell_was_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _skipping_campaign(tmp_path)
    assert main(["report", str(folder), "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    [skipped] = [r for r in rows if r["type"] == "fault" and r["fault"] == "hallucination"]
    assert (skipped["skipped"], skipped["skipped_units"], skipped["all_skipped"]) == (3, 2, True)
    assert skipped["skip_reasons"] == [{"reason": REFUSED, "count": 2}, {"reason": NO_REASON, "count": 1}]
    monkeypatch.setenv("COLUMNS", "600")
    assert main(["report", str(folder)]) == 0
    lines = capsys.readouterr().out.splitlines()
    [row] = [line for line in lines if "│ hallucination " in line]
    assert "(0/0)" not in row and row.count("- (all skipped)") == 3
    assert f"all 3, no unit faulted: {REFUSED} (×2); {NO_REASON} (×1)" in row
    [row] = [line for line in lines if "│ storm " in line]
    assert f"1, 1 unit never faulted: {UNCHANGED} (×1)" in row


TURN = UserTurn(text="I want to return the blue kettle.")
QUESTION = AssistantTurn(text="Could you please tell me your email?")
ANSWER = UserTurn(text="It is omar@example.com.")
ASKED_ANYWAY: list[Step] = [("user", "tool", TURN), ("tool", "user", QUESTION, "m1"), ("user", "tool", ANSWER, "m2")]
"""The fault-free run of a unit: the tool asks for the user's email, as it always does."""


def _copied(fault: str, *dropped: Step) -> list[Step]:
    """The user's turn m1 delivered unchanged and a copy m2 (to env for a broadcast, to tool for a storm), then
    (after `dropped`, a defense's drop of the copy) the question and answer of `ASKED_ANYWAY`."""
    sent = Envelope(id="m1", episode="x", sender="user", recipient="tool", body=TURN)
    copy = msgspec.structs.replace(sent, id="m2", recipient="env" if fault == "broadcast" else "tool")
    results = [msgspec.to_builtins(sent), msgspec.to_builtins(copy)]
    applied = FaultApplied(rule_id="r1", fault=fault, original=msgspec.to_builtins(sent), results=results)
    at = 4 + len(dropped)
    return [
        ("user", "tool", TURN),
        ("user", "env" if fault == "broadcast" else "tool", TURN),
        ("user", "", applied, "m1"),
        *dropped,
        ("tool", "user", QUESTION, "m1"),
        ("user", "tool", ANSWER, f"m{at}"),
    ]


def test_a_question_the_baseline_asks_too_is_no_response_to_the_fault(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A broadcast also delivered the user's turn to env, which ignored it, and the tool asked what it asks without
    the fault (t1): no behaviour fired there, and the unit is one of no effect. The baseline of t2 asked nothing, so
    there the same question answers the fault: asked_user, repaired. The judge is shown the same evidence: the sim
    judge, which takes a question to the user for "asks the user", credits it in t2 only."""
    settings = CampaignSettings(
        domain="retail", model="sim", tasks=["t1", "t2"], trials=1, seed=0, faults=["broadcast"], defenses=[]
    )
    outcomes: Outcomes = {
        "baseline": [("t1", ASKED_ANYWAY, "success"), ("t2", [], "success")],
        "broadcast": [("t1", _copied("broadcast"), "success"), ("t2", _copied("broadcast"), "success")],
    }
    folder = _write(tmp_path, settings, outcomes)
    report = campaign_report(folder)
    (row,) = report.faults
    assert (row.injected, row.triggered, row.fixed, row.final_success) == (2, 1, 1, 1)
    assert (row.o, row.l, row.s, row.no_effect, row.cancelled) == (0.5, 1.0, 1.0, 1, 0)
    assert [(b.behaviour, b.units, b.repaired) for b in report.behaviours] == [("asked_user", 1, 1)]
    assert main(["report", str(folder), "--behaviours", "judged", "--model", "sim", "--json"]) == 0
    judged = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    units = {r["behaviour"]: r["units"] for r in judged if r["type"] == "behaviour"}
    assert units["asks the user for key information"] == 1


def test_a_fault_a_defense_cancelled_is_labelled_so_not_nothing_to_tolerate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A storm's copy nobody answered had nothing to tolerate; the same copy dropped by dedup was met, and the
    defense tolerated it: both leave the agents doing what they do without the fault."""
    settings = CampaignSettings(
        domain="retail", model="sim", tasks=["t1"], trials=1, seed=0, faults=["storm"], defenses=["dedup"]
    )
    drop: Step = ("tool", "", DefenseFired(defense="dedup", agent="tool", message_id="m2"), "m2")
    outcomes: Outcomes = {
        "baseline": [("t1", ASKED_ANYWAY, "success")],
        "storm": [("t1", _copied("storm"), "success")],
        "baseline+dedup": [("t1", ASKED_ANYWAY, "success")],
        "storm+dedup": [("t1", _copied("storm", drop), "success")],
    }
    folder = _write(tmp_path, settings, outcomes)
    plain, defended = campaign_report(folder).faults
    assert (plain.no_effect, plain.cancelled, plain.triggered) == (1, 0, 0)
    assert (defended.no_effect, defended.cancelled, defended.triggered, defended.fixed) == (1, 1, 1, 1)
    monkeypatch.delenv("COLUMNS", raising=False)
    assert main(["report", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "1/1 (all: nothing to tolerate)" in out and "1/1 (all: cancelled by a defense)" in out
    assert out.count("(all: nothing to tolerate)") == 1


def test_a_cycle_breaker_that_drops_the_echo_is_no_repair_when_the_message_is_lost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shape a sim cycle campaign leaves: the cycle sends the user's first turn back to the user. Without a
    defense the user hears its own words and says them again, and the task is solved; with the cycle breaker the
    echo is dropped and the tool never gets the turn, and the episode times out. The breaker fired (O 1/1) and
    repaired nothing (L 0/1): MAS-FIRE's ✗ in the rule tier, not a local repair that S_f then contradicts."""
    settings = CampaignSettings(
        domain="retail", model="sim", tasks=["t1", "t2"], trials=1, seed=0, faults=["cycle"], defenses=["cycle"]
    )
    cycle = addressed("m1", "user", "tool", ("m1", "user"), fault="cycle")
    heard: list[Step] = [
        ("user", "user", TURN),
        ("user", "", cycle),
        ("user", "tool", TURN, "m1"),
        ("tool", "user", QUESTION, "m3"),
        ("user", "tool", ANSWER, "m4"),
    ]
    dropped: list[Step] = [
        ("user", "user", TURN),
        ("user", "", cycle),
        ("user", "", DefenseFired(defense="cycle", agent="user", message_id="m1"), "m1"),
    ]
    outcomes: Outcomes = {
        "baseline": [(t, ASKED_ANYWAY, "success") for t in settings.tasks],
        "cycle": [(t, heard, "success") for t in settings.tasks],
        "baseline+cycle": [(t, ASKED_ANYWAY, "success") for t in settings.tasks],
        "cycle+cycle": [(t, dropped, "timeout") for t in settings.tasks],
    }
    report = campaign_report(_write(tmp_path, settings, outcomes))
    plain, defended = report.faults
    # without the breaker the user passed its echoed turn on as it was: MAS-FIRE's "receives cyclic messages without
    # impact", failed in rule (nothing filtered it), repaired in reasoning
    assert (plain.injected, plain.triggered, plain.fixed, plain.final_success) == (2, 2, 0, 2)
    tiers = {(t.defense, t.tier): (t.triggered, t.fixed) for t in report.tiers}
    assert (tiers[("", "rule")], tiers[("", "reasoning")]) == ((2, 0), (2, 2))
    assert (defended.injected, defended.triggered, defended.fixed, defended.final_success) == (2, 2, 0, 0)
    assert (defended.o, defended.l, defended.s, defended.rs) == (1.0, 0.0, 0.0, 0.0)
    rule = next(t for t in report.tiers if (t.defense, t.tier) == ("cycle", "rule"))
    assert (rule.triggered, rule.fixed, rule.l) == (2, 0, 0.0)
    [filtered] = [b for b in report.behaviours if b.defense == "cycle"]
    assert (filtered.behaviour, filtered.units, filtered.repaired, filtered.failed) == ("defense_filtered", 2, 0, 2)
    [received] = [b for b in report.behaviours if b.defense == ""]
    assert (received.behaviour, received.units, received.repaired, received.failed) == ("echo_received", 2, 0, 2)
    monkeypatch.delenv("COLUMNS", raising=False)
    assert main(["report", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    [breaker] = [line for line in out.splitlines() if "│ defense_filtered" in line]
    assert "✗ 2" in breaker and "✓" not in breaker
    assert main(["report", str(tmp_path), "--behaviours", "judged", "--model", "sim", "--json"]) == 0
    judged = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    rows = {(r["defense"], r["behaviour"]): (r["repaired"], r["failed"]) for r in judged if r["type"] == "behaviour"}
    assert rows == {
        ("cycle", "system drops the faulted message, which never arrives"): (0, 2),
        ("", "receives cyclic messages without impact"): (0, 2),
    }


@pytest.mark.parametrize(
    ("recorded", "completed", "injected"),
    [
        (True, 2, set()),
        (False, 4, {("t1", 0), ("t3", 0)}),  # journaled before starts recorded their run: by the ids, both runs
    ],
    ids=["runs recorded", "runs not recorded"],
)
def test_a_cell_is_read_from_its_runs_episodes_only(
    tmp_path: Path, recorded: bool, completed: int, injected: set[tuple[str, int]]
) -> None:
    """Run c1-1 solved t1 and t2; run c1-1-x, whose ids all begin with c1-1's, failed t1 and t3 under a fault."""
    run, other = ("c1-1", "c1-1-x") if recorded else ("", "")
    journal = write_journal(
        tmp_path / "shared.sqlite",
        episode("c1-1-t1-t0", "t1", [], run=run),
        episode("c1-1-t2-t0", "t2", [], run=run),
        episode("c1-1-x-t1-t0", "t1", GAVE_UP, outcome="failure", run=other),
        episode("c1-1-x-t3-t0", "t3", SILENT, outcome="failure", run=other),
    )
    cell, count = read_cell(journal, "c1-1")
    assert (count, cell.solved, cell.injected) == (completed, {("t1", 0), ("t2", 0)}, injected)
    if recorded:
        other_cell, other_count = read_cell(journal, "c1-1-x")
        assert (other_count, other_cell.solved, other_cell.injected) == (2, set(), {("t1", 0), ("t3", 0)})
