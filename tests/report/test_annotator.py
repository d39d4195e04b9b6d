"""The behaviour annotator: its answer format, the sim judge on hand-made episodes, the judged report, and a real
OpenAI-compatible server answering through the `openai` client."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faultline._errors import AnswerFormatError
from faultline.cli import main
from faultline.core import (
    AssistantTurn,
    FaultApplied,
    Start,
    Tally,
    ToolCall,
    ToolResult,
    UserTurn,
)
from faultline.report import (
    ANNOTATIONS,
    Annotation,
    CampaignCell,
    CellResult,
    EpisodeCase,
    EpisodeTrace,
    JudgedBehaviour,
    TierMarks,
    annotate_episodes,
    annotation_request,
    episode_case,
    parse_annotation,
)
from faultline.report._annotator import judged_behaviours
from faultline.report._metrics import behaviour_rows, tier_rows
from faultline.runtime.models import OpenAIBackend, SimBackend
from tests.openai_server import OpenAIServer, Text

from .journals import Step, episode, faulted
from .test_metrics import _campaign

GOOD = {
    "behaviours": [{"name": "Asks the user", "tiers": {"mechanism": "succeeded", "reasoning": "succeeded"}, "step": 3}],
    "rationale": "it asked",
}


def test_an_answer_in_the_format_is_read_fenced_or_not() -> None:
    expected = Annotation(
        behaviours=[
            JudgedBehaviour(name="Asks the user", tiers={"mechanism": "succeeded", "reasoning": "succeeded"}, step=3)
        ],
        rationale="it asked",
    )
    assert parse_annotation(json.dumps(GOOD)) == expected
    assert parse_annotation("```json\n" + json.dumps(GOOD) + "\n```") == expected
    assert parse_annotation('{"behaviours": []}') == Annotation(behaviours=[])


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        ("I think the agent asked the user.", "not one JSON object"),
        ('Sure! {"behaviours": []}', "not one JSON object"),
        ('{"rationale": "r"}', "missing required field `behaviours`"),
        (
            '{"behaviours": [{"name": "x", "tiers": {"luck": "succeeded"}}]}',
            "'luck' - at `key` in `$.behaviours[0].tiers`",
        ),
        ('{"behaviours": [{"name": "x", "tiers": {}}]}', "length >= 1 - at `$.behaviours[0].tiers`"),
        ('{"behaviours": [{"name": "x", "tiers": {"rule": "maybe"}}]}', "'maybe' - at `$.behaviours[0].tiers[...]`"),
        ('{"behaviours": [{"name": "x", "tiers": ["rule"]}]}', "got `array` - at `$.behaviours[0].tiers`"),
        ('{"behaviours": [], "verdict": "yes"}', "unknown field `verdict`"),
        (json.dumps({"behaviours": [GOOD["behaviours"][0]] * 9}), "length <= 8 - at `$.behaviours`"),
    ],
    ids=[
        "prose",
        "prose-around",
        "missing-key",
        "unknown-tier",
        "no-tier",
        "bad-outcome",
        "tier-list",
        "extra-key",
        "too-many",
    ],  # fmt: skip
)
def test_a_malformed_answer_is_an_error_that_says_what_is_wrong(answer: str, error: str) -> None:
    with pytest.raises(AnswerFormatError, match="annotation: .*" + error.replace("[", r"\[").replace("$", r"\$")):
        parse_annotation(answer)


def _case(steps: list[Step], *, outcome: str = "success", name: str = "e1") -> EpisodeCase:
    envelopes = episode(name, "t1", steps, outcome=outcome)
    return episode_case(name, "t1", 0, list(enumerate(envelopes, 1)))


def _sim(case: EpisodeCase) -> Annotation:
    return parse_annotation(SimBackend().respond(annotation_request(case)).content)


def _storm(*copy_answer: Step) -> list[Step]:
    turn = AssistantTurn(text="Your order ships Monday.")
    return [
        ("tool", "user", turn),
        ("tool", "user", turn),
        (
            "user",
            "tool",
            FaultApplied(rule_id="r1", fault="storm", original={"id": "m1"}, results=[{"id": "m1"}, {"id": "m2"}]),
        ),
        *copy_answer,
    ]


def test_the_sim_judge_labels_what_the_trajectory_shows() -> None:
    """Copies nobody answered: duplicates did not affect behaviour (reasoning, succeeded); a copy the user answered
    (the detectors' acted_on_copy): abnormal behaviour, failed in rule and reasoning as Table 2 marks it; a question
    about a rewritten instruction that the user answered: mechanism and reasoning, succeeded (from the detectors'
    evidence)."""
    [ignored] = _sim(_case(_storm())).behaviours
    assert (ignored.name, ignored.tiers) == ("duplicates do not affect behaviour", {"reasoning": "succeeded"})
    [answered] = _sim(_case(_storm(("user", "tool", UserTurn(text="Thanks, again?"), "m2")))).behaviours
    assert (answered.name, answered.tiers, answered.step) == (
        "duplicates cause abnormal behaviour",
        {"rule": "failed", "reasoning": "failed"},
        4,
    )
    rewritten: list[Step] = [
        ("runner", "user", FaultApplied(rule_id="r1", fault="instruction_ambiguity", original={"id": "m2"}, results=[{"id": "m2"}])),
        ("runner", "user", Start(text="Return the thing.")),
        ("user", "tool", UserTurn(text="I want to return the thing."), "m2"),
        ("tool", "user", AssistantTurn(text="Which order do you mean?"), "m3"),
        ("user", "tool", UserTurn(text="Order A1."), "m4"),
    ]  # fmt: skip
    [asked] = _sim(_case(rewritten)).behaviours
    assert (asked.name, asked.tiers, asked.step) == (
        "asks the user for key information", {"mechanism": "succeeded", "reasoning": "succeeded"}, 4,
    )  # fmt: skip


def test_the_judge_is_not_shown_a_sighting_the_fault_free_run_shows_too() -> None:
    """A storm copied the user's turn and the tool asked what it asks without the fault: read against the unit's
    fault-free run, the question is no evidence, and the sim judge (which takes a question to the user for "asks
    the user") sees only the copy nobody answered."""
    turn, question = UserTurn(text="I want to return the blue kettle."), AssistantTurn(text="Your email, please?")
    answer = UserTurn(text="It is omar@example.com.")
    plain: list[Step] = [("user", "tool", turn), ("tool", "user", question, "m1"), ("user", "tool", answer, "m2")]
    baseline = EpisodeTrace.of(list(enumerate(episode("e0", "t1", plain), 1))).acts()
    storm: list[Step] = [
        ("user", "tool", turn),
        ("user", "tool", turn),
        ("user", "", faulted("m1", "m1", "m2")),
        ("tool", "user", question, "m1"),
        ("user", "tool", answer, "m4"),
    ]
    steps = list(enumerate(episode("e1", "t1", storm), 1))
    assert [e["behaviour"] for e in episode_case("e1", "t1", 0, steps).evidence] == ["asked_user"]
    case = episode_case("e1", "t1", 0, steps, baseline)
    assert case.evidence == []
    assert [b.name for b in _sim(case).behaviours] == ["duplicates do not affect behaviour"]


def test_a_behaviour_may_succeed_in_one_tier_and_fail_in_another() -> None:
    """The faulted call failed and so did the agent's next one: the sim judge answers MAS-FIRE's "responds to the
    error but ultimately fails", succeeded in mechanism (the retry ran) and failed in reasoning. The report counts
    it as repairing the fault in mechanism only, and not overall."""
    steps: list[Step] = [
        ("tool", "", faulted("m9", "m9", fault="argument_error")),
        ("env", "tool", ToolResult(call_id="c1", name="get_order", error="unknown order 'A2'"), "m9"),
        ("env", "tool", ToolResult(call_id="c2", name="get_order", error="unknown order 'A3'")),
    ]
    case = _case(steps, outcome="failure")
    annotation = _sim(case)
    [judged] = annotation.behaviours
    assert (judged.name, judged.tiers) == (
        "responds to the error but ultimately fails",
        {"mechanism": "succeeded", "reasoning": "failed"},
    )
    [seen] = judged_behaviours(case, annotation, fault_pos=2)
    assert (seen.repaired, seen.failed_in) == (False, ["reasoning"])
    assert [seen.repaired_in(t) for t in ("mechanism", "reasoning", None)] == [True, False, False]
    unit = ("t1", 0)
    result = CellResult(solved=set(), injected={unit}, behaviours={unit: [seen]})
    cell = CampaignCell(fault="argument_error")
    [row] = behaviour_rows(cell, result)
    assert row.by_tier == {
        "mechanism": TierMarks(repaired=1, failed=0),
        "reasoning": TierMarks(repaired=0, failed=1),
    }
    assert (row.repaired, row.failed) == (0, 1)
    fixed = {t.tier: (t.triggered, t.fixed) for t in tier_rows(cell, result)}
    assert fixed["mechanism"] == (1, 1) and fixed["reasoning"] == (1, 0)


def test_the_annotator_never_sees_the_simulators_labels_or_the_outcome() -> None:
    """A tally that labels a mistake and a failed outcome reach neither the prompt nor the sim judge: the answer is
    the one for the same trajectory without them, and here the trajectory shows no response to the fault."""
    silent: list[Step] = [
        ("tool", "env", ToolCall(call_id="c1", name="get_order", arguments={"order_id": "A2"})),
        ("user", "tool", FaultApplied(rule_id="r1", fault="hallucination", original={"id": "m3"}, results=[{"id": "m3"}])),
        ("env", "tool", ToolResult(call_id="c1", name="get_order", output={"status": "shipped"}), "m1"),
    ]  # fmt: skip
    label = ("tool", "", Tally(mistakes=[{"category": "wrong_entity", "step": 1, "recovered": True}]))
    case = _case([*silent, label], outcome="failure")
    request = annotation_request(case)
    shown = json.dumps(request.metadata) + "".join(m.content or "" for m in request.messages)
    assert "wrong_entity" not in shown and "recovered" not in shown and "failure" not in shown
    assert _sim(case) == _sim(_case(silent)) and _sim(case).behaviours == []


def _lines(capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_the_judged_report_counts_the_judges_behaviours_in_every_tier_they_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The campaign of test_metrics: t1 asked the user in answer to a storm's copy (duplicates caused abnormal
    behaviour: rule and reasoning, failed in both), t4's defense dropped a stray message (rule, failed), and with
    dedup every copy was dropped (rule, succeeded). The rule detectors count t1's acted_on_copy in the same two
    tiers."""
    folder = _campaign(tmp_path / "c")
    assert main(["report", str(folder), "--behaviours", "judged", "--model", "sim", "--json"]) == 0
    lines = _lines(capsys)
    tiers = {(t["defense"], t["tier"]): (t["triggered"], t["fixed"]) for t in lines if t["type"] == "tier"}
    assert tiers[("", "mechanism")] == (0, 0) and tiers[("", "reasoning")] == (1, 0) and tiers[("", "rule")] == (2, 0)
    rows = {
        (b["defense"], b["behaviour"]): (b["tiers"], b["repaired"], b["failed"])
        for b in lines
        if b["type"] == "behaviour"
    }
    tiers_named, repaired, failed = rows[("", "duplicates cause abnormal behaviour")]
    assert (sorted(tiers_named), repaired, failed) == (["reasoning", "rule"], 0, 1)
    assert rows[("", "system filters a stray message")] == ([], 0, 1)
    summary = lines[-1]
    assert (summary["behaviour_source"], summary["judge"], summary["annotated"], summary["recorded"]) == (
        "judged",
        "sim",
        8,
        0,
    )
    assert "the sim judge is a stand-in" in str(summary["note"])
    assert len((folder / ANNOTATIONS).read_bytes().splitlines()) == 8
    assert main(["report", str(folder), "--behaviours", "judged", "--model", "sim", "--json"]) == 0
    again = _lines(capsys)
    assert again[:-1] == lines[:-1] and again[-1]["recorded"] == 8
    assert main(["report", str(folder), "--behaviours", "judged", "--model", "sim"]) == 0
    text = capsys.readouterr().out
    assert "✓ 4" in text and "✗ 1" in text and "the sim judge is a stand-in" in text
    assert main(["report", str(folder), "--json"]) == 0
    rules = {(t["defense"], t["tier"]): t["triggered"] for t in _lines(capsys) if t["type"] == "tier"}
    assert (rules[("", "mechanism")], rules[("", "reasoning")], rules[("", "rule")]) == (0, 1, 2)


async def test_a_real_server_answers_through_the_openai_client_and_a_malformed_answer_is_reported(
    tmp_path: Path,
) -> None:
    """One episode gets the fixed annotation, the other an answer in prose: annotated, and not annotated with the
    reason. The request asked for the answer's JSON schema."""
    cases = [_case(_storm()), _case(_storm(), name="e2")]
    with OpenAIServer() as server:
        server.reply(Text(json.dumps(GOOD)), Text("The agent asked the user, I think."))
        async with OpenAIBackend(server.settings(max_retries=0)) as backend:
            judged, served = await annotate_episodes(cases, backend, judge="openai:test", folder=tmp_path)
        formats = [r.body.get("response_format") for r in server.requests]
    assert judged["e1"] == parse_annotation(json.dumps(GOOD)) and served == 0
    assert isinstance(judged["e2"], str) and "AnswerFormatError: annotation: not one JSON object" in judged["e2"]
    assert [f["type"] for f in formats] == ["json_schema"] * 2
    schema = formats[0]["json_schema"]["schema"]
    assert list(schema["properties"]) == ["behaviours", "rationale"]
    assert schema["properties"]["behaviours"]["maxItems"] == 8  # a schema-constrained model must close the list
    recorded = (tmp_path / ANNOTATIONS).read_text().splitlines()
    assert [json.loads(line)["episode"] for line in recorded] == ["e1", "e2"]  # the malformed answer is kept too
