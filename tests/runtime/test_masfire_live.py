"""The MAS-FIRE fault types on a live system (real nats-server, journal service and worker processes),
with `sim` and with the `openai` backend against the scripted server: each fault event holds the
original, each semantic rewrite has its injector exchange journaled, and the journal replays identical."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from faultline.cli import main
from faultline.core import Envelope, FaultApplied, FaultSkipped, Recording, Start, derive_id
from faultline.envs import load_domain
from faultline.faults import INJECTOR_ROLE, INSTRUCTION, MASFIRE_FAULTS, SYSTEM_ADDENDUM, fault_types
from faultline.journal import JournalReader, JournalRow
from tests.openai_server import Call, OpenAIServer, Text, ToolCalls, echo

pytestmark = pytest.mark.slow

NEW = [n for n in MASFIRE_FAULTS if fault_types()[n].mechanism != "routing"]
SIM_RULES = {
    "role_ambiguity": "",
    "blind_trust": "",
    "instruction_logic_conflict": "",
    "instruction_ambiguity": "",
    "memory_loss": "kind=context_request,turns=1",
    "context_length_violation": "kind=context_request,keep_chars=8",
    "parameter_format_error": "mode=json",
    "hallucination": "kind=user_turn",
    "inexecutable_plan": "kind=assistant_turn",
    "critical_information_loss": "kind=context_reply",
    "tool_selection_error": "",
    "parameter_filling_error": "",
}


def run(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    code = main(["run", "--json", *args])
    out = capsys.readouterr().out
    assert code in (0, 1), out
    return json.loads(out.splitlines()[-1])  # type: ignore[no-any-return]


def faults(run_id: str, tasks: list[str], rules: dict[str, str]) -> list[str]:
    """One rule per fault type, each on its own episode, applied once."""
    return [
        arg
        for (fault, extra), task in zip(rules.items(), tasks, strict=False)
        for arg in ("--fault", ",".join(filter(None, (f"{fault}:budget=1,episode={run_id}-{task}-t0", extra))))
    ]


def by_episode(journal: Path) -> dict[str, list[JournalRow]]:
    with JournalReader(journal) as reader:
        return dict(reader.by_episode())


def check_applied(rows: list[JournalRow], fault: str) -> tuple[Envelope, Envelope]:
    """The one fault event of `fault` in `rows`: it holds the original, and what went out is journaled."""
    [applied] = [b for r in rows if isinstance(b := r.envelope().body, FaultApplied)]
    assert applied.fault == fault
    original = msgspec.convert(applied.original, Envelope)
    [result] = [msgspec.convert(r, Envelope) for r in applied.results]
    assert result.body != original.body and result.id == original.id
    assert any(r.id == result.id and r.envelope().body == result.body for r in rows)
    mechanism = fault_types()[fault].mechanism
    asked = [
        b
        for r in rows
        if r.causation == derive_id(original.id, 0, INJECTOR_ROLE)
        and r.sender == original.sender
        and isinstance(b := r.envelope().body, Recording)
    ]
    rewritten = mechanism == "semantic" or fault.startswith("instruction")  # by the injector, asked by the sender
    assert [b.request["role"] for b in asked] == ([INJECTOR_ROLE] if rewritten else [])
    if mechanism == "prompt":
        assert isinstance(result.body, Start)
        key = INSTRUCTION if fault.startswith("instruction") else SYSTEM_ADDENDUM
        assert result.body.data[key] and key not in original.body.data  # type: ignore[union-attr]
    return original, result


def replays_identical(journal: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(journal)]) == 0
    assert "identical" in capsys.readouterr().out


def test_every_new_fault_type_live_with_sim(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert sorted(SIM_RULES) == sorted(NEW) == sorted(OPENAI_RULES)
    journal = tmp_path / "j.sqlite"
    tasks = [t.id for t in load_domain("retail").tasks()[: len(SIM_RULES)]]
    run(
        capsys, "--task-ids", ",".join(tasks), "--run-id", "ms", "--journal", str(journal), "--max-turns", "6",
        "--helpers", "dce", *faults("ms", tasks, SIM_RULES),
    )  # fmt: skip
    rows = by_episode(journal)
    for fault, task in zip(SIM_RULES, tasks, strict=True):
        check_applied(rows[f"ms-{task}-t0"], fault)
    replays_identical(journal, capsys)


def test_history_faults_act_on_the_agents_own_model_requests_without_helpers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "j.sqlite"
    tasks = [t.id for t in load_domain("retail").tasks()[:2]]
    rules = {"memory_loss": "kind=llm_request,from=tool", "context_length_violation": "kind=llm_request,from=tool"}
    run(capsys, "--task-ids", ",".join(tasks), "--run-id", "mh", "--journal", str(journal), "--max-turns", "4",
        *faults("mh", tasks, rules))  # fmt: skip
    rows = by_episode(journal)
    for fault, task in zip(rules, tasks, strict=True):
        episode = rows[f"mh-{task}-t0"]
        [applied] = [b for r in episode if isinstance(b := r.envelope().body, FaultApplied)]
        assert applied.fault == fault and applied.model_call >= 0
        [result] = applied.results
        assert result["messages"] != applied.original["messages"]
        [recorded] = [
            b
            for r in episode
            if r.causation == applied.original["causation"] and r.sender == "tool"
            and isinstance(b := r.envelope().body, Recording) and b.index == applied.model_call
        ]  # fmt: skip
        assert recorded.request["messages"] == result["messages"]  # what the model was sent is journaled
    replays_identical(journal, capsys)


INJECTED = "Your order #W0000000 was refunded to a card ending 0000."
OPENAI_RULES = SIM_RULES | {
    "parameter_format_error": "mode=type",
    "hallucination": "kind=assistant_turn",
    "inexecutable_plan": "kind=assistant_turn",
    "critical_information_loss": "kind=assistant_turn",
}
"""The openai run: the tool agent's turns are the server's, so the text faults rewrite those."""


def scripted(body: dict[str, Any]) -> Text | ToolCalls:
    """The server's answers: the injector per its template (a refusal for critical information loss),
    the tool agent one order lookup then a closing line, the user an echo."""
    system = str(body["messages"][0].get("content", ""))
    last = body["messages"][-1]
    if system.startswith("You inject one fault"):
        if "remove the one constraint" in system:
            return Text("I can't help with making messages worse.")
        if "Answer in the same JSON form" in system or '"arguments"' in system:
            call = json.loads(last["content"])
            tool = "get_user_details" if "semantically similar" in system else call["name"]
            return Text(f"<rewrite>{json.dumps({'name': tool, 'arguments': {'order_id': '#W1111111'}})}</rewrite>")
        return Text(f"<rewrite>{INJECTED}</rewrite>")
    if body.get("tools") and last["role"] == "user":
        return ToolCalls([Call("get_order_details", {"order_id": "#W2000000"})])
    if body.get("tools"):
        return Text("Is there anything else I can do for you?")
    return echo(body)


def test_new_fault_types_live_with_the_openai_backend(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    journal = tmp_path / "j.sqlite"
    tasks = [t.id for t in load_domain("retail").tasks()[: len(OPENAI_RULES)]]
    with OpenAIServer(fallback=scripted) as server:
        run(
            capsys, "--model", "openai", "--base-url", server.url, "--model-name", "m", "--task-ids", ",".join(tasks),
            "--run-id", "mo", "--journal", str(journal), "--max-turns", "2", "--model-setting", "backoff_base_s=0",
            "--helpers", "dce", *faults("mo", tasks, OPENAI_RULES),
        )  # fmt: skip
        requests = server.chat_requests
    rows = by_episode(journal)
    for fault, task in zip(OPENAI_RULES, tasks, strict=True):
        episode = rows[f"mo-{task}-t0"]
        if fault == "critical_information_loss":
            skipped = [b for r in episode if isinstance(b := r.envelope().body, FaultSkipped)]
            assert skipped and "no <rewrite> block" in skipped[0].reason
            assert not any(isinstance(r.envelope().body, FaultApplied) for r in episode)
            assert any(r.id == skipped[0].original["id"] for r in episode)  # the message went out whole
            continue
        original, result = check_applied(episode, fault)
        if fault in ("hallucination", "inexecutable_plan"):
            assert result.body.text == INJECTED  # type: ignore[union-attr]
        if isinstance(result.body, Start):  # the agent's model saw the faulted prompt
            text = result.body.data.get(SYSTEM_ADDENDUM) or result.body.data[INSTRUCTION]
            assert any(text in str(r["messages"][0]["content"]) for r in requests)
    replays_identical(journal, capsys)
