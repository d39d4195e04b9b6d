"""What the FAMA analysts read: the trajectory alone by default, as in the paper, or with the task's
ground truth and the attribution when informed; and the sim analyst that judges from the trajectory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from faultline.cli import main
from faultline.envs import EARLY_STOP, POLICY_VIOLATION, WRONG_ENTITY, WRONG_VALUE
from faultline.replay import Attribution
from faultline.runtime import Config, FamaConfig, load_config
from faultline.runtime.models import SimBackend
from faultline.services.fama import (
    CATEGORIES,
    AnalystVerdict,
    Decisive,
    Deviation,
    Evidence,
    FailureCase,
    MainError,
    analyst_request,
    category,
    failure_cases,
    mitigation_request,
    orchestrator_request,
    parse_analyst,
    with_attribution,
)

GOLD = "#GOLD-ONLY-4711"
OUTPUT = "OUTPUT-ONLY-0815"
INSTRUCTION = "INSTRUCTION-ONLY cancel the order"
DECISIVE_AGENT = "DECISIVE-AGENT"
"""Strings that appear in the case's ground truth and attribution and nowhere in its trajectory."""

TRAJECTORY = [
    {"role": "user", "text": "Please cancel my order #W1001."},
    {"role": "call", "text": 'cancel_pending_order({"order_id":"#W1001"})'},
    {"role": "result", "text": "Error: order #W1001 is delivered; only pending orders can be cancelled"},
    {"role": "agent", "text": "I have done what I can for now. Goodbye."},
]
INFORMED = FailureCase(
    episode="r1-cancel-00-t0",
    domain="retail",
    task="cancel-00",
    model="m",
    outcome="failure",
    cause="final database differs from the ground truth",
    instruction=INSTRUCTION,
    trajectory=TRAJECTORY,
    gold_actions=[{"name": "cancel_pending_order", "arguments": {"order_id": GOLD}}],
    required_outputs=[OUTPUT],
    evidence=Evidence(
        deviations=[
            Deviation(
                turn=1,
                wrong={"name": "cancel_pending_order", "arguments": {"order_id": "#W1001"}},
                right={"name": "cancel_pending_order", "arguments": {"order_id": GOLD}},
                category=WRONG_ENTITY,
            )
        ],
        unfinished=[{"name": "cancel_pending_order", "arguments": {"order_id": GOLD}}],
        missing_outputs=[OUTPUT],
        ended_by="agent",
        decisive=Decisive(agent=DECISIVE_AGENT, step=1, category=WRONG_ENTITY, method="oracle-guided repair"),
        sources=["trajectory", "gold_actions", "required_outputs", "attribution"],
    ),
    analysts="informed",
)
TRAJECTORY_ONLY = msgspec.structs.replace(INFORMED, analysts="trajectory")
"""The same case for trajectory analysts: whatever else it holds, they must be shown none of it."""


def _requests(case: FailureCase) -> list[str]:
    """Every request of the three stages for `case`, encoded whole: prompt text and metadata."""
    verdicts = [AnalystVerdict(category=c.id, verdict=c.id == EARLY_STOP, rationale="r") for c in CATEGORIES]
    found = [analyst_request(case, cat, "judge") for cat in CATEGORIES]
    found += [orchestrator_request(case, verdicts, "judge")]
    found += [mitigation_request(case, MainError(main=[EARLY_STOP]), "judge")]
    return [msgspec.json.encode(request).decode() for request in found]


def test_the_papers_mode_is_the_default(tmp_path: Path) -> None:
    (tmp_path / "faultline.toml").write_text("[fama]\nenabled = true\n")
    assert load_config(tmp_path / "faultline.toml").fama.analysts == "trajectory"
    assert FamaConfig().analysts == Config().fama.analysts == "trajectory"


def test_a_trajectory_request_carries_no_gold_action_required_output_or_attribution() -> None:
    for request in _requests(TRAJECTORY_ONLY):
        for hidden in (GOLD, OUTPUT, INSTRUCTION, DECISIVE_AGENT, "oracle-guided repair", "Correct actions"):
            assert hidden not in request
    [analyst, *_] = _requests(TRAJECTORY_ONLY)
    assert "only pending orders can be cancelled" in analyst and "I have done what I can" in analyst
    # The grader's cause is written against the ground truth: the outcome alone is shown.
    assert "final database differs" not in analyst and "failure" in analyst
    assert TRAJECTORY_ONLY.shown() == ["trajectory"]


def test_an_informed_request_carries_the_ground_truth_and_the_attribution() -> None:
    [analyst, *_] = _requests(INFORMED)
    for shown in (GOLD, OUTPUT, INSTRUCTION, DECISIVE_AGENT):
        assert shown in analyst
    assert INFORMED.shown() == ["trajectory", "gold_actions", "required_outputs", "attribution"]


def test_a_case_journaled_before_the_choice_existed_is_shown_to_informed_analysts_as_it_was() -> None:
    old = {key: value for key, value in msgspec.to_builtins(INFORMED).items() if key != "analysts"}
    assert msgspec.convert(old, FailureCase) == INFORMED


def _journal(tmp_path: Path, capsys: pytest.CaptureFixture[str], rate: str = "early_stop=0.5") -> Path:
    journal = tmp_path / "journal.sqlite"
    run = ["run", "--tasks", "6", "--error-rate", rate, "--journal", str(journal), "--json"]
    assert main(run) == 0
    capsys.readouterr()
    return journal


def test_a_case_from_a_journal_is_a_trajectory_case_unless_informed_is_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = _journal(tmp_path, capsys)
    plain, informed = failure_cases(journal), failure_cases(journal, analysts="informed")
    assert plain and [c.trajectory for c in plain] == [c.trajectory for c in informed]
    for case in plain:
        assert (case.analysts, case.instruction, case.gold_actions, case.required_outputs) == ("trajectory", "", [], [])
        assert case.evidence == Evidence(ended_by=case.evidence.ended_by, sources=["trajectory"])
    assert all(c.analysts == "informed" and c.instruction for c in informed) and any(c.gold_actions for c in informed)
    attribution = Attribution(
        episode=plain[0].episode, method="oracle-guided repair", agent="tool", step=3, position=9, decided=True,
        flipped=True, category=WRONG_VALUE,
    )  # fmt: skip
    attributed = with_attribution(plain[0], attribution)
    assert attributed.evidence.decisive is not None and attributed.shown() == ["trajectory"]
    assert _requests(attributed) == _requests(plain[0])  # reported beside the verdicts, never shown


def _verdict(trajectory: list[dict[str, str]], category_id: str, ended_by: str = "agent") -> AnalystVerdict:
    case = FailureCase(
        episode="e",
        domain="retail",
        task="t",
        model="m",
        outcome="failure",
        trajectory=trajectory,
        evidence=Evidence(ended_by=ended_by),
        analysts="trajectory",
    )
    answer = SimBackend().respond(analyst_request(case, category(category_id), "judge"))
    return parse_analyst(answer.content, category_id)


def _turns(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"role": role, "text": text} for role, text in pairs]


REFUSED = _turns(
    ("user", "Please cancel my order #W1001."),
    ("call", 'cancel_pending_order({"order_id":"#W1001"})'),
    ("result", "Error: order #W1001 is delivered; only pending orders can be cancelled"),
    ("agent", "That order is already delivered, so it stays as it is. Goodbye."),
)
MISREAD = _turns(
    ("user", "Please ship order #W1001 to 1 Main Street, zip 12345."),
    ("call", 'modify_pending_order_address({"order_id":"#W1001","zip":"12348"})'),
    ("result", '{"order_id":"#W1001","status":"pending"}'),
    ("agent", "All done. Goodbye."),
)
OTHER_ORDER = _turns(
    ("user", "Please cancel my order #W1001."),
    ("call", 'get_user_details({"user_id":"ava_kim_1878"})'),
    ("result", '{"orders":["#W1001","#W2002"]}'),
    ("call", 'cancel_pending_order({"order_id":"#W2002"})'),
    ("result", '{"order_id":"#W2002","status":"cancelled"}'),
    ("agent", "All done. Goodbye."),
)
MISUNDERSTOOD = _turns(
    ("user", "Please cancel my order #W1001."),
    ("agent", "I have changed your address."),
    ("user", "That's not what I asked. To repeat: cancel my order #W1001."),
    ("agent", "All done. Goodbye."),
)
GAVE_UP = _turns(
    ("user", "Please cancel my order #W1001."),
    ("agent", "I have done what I can for now. Goodbye."),
)
NO_CALL_AFTER_YES = _turns(
    ("user", "Please cancel my order #W1001."),
    ("agent", "I am about to cancel #W1001. Shall I proceed (yes/no)?"),
    ("user", "Yes, please go ahead."),
    ("agent", "Thank you. Goodbye."),
)
SAME_FAILING_CALL = _turns(
    ("user", "Please cancel my order #W1001."),
    ("call", 'get_order_details({"order_id":"#W1001"})'),
    ("result", "Error: the service timed out"),
    ("call", 'get_order_details({"order_id":"#W1001"})'),
    ("result", "Error: the service timed out"),
    ("agent", "Thank you. Goodbye."),
)


@pytest.mark.parametrize(
    ("trajectory", "category_id", "turn", "cause"),
    [
        (REFUSED, POLICY_VIOLATION, 1, 3),
        (MISREAD, WRONG_VALUE, 1, 6),
        (OTHER_ORDER, WRONG_ENTITY, 3, 2),
        (MISUNDERSTOOD, WRONG_ENTITY, 1, 1),
        (GAVE_UP, EARLY_STOP, 1, 4),
        (NO_CALL_AFTER_YES, EARLY_STOP, 2, 3),
        (SAME_FAILING_CALL, EARLY_STOP, 3, 2),
    ],
    ids=["refused", "misread", "other-order", "misunderstood", "gave-up", "no-call-after-yes", "same-failing-call"],
)
def test_the_sim_analyst_in_trajectory_mode_judges_from_what_the_trajectory_shows(
    trajectory: list[dict[str, str]], category_id: str, turn: int, cause: int
) -> None:
    found = _verdict(trajectory, category_id)
    assert (found.verdict, found.turn, found.cause, found.evidence) == (True, turn, cause, ["trajectory"])
    others = [c for c in (POLICY_VIOLATION, WRONG_VALUE, WRONG_ENTITY) if c != category_id]
    assert [_verdict(trajectory, c).verdict for c in others] == [False] * len(others)


def test_a_refused_call_the_agent_made_again_with_success_is_recovered_and_a_limit_is_an_early_stop() -> None:
    retried = [
        *REFUSED[:3],
        {"role": "call", "text": 'cancel_pending_order({"order_id":"#W1002"})'},
        {"role": "result", "text": '{"status":"cancelled"}'},
    ]
    assert _verdict(retried, POLICY_VIOLATION).recovered and not _verdict(REFUSED, POLICY_VIOLATION).recovered
    assert _verdict(MISREAD, EARLY_STOP).verdict is False
    assert _verdict(MISREAD, EARLY_STOP, ended_by="limit").turn == len(MISREAD) - 1


def test_the_sim_analyst_in_trajectory_mode_answers_the_same_whatever_ground_truth_the_case_holds() -> None:
    bare = msgspec.structs.replace(
        TRAJECTORY_ONLY, instruction="", gold_actions=[], required_outputs=[], evidence=Evidence(ended_by="agent")
    )
    sim = SimBackend()
    for cat in CATEGORIES:
        answers = [sim.respond(analyst_request(case, cat, "judge")).content for case in (TRAJECTORY_ONLY, bare)]
        assert answers[0] == answers[1]
    informed = [sim.respond(analyst_request(INFORMED, c, "judge")).content for c in CATEGORIES]
    assert any("ground truth" in answer for answer in informed)


def _analysed(capsys: pytest.CaptureFixture[str], *command: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    assert main(["fama", "analyze", *command, "--model", "sim", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    return [line for line in lines if line["type"] == "case"], lines[-1]


def test_the_analysts_flag_reaches_the_analysts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    journal = _journal(tmp_path, capsys)
    plain, summary = _analysed(capsys, str(journal))
    assert plain and summary["analysts"] == "trajectory"
    verdicts = [v for c in plain for v in c["analysis"]["verdicts"]]
    assert all(v["evidence"] == ["trajectory"] and "ground truth" not in v["rationale"] for v in verdicts)
    informed, summary = _analysed(capsys, str(journal), "--analysts", "informed")
    assert summary["analysts"] == "informed" and len(informed) == len(plain)
    verdicts = [v for c in informed for v in c["analysis"]["verdicts"]]
    assert all(v["evidence"] == ["trajectory", "gold_actions", "required_outputs"] for v in verdicts)
    config = tmp_path / "faultline.toml"
    config.write_text('[fama]\nanalysts = "informed"\n')
    _, summary = _analysed(capsys, str(journal), "--config", str(config))
    assert summary["analysts"] == "informed"
    _, summary = _analysed(capsys, str(journal), "--config", str(config), "--analysts", "trajectory")
    assert summary["analysts"] == "trajectory"  # the flag over the file


@pytest.mark.parametrize(
    "command",
    [
        ["fama", "analyze", "JOURNAL", "--analysts", "gold"],
        ["fama", "loop", "--analysts", "gold"],
        ["fama", "analyze", "JOURNAL", "--config", "CONFIG"],
    ],
    ids=["analyze-flag", "loop-flag", "config-file"],
)
def test_a_bad_analysts_value_is_one_line_and_a_nonzero_exit(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "journal.sqlite").touch()
    (tmp_path / "faultline.toml").write_text('[fama]\nanalysts = "gold"\n')
    paths = {"JOURNAL": str(tmp_path / "journal.sqlite"), "CONFIG": str(tmp_path / "faultline.toml")}
    assert main([paths.get(part, part) for part in command]) != 0
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "gold" in err and "Traceback" not in err
    assert "analysts" in err
