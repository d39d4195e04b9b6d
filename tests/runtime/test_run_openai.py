"""`faultline run` on the openai backend against the scripted server: bounded answers, journaled retries,
the text fallback for servers without tool calling, and what a slow run says it waits for."""

from __future__ import annotations

import json
import re
from pathlib import Path

import msgspec
import pytest

from faultline.api import PlannedEpisode, RunResult
from faultline.api import _plan as run_plan
from faultline.api import _run as api_run
from faultline.cli import _run as cli_run
from faultline.cli import main
from faultline.core import EpisodeCompleted, ErrorRaised, LlmResponse, Recording, ToolCall
from faultline.journal import JournalReader
from faultline.runtime import CallInFlight
from tests.openai_server import Delay, Endless, OpenAIServer, Status, Text, prompt_tokens

pytestmark = pytest.mark.slow

EMAIL = "omar.johnson9361@example.com"


def run(capsys: pytest.CaptureFixture[str], server: OpenAIServer, journal: Path, *args: str) -> dict:  # type: ignore[type-arg]
    code = main(
        ["run", "--json", "--model", "openai", "--base-url", server.url, "--model-name", "m", "--tasks", "1",
         "--max-turns", "1", "--journal", str(journal), "--model-setting", "backoff_base_s=0", *args]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code in (0, 1), out
    return json.loads(out)  # type: ignore[no-any-return]


def bodies(journal: Path, kind: type) -> list:  # type: ignore[type-arg]
    with JournalReader(journal) as reader:
        return [body for r in reader.rows() if isinstance(body := r.envelope().body, kind)]


def model_calls(journal: Path) -> list[Recording]:
    return [r for r in bodies(journal, Recording) if r.call == "llm"]


def test_a_call_that_fails_twice_is_retried_and_every_attempt_journaled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "j.sqlite"
    with OpenAIServer() as server:
        server.reply(Status(500, "overloaded"), Status(502, "bad gateway"))
        summary = run(capsys, server, journal)
    assert summary["outcomes"] == {"failure": 1}
    first = model_calls(journal)[0]
    assert [(a.number, a.error) for a in first.attempts] == [
        (1, "HTTP 500 (overloaded)"),
        (2, "HTTP 502 (bad gateway)"),
        (3, ""),
    ]
    assert len({a.request_digest for a in first.attempts}) == 1
    assert first.error == "" and first.response["content"].startswith("echo: ")
    assert main(["replay", str(journal)]) == 0
    assert "identical" in capsys.readouterr().out


def test_an_answer_that_never_ends_fails_the_episode_with_the_journaled_model_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "j.sqlite"
    with OpenAIServer() as server:
        server.reply(Endless(0.01), Endless(0.01))
        summary = run(
            capsys, server, journal, "--model-setting", "max_tokens=0", "--model-setting", "timeout_s=0.3",
            "--model-setting", "max_retries=1",
        )  # fmt: skip
    assert summary["outcomes"] == {"error": 1}
    [call] = model_calls(journal)
    assert call.error.endswith("gave up after 2 attempts, last error: timed out after 0.3s")
    assert [(a.number, a.error) for a in call.attempts] == [(1, "timed out after 0.3s"), (2, "timed out after 0.3s")]
    [completed] = bodies(journal, EpisodeCompleted)
    assert completed.outcome == "error"
    assert completed.cause.startswith("ModelError in user: ")
    assert "timed out after 0.3s" in completed.cause
    assert main(["replay", str(journal)]) == 0


def test_a_talkative_model_is_cut_at_max_tokens(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    journal = tmp_path / "j.sqlite"
    with OpenAIServer() as server:
        server.reply(Endless())
        run(capsys, server, journal, "--model-setting", "user.max_tokens=8")
        assert server.chat_requests[0]["max_tokens"] == 8
        assert server.chat_requests[1]["max_tokens"] == 512, "the tool agent's role keeps the default"
    answer = msgspec.convert(model_calls(journal)[0].response, LlmResponse)
    assert answer.finish_reason == "length" and answer.usage.completion_tokens == 8


def test_a_server_without_tool_calling_gets_tools_in_the_prompt_and_calls_in_the_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "j.sqlite"
    with OpenAIServer(tools=False) as server:
        server.reply(
            Text(f"Cancel my order please, my email is {EMAIL}"),
            Text(f'I will look you up.\n```json\n{{"tool": "find_user_id_by_email", "arguments": {{"email": "{EMAIL}"}}}}\n```'),
            Text('{"tool": "get_user_details", "arguments": {"user_id": '),
            Text("Sorry, I could not read your details."),
        )  # fmt: skip
        summary = run(capsys, server, journal, "--model-setting", "tool_calls=text")
        requests = server.chat_requests
    assert summary["outcomes"] == {"failure": 1}
    assert all("tools" not in request for request in requests)
    assert "# Tools" in requests[1]["messages"][0]["content"]
    assert "find_user_id_by_email:" in requests[1]["messages"][0]["content"]
    found, broken = bodies(journal, ToolCall)
    assert (found.name, found.arguments, found.arguments_error) == ("find_user_id_by_email", {"email": EMAIL}, "")
    assert broken.arguments_error.startswith("the tool call written in the answer does not parse")
    assert requests[2]["messages"][-1]["content"].startswith("Result of find_user_id_by_email: ")
    assert "does not parse" in requests[3]["messages"][-1]["content"], "the model reads why its call failed"
    assert main(["replay", str(journal)]) == 0


def test_a_conversation_that_outgrows_the_context_goes_on_without_its_oldest_turns_and_replays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "j.sqlite"

    def talkative(body: dict) -> Text:  # type: ignore[type-arg]
        return Text("tell me more " + " ".join(["about"] * 150))

    with OpenAIServer(fallback=talkative, context_tokens=2000) as server:
        summary = run(
            capsys, server, journal, "--max-turns", "4", "--model-setting", "truncation=auto",
            "--model-setting", "max_tokens=64",
        )  # fmt: skip
        sent = [prompt_tokens(request) for request in server.chat_requests]
    assert summary["outcomes"] == {"failure": 1}, "the episode runs to its turn limit, not into a model error"
    assert max(sent) > 2000, "the conversation outgrew the context"
    calls = model_calls(journal)
    shortened = [call for call in calls if len(call.attempts) == 2]
    assert len(shortened) >= 2
    for call in shortened:
        refused, answered = call.attempts
        assert "exceeds the available context size" in refused.error
        assert "oldest message(s) after the opening request" in refused.error
        assert answered.error == "" and call.response["metadata"]["truncated"] > 0
    assert main(["replay", str(journal)]) == 0
    assert "identical" in capsys.readouterr().out


def test_a_slow_model_call_shows_in_progress_and_names_itself_in_the_timeout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api_run, "PROGRESS_TICK_S", 0.1)
    monkeypatch.setattr(cli_run, "PROGRESS_LINE_S", 0.5)
    monkeypatch.setattr(run_plan, "MODEL_CALLS_POLL_S", 0.1)
    journal = tmp_path / "j.sqlite"
    with OpenAIServer() as server:
        server.reply(Delay(60.0))  # the call would end at its own timeout, after the episode's (15 s: time for
        # a loaded machine to start the system and the call, and for the workers' status to show it)
        code = main(
            ["run", "--json", "--model", "openai", "--base-url", server.url, "--model-name", "m", "--tasks", "1",
             "--episode-timeout", "15", "--journal", str(journal), "--model-setting", "timeout_s=16",
             "--model-setting", "max_retries=0"]
        )  # fmt: skip
        out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["outcomes"] == {"timeout": 1}
    pattern = r"1 model call in flight, the slowest user's model call \(role user, attempt 1, \d+s\)"
    assert any(re.search(pattern, line) for line in err.splitlines()), err
    [completed] = bodies(journal, EpisodeCompleted)
    [late] = bodies(journal, ErrorRaised)
    assert late.error_type == "ModelError"
    assert "while user's model call (role user) was in flight" in late.message, (
        "the call is cancelled when the runner completes its episode, not left to run to its own timeout"
    )
    [call] = model_calls(journal)
    assert call.error.startswith("ModelError: the runner ended episode ") and call.attempts == []
    assert re.fullmatch(
        r"no completion within 15s; still waiting for user's model call \(role user, attempt 1, \d+s\);"
        r" its last message, \d+s before: start from runner to user",
        completed.cause,
    ), completed.cause
    assert main(["replay", str(journal)]) == 0
    assert "identical" in capsys.readouterr().out


def test_the_waiting_line_names_the_slowest_call_and_a_timeout_the_episodes_own() -> None:
    result = RunResult(planned=[PlannedEpisode(episode="e1", task="t", trial=0, seed=0)])
    result.running = {"e1": 10.0, "e2": 20.0}
    slow = CallInFlight(episode="e1", agent="tool", role="agent", attempt=2, age_s=95.4, attempt_age_s=27.2)
    result.model_calls = [slow, CallInFlight(episode="e2", agent="user", role="user", attempt=1, age_s=3.0)]
    assert result.waiting_for(now=40.0, limit_s=600.0) == (
        "waiting for 2 running episodes, the oldest for 30s; each still running at 600s ends as timeout;"
        " 2 model calls in flight, the slowest tool's model call (role agent, attempt 2 for 27s, 95s in all)"
    )
    assert result.waiting_for(now=40.0, limit_s=600.0, stall_after_s=10.0).startswith(
        "waiting for 2 running episodes, the oldest for 30s; each still running at 600s ends as timeout, or as stalled"
        " once nothing of it is in flight for 10s; 2 model calls in flight"
    )
    assert result.waiting_in("e1") == "still waiting for tool's model call (role agent, attempt 2 for 27s, 95s in all)"
    assert result.waiting_in("e3") == "no model call was in flight when last asked"
