"""The FAMA controller: its stages with the sim judge on real runs, and with the openai backend
against the test's server (scripted, malformed and refused answers)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from faultline._errors import AnswerFormatError, ConfigError
from faultline.api import SIM_NOTE
from faultline.cli import main
from faultline.cli._fama_counts import SIM_JUDGE_NOTE
from faultline.core import AgentHarness, Envelope, EpisodeCompleted, EpisodeStarted, MessageBody, Notice
from faultline.envs import EARLY_STOP, ERROR_CATEGORIES, WRONG_ENTITY, WRONG_VALUE
from faultline.journal import Journal, JournalReader
from faultline.runtime import Config, FamaConfig
from faultline.runtime.models import OpenAIBackend, SimBackend
from faultline.services.fama import (
    ANALYSIS,
    CATEGORIES,
    FAILED,
    MITIGATION,
    ROSTER,
    Deviation,
    Evidence,
    FailureCase,
    FamaController,
    MainError,
    case_message,
    choose_roster,
    failure_cases,
    joined,
    mitigation_request,
    parse_analyst,
    parse_main,
    parse_mitigation,
    serve_fama,
    task_rosters,
)
from tests.cli.test_report_paper import check_fama_paper
from tests.journal.conftest import incoming
from tests.openai_server import OpenAIServer, Status, Text

CASE = FailureCase(
    episode="r1-cancel-00-t0",
    domain="retail",
    task="cancel-00",
    model="m",
    outcome="failure",
    instruction="Cancel my order #W1.",
    trajectory=[{"role": "user", "text": "Cancel my order #W1."}, {"role": "agent", "text": "Done. Goodbye."}],
    gold_actions=[{"name": "cancel_pending_order", "arguments": {"order_id": "#W1"}}],
    evidence=Evidence(unfinished=[{"name": "cancel_pending_order", "arguments": {"order_id": "#W1"}}]),
)


def _verdict(yes: bool) -> Text:
    answer = {"verdict": "yes" if yes else "no", "cause": 4 if yes else 0, "rationale": "r", "evidence": ["trajectory"]}
    return Text("```json\n" + json.dumps(answer) + "\n```")


SCRIPT = [
    _verdict(False),
    _verdict(False),
    _verdict(False),
    _verdict(True),
    Text(json.dumps({"main": [EARLY_STOP], "recovered": [], "rationale": "it stopped"})),
    Text(json.dumps({"helpers": ["planner"], "rationale": "plans the rest"})),
]


def _notices(outputs: list[object]) -> list[Notice]:
    found = [o.body for o in outputs]  # type: ignore[attr-defined]
    assert all(isinstance(n, Notice) for n in found)
    return found  # type: ignore[return-value]


async def test_the_three_stages_ask_the_model_with_their_own_prompts_and_every_call_is_recorded() -> None:
    with OpenAIServer() as server:
        server.reply(*SCRIPT)
        async with OpenAIBackend(server.settings()) as backend:
            harness = AgentHarness(FamaController(), episode="fama-retail-m", backend=backend)
            [analysis] = _notices(await harness.deliver(case_message(CASE, FamaConfig())))
        systems = [r.body["messages"][0]["content"] for r in server.requests]
        formats = [r.body.get("response_format") for r in server.requests]
    assert analysis.text == ANALYSIS
    assert [v["verdict"] for v in analysis.data["verdicts"]] == [False, False, False, True]
    assert analysis.data["main"]["main"] == [EARLY_STOP]
    assert analysis.data["mitigation"]["helpers"] == ["planner"]
    assert [c.title in s for c, s in zip(CATEGORIES, systems, strict=False)] == [True] * 4
    assert "categories that made the task fail" in systems[4] and "fewest helpers" in systems[5]
    assert [f["type"] for f in formats] == ["json_schema"] * 6
    keys = [list(f["json_schema"]["schema"]["properties"]) for f in formats]
    assert keys == [["verdict", "cause", "turn", "recovered", "rationale"]] * 4 + [
        ["main", "recovered", "rationale"],
        ["helpers", "rationale"],
    ]
    assert formats[4]["json_schema"]["schema"]["properties"]["main"]["items"]["enum"] == [c.id for c in CATEGORIES]
    assert [r.call for r in harness.recordings] == ["llm"] * 6


@pytest.mark.parametrize(
    ("script", "error"),
    [
        ([Text("I'm sorry, but I can't help with that.")], "AnswerFormatError: analyst policy_violation"),
        ([Text('{"verdict": "maybe"}')], "verdict must be yes or no"),
        ([*SCRIPT[:4], Text('{"main": ["bad_luck"]}')], "unknown categories ['bad_luck']"),
        ([*SCRIPT[:5], Text('{"helpers": ["oracle"]}')], "unknown helper 'oracle'"),
        ([Status(500, "down")] * 3, "ModelError"),
    ],
    ids=["refused", "malformed-verdict", "unknown-category", "unknown-helper", "model-error"],
)
async def test_a_failed_stage_is_journaled_and_skipped_and_the_next_failure_is_analysed(
    script: list[Text | Status], error: str
) -> None:
    with OpenAIServer() as server:
        server.reply(*script)
        async with OpenAIBackend(server.settings()) as backend:
            harness = AgentHarness(FamaController(), episode="fama-retail-m", backend=backend)
            [failed] = _notices(await harness.deliver(case_message(CASE, FamaConfig())))
            server.reply(*SCRIPT)
            [analysed] = _notices(await harness.deliver(case_message(CASE, FamaConfig())))
    assert failed.text == FAILED and error in failed.data["error"] and failed.data["episode"] == CASE.episode
    assert analysed.text == ANALYSIS


@pytest.mark.parametrize(
    "answer",
    [
        'Here is my verdict: {"verdict": "Yes", "cause": 2, "turn": 1, "rationale": "it stopped {early}"} Thanks.',
        '```\n{"verdict": true, "cause": "2", "turn": 1}\n```',
        '{"verdict": "yes", "cause": 2, "turn": 1, "recovered": false, "rationale": "r"}\n\n\n',
    ],
    ids=["prose-around", "fenced-boolean", "trailing-whitespace"],
)
def test_an_analyst_answer_is_read_from_prose_or_a_fence_and_records_the_evidence_it_was_shown(answer: str) -> None:
    verdict = parse_analyst(answer, EARLY_STOP, ["trajectory", "gold_actions"])
    assert (verdict.verdict, verdict.cause, verdict.turn) == (True, 2, 1)
    assert verdict.evidence == ["trajectory", "gold_actions"]


def test_the_orchestrator_and_mitigation_answers_accept_names_as_a_small_model_writes_them() -> None:
    main_error = parse_main('{"main": "IFU", "recovered": ["Wrong Value"], "rationale": "r"}')
    assert (main_error.main, main_error.recovered) == ([EARLY_STOP], [WRONG_VALUE])
    assert parse_main('{"main": ["incomplete fulfilment or early stopping"]}').main == [EARLY_STOP]
    assert parse_main('{"main": ["wrong_value", "IFU", "wrong_value", "early_stop"]}').main == [WRONG_VALUE, EARLY_STOP]
    assert parse_mitigation('{"helpers": "Planner"}').helpers == ["planner"]
    with pytest.raises(AnswerFormatError, match="not one JSON object"):
        parse_main('{"main": ["early_stop"')


@pytest.mark.slow
def test_through_the_cli_only_the_judge_asks_the_server_for_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "journal.sqlite"
    endpoint = ["--model", "openai", "--model-name", "m", "--model-setting", "backoff_base_s=0"]
    with OpenAIServer() as server:
        run = ["run", "--tasks", "1", "--max-turns", "1", "--journal", str(journal), "--json"]
        assert main([*run, *endpoint, "--base-url", server.url]) in (0, 1)
        others = len(server.chat_requests)
        server.reply(*SCRIPT)
        assert main(["fama", "analyze", str(journal), "--json", *endpoint, "--base-url", server.url]) == 0
        formats = [r.get("response_format") for r in server.chat_requests]
        prompts = [r["messages"][-1]["content"] for r in server.chat_requests[others:]]
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["analysed"] == 1 and summary["categories"][EARLY_STOP] == 1
    assert summary["note"] == "", "a model's run judged by a model measures no simulator"
    assert others > 0 and formats[:others] == [None] * others
    assert [f["type"] for f in formats[others:]] == ["json_schema"] * 6
    assert all("# Trajectory" in p and "# Correct actions" not in p for p in prompts[:5])  # the paper's mode


@pytest.mark.slow
def test_a_judge_that_never_answers_in_the_form_is_an_error_not_an_empty_analysis(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A small real model timed out on every case: the command printed a table of `not analysed` rows, every
    category 0, and exited 0, as if there had been nothing to find."""
    journal = tmp_path / "journal.sqlite"
    endpoint = ["--model", "openai", "--model-name", "m", "--model-setting", "backoff_base_s=0"]
    with OpenAIServer() as server:  # its default reply echoes the prompt: never the JSON the analysts ask for
        run = ["run", "--tasks", "1", "--max-turns", "1", "--journal", str(journal), "--json"]
        assert main([*run, *endpoint, "--base-url", server.url]) in (0, 1)
        capsys.readouterr()
        assert main(["fama", "analyze", str(journal), *endpoint, "--base-url", server.url]) == 1
    out, err = capsys.readouterr()
    assert "not analysed" in out
    *logged, line = err.strip().splitlines()  # the controller's warning as the case failed, then the error
    assert line.startswith("faultline: error: none of the 1 failures could be analysed: AnswerFormatError"), line
    assert all("analysis of episode" in entry and "skipped" in entry for entry in logged), logged


def test_the_roster_is_what_a_share_of_the_window_recommends_once_there_are_enough_failures() -> None:
    settings = FamaConfig(window=4, share=0.5, min_failures=3)
    assert choose_roster([["dce"], ["dce"]], settings) == []
    assert choose_roster([["dce"], ["dce", "memory:6"], ["tor"]], settings) == ["dce"]
    assert choose_roster([["memory:6", "dce"], ["dce", "memory:6"], ["tor"]], settings) == ["dce", "memory:6"]


@pytest.mark.parametrize(
    ("written", "roster"),
    [
        ('{"helpers": ["dce", "memory:2"]}', ["dce", "memory:2"]),
        ('{"helpers": ["Memory : 10"]}', ["memory:10"]),
        ('{"helpers": ["memory"]}', ["memory:6"]),
    ],
)
def test_the_mitigation_agent_chooses_the_memory_turns(written: str, roster: list[str]) -> None:
    assert parse_mitigation(written).helpers == roster


@pytest.mark.parametrize("k", ["0", "11", "two", "-1", ""])
def test_a_memory_k_out_of_bounds_is_an_answer_format_error_that_names_the_bounds(k: str) -> None:
    with pytest.raises(AnswerFormatError, match=r"memory:K .* from 1 to 10"):
        parse_mitigation(json.dumps({"helpers": ["dce", f"memory:{k}"]}))


def test_the_mitigation_schema_offers_memory_with_each_k_and_the_prompt_says_how() -> None:
    request = mitigation_request(CASE, MainError(main=[WRONG_ENTITY]), "judge")
    [names] = [request.response_schema["properties"]["helpers"]["items"]["enum"]]
    assert {"memory", "memory:1", "memory:2", "memory:10", "verifier"} <= set(names) and "memory:11" not in names
    assert "memory:K" in request.messages[0].content and "K from 1 to 10" in request.messages[0].content


def test_votes_for_memory_count_together_and_memory_keeps_the_k_recommended_most() -> None:
    settings = FamaConfig(window=4, share=0.5, min_failures=3)
    assert choose_roster([["memory:2"], ["memory:6"], ["tor"]], settings) == ["memory:6"]  # tied: the latest
    assert choose_roster([["memory:2"], ["memory:2", "dce"], ["memory:6"], ["dce"]], settings) == ["dce", "memory:2"]


def test_a_joined_helper_stays_and_memory_takes_the_latest_k() -> None:
    assert joined(["dce", "memory:6"], ["memory:2", "planner"]) == ["dce", "planner", "memory:2"]
    assert joined(["tor"], []) == ["tor"]


def test_per_task_each_task_takes_the_helpers_recommended_for_its_own_failures() -> None:
    """The paper's use: a task's next roster is its own recommendations joined to its roster; the others keep theirs."""
    rosters = {"a": [], "b": ["dce"], "c": []}
    recommended = [("a", ["planner"]), ("b", ["memory:2"]), ("a", ["tor"])]
    assert task_rosters(recommended, rosters) == {"a": ["tor", "planner"], "b": ["dce", "memory:2"], "c": []}


async def test_the_live_controller_refuses_per_task_rosters() -> None:
    config = Config(fama=FamaConfig(enabled=True, rosters="per_task"))
    with pytest.raises(ConfigError, match="fama loop"):
        await serve_fama(config, "nats://127.0.0.1:1", "fl", "fama")


async def test_the_sim_mitigation_stand_in_gives_its_k_through_the_same_parser() -> None:
    harness = AgentHarness(FamaController(), episode="fama-retail-m", backend=SimBackend())
    entity = msgspec.structs.replace(
        CASE,
        evidence=Evidence(
            deviations=[Deviation(turn=1, wrong={"name": "x"}, right={"name": "y"}, category=WRONG_ENTITY)]
        ),
    )
    [analysed] = _notices(await harness.deliver(case_message(entity, FamaConfig())))
    [mitigation] = [r for r in harness.recordings if r.request.metadata["stage"] == "mitigation"]
    assert json.loads(mitigation.response.content)["helpers"] == ["memory:6"]
    assert analysed.data["mitigation"]["helpers"] == ["memory:6"]


@pytest.mark.parametrize("category", ERROR_CATEGORIES)  # one in-process sim run each
def test_on_sim_runs_with_one_category_informed_analysts_name_that_category_and_the_roster_its_helper(
    category: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "journal.sqlite"
    run = ["run", "--tasks", "24", "--error-rate", f"{category}=0.5", "--journal", str(journal), "--json"]
    assert main(run) == 0
    capsys.readouterr()
    assert main(["fama", "analyze", str(journal), "--model", "sim", "--analysts", "informed", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    cases = [line for line in lines if line["type"] == "case"]
    [summary] = [line for line in lines if line["type"] == "summary"]
    assert len(cases) >= 3 and summary["skipped"] == 0
    # The evidence's categories are judged apart from the simulator's mistake lists, so its labels are
    # not met by construction: another item of the same order is a wrong entity to the simulator and a
    # wrong value to `categorize`. Most cases, not all, name the category injected.
    agreeing = [c for c in cases if c["analysis"]["main"]["main"][:1] == [category]]
    assert len(agreeing) > len(cases) / 2
    assert set(MITIGATION[category]) <= set(summary["rosters"]["retail/sim"])
    [decision] = [line for line in lines if line["type"] == "decision"]
    counts = decision["counts"]["categories"]
    assert max(counts, key=counts.__getitem__) == category and counts[category] >= 2


async def test_a_roster_decision_is_journaled_with_the_counts_that_chose_it() -> None:
    harness = AgentHarness(FamaController(), episode="fama-retail-m", backend=SimBackend())
    settings = FamaConfig(min_failures=2)
    first = _notices(await harness.deliver(case_message(CASE, settings)))
    second = _notices(await harness.deliver(case_message(CASE, settings)))
    third = _notices(await harness.deliver(case_message(CASE, settings)))
    assert [n.text for n in first] == [ANALYSIS]
    assert [n.text for n in second] == [ANALYSIS, ROSTER]
    assert [n.text for n in third] == [ANALYSIS]  # the same roster again is not a change
    decision = second[1].data
    assert decision["roster"] == ["planner"] and decision["failures"] == 2
    assert decision["counts"] == {"categories": {EARLY_STOP: 2}, "helpers": {"planner": 2}}


def test_a_round_whose_run_refuses_its_flags_is_the_loops_usage_error_in_the_runs_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It was a RunError (exit 1) whose message was a Python list holding the run's whole line, prefix and all."""
    loop = ["fama", "loop", "--tasks", "1", "--rounds", "1", "--error-rates", "0.3", "--out", str(tmp_path / "loop")]
    assert main([*loop, "--model", "sim"]) == 2
    said = capsys.readouterr().err.strip().splitlines()[-1]  # after the round's own progress line
    assert said.startswith("faultline: usage error: round 0: faultline run failed: --error-rates, --error-rate:")
    assert "[" not in said and said.count("faultline:") == 1, said


@pytest.mark.slow
def test_per_task_the_loop_reruns_each_failed_task_with_its_own_helpers_and_reports_the_papers_overhead(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "loop"
    loop = ["fama", "loop", "--tasks", "6", "--rounds", "1", "--error-rate", "early_stop=0.5", "--out", str(out)]
    assert main([*loop, "--model", "sim", "--analysts", "informed", "--rosters", "per_task", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    baseline, rerun = [line for line in lines if line["type"] == "round"]
    with JournalReader(baseline["journal"]) as reader:
        failed = {e.task for e in reader.episodes() if e.outcome != "success"}
    assert failed and set(baseline["chosen_rosters"]) == failed and lines[-1]["rosters"] == "per_task"
    assert all(roster == ["planner"] for roster in baseline["chosen_rosters"].values())
    with JournalReader(rerun["journal"]) as reader:
        started = [r.envelope().body for r in reader.rows() if r.kind == "episode_started"]
    assert len(started) == 6 and {s.task: s.roster for s in started if isinstance(s, EpisodeStarted)} == {
        s.task: baseline["chosen_rosters"].get(s.task, []) for s in started if isinstance(s, EpisodeStarted)
    }
    assert baseline["overhead"]["share"] == 0.0 and 0.0 < rerun["overhead"]["share"] < 1.0
    paper = rerun["overhead"]
    assert paper["helper_tokens"] / paper["mean_tokens"] == pytest.approx(paper["share"])
    assert paper["min_tokens"] <= paper["median_tokens"] <= paper["max_tokens"]
    assert baseline["recommended"] == {"planner": baseline["analysed"]}  # the sim mitigation's pair for early stops
    check_fama_paper(out, [baseline, rerun], capsys)
    assert main(["replay", rerun["journal"]]) == 0


@pytest.mark.slow
def test_the_loop_reruns_with_the_helper_its_analysis_chose_and_every_round_replays_identical(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "loop"
    loop = ["fama", "loop", "--tasks", "10", "--rounds", "1", "--error-rate", "wrong_value=0.5", "--out", str(out)]
    assert (
        main([*loop, "--model", "sim", "--analysts", "informed", "--json", "--plot", str(tmp_path / "loop.png")]) == 0
    )
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    baseline, rerun = [line for line in lines if line["type"] == "round"]
    assert lines[-1]["analysts"] == "informed"
    assert lines[-1]["note"] == f"{SIM_NOTE}; {SIM_JUDGE_NOTE}", "sim runs and the sim judge say what they measure"
    assert baseline["roster"] == [] and baseline["analysed"] == baseline["failures"] >= 3
    assert baseline["categories"][WRONG_VALUE] >= 0.9 * baseline["analysed"]
    assert set(MITIGATION[WRONG_VALUE]) <= set(baseline["chosen"]) and rerun["roster"] == baseline["chosen"]
    assert b"tEXtDescription\x00note: " + lines[-1]["note"].encode() in (tmp_path / "loop.png").read_bytes()
    for r in (baseline, rerun):
        assert main(["replay", r["journal"]]) == 0
        assert "identical" in capsys.readouterr().out


def test_with_attribution_informed_analysts_have_the_decisive_step_and_the_forks_stay_out_of_the_journal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "journal.sqlite"
    run = ["run", "--tasks", "4", "--error-rate", f"{WRONG_VALUE}=0.5", "--run-id", "a", "--journal", str(journal)]
    assert main([*run, "--json"]) == 0
    capsys.readouterr()
    with JournalReader(journal) as reader:
        before = [e.episode for e in reader.episodes()]
    analyze = ["fama", "analyze", str(journal), "--model", "sim", "--json"]
    assert main([*analyze, "--attribution", "oracle", "--analysts", "informed"]) == 0
    cases = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"type":"case"' in line]
    assert cases and all(c["decisive"]["method"] == "oracle-guided repair" for c in cases)
    assert {c["decisive"]["category"] for c in cases} == {WRONG_VALUE}
    assert all("attribution" in v["evidence"] for c in cases for v in c["analysis"]["verdicts"])
    with JournalReader(journal) as reader:
        assert [e.episode for e in reader.episodes()] == before
    assert main(analyze) == 0  # off by default, and the analysts read the trajectory alone
    plain = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"type":"case"' in line]
    assert [c["decisive"] for c in plain] == [None] * len(cases)
    assert all(v["evidence"] == ["trajectory"] for c in plain for v in c["analysis"]["verdicts"])


def test_fama_analyze_says_the_episodes_of_a_system_of_ones_own_are_none_of_its_cases(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """FAMA reads the user's and the tool agent's conversation: a system's failed episode has none, and fama analyze
    answered it with "none named" in every column, as if the analysts had found nothing wrong."""
    journal = tmp_path / "desk.sqlite"
    bodies: list[tuple[str, MessageBody]] = [
        ("runner", EpisodeStarted(task="sum", system="desk:HelpDesk")),
        ("scorer", EpisodeCompleted(outcome="failure", cause="expected '5', answered 'I do not know.'")),
    ]
    envelopes = [Envelope(id=f"m{i}", episode="r1-sum-t0", sender=s, body=b) for i, (s, b) in enumerate(bodies)]
    with Journal.open(journal) as writer:
        writer.append(incoming(envelopes))
    assert failure_cases(journal) == []
    assert main(["fama", "analyze", str(journal), "--model", "sim"]) == 2
    assert capsys.readouterr().err == (
        f"faultline: usage error: fama analyze: 1 failed episode of {journal} ran on desk:HelpDesk: FAMA's analysts"
        " read the built-in tool-use agents' conversation and its helpers serve their tool agent; `faultline"
        " attribute` finds what made such an episode fail\n"
    )
