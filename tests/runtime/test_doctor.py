"""`faultline doctor` against the scripted server: each kind of endpoint gets the report and advice it should."""

from __future__ import annotations

from pathlib import Path

import pytest

from faultline.cli import main
from tests import jsonl
from tests.openai_server import Call, Endless, OpenAIServer, Status, Text, ToolCalls

EMAIL = "anna.berg@example.com"
TEXT_CALL = f'{{"tool": "find_user_id_by_email", "arguments": {{"email": "{EMAIL}"}}}}'


def doctor(capsys: pytest.CaptureFixture[str], server: OpenAIServer, *args: str) -> tuple[int, str, str]:
    code = main(["doctor", "--model", "openai", "--base-url", server.url, "--model-name", "m", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_server_with_tool_calling_is_told_to_use_it(
    openai_server: OpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    openai_server.reply(ToolCalls([Call("find_user_id_by_email", {"email": EMAIL})]), Text("I would look it up."))
    code, out, err = doctor(capsys, openai_server)
    assert code == 0, err
    native, text = openai_server.chat_requests
    assert native["tools"][0]["function"]["name"] == "find_user_id_by_email"
    assert "tools" not in text and "# Tools" in text["messages"][0]["content"]
    lines = out.splitlines()
    assert lines[0] == f"doctor: openai endpoint {openai_server.url} (model m)"
    assert f'tool call find_user_id_by_email({{"email":"{EMAIL}"}})' in lines[1]
    assert "no tool call, answered 'I would look it up.'" in lines[2]
    assert "tool calls: native tool calls work" in lines
    assert '  tool_calls = "native"' in lines
    assert [line for line in lines if line.startswith("  [models.")] == ["  [models.default]"], (
        "every role asks the server through the default table, the tool agent's as the user's and the judge's"
    )


def test_a_model_that_calls_no_tool_either_way_keeps_the_default_and_is_told_so(
    openai_server: OpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """The advice named native tool calls as if they had worked."""
    openai_server.reply(Text("I would look it up."), Text("I would look it up."))
    code, out, err = doctor(capsys, openai_server)
    assert code == 0, err
    lines = out.splitlines()
    assert "tool calls: the model made no valid tool call either way; episodes will fail at tools" in lines
    assert '  tool_calls = "native"  # the default: neither format gave a valid call' in lines


def test_a_server_without_tool_calling_is_told_to_use_the_text_format(capsys: pytest.CaptureFixture[str]) -> None:
    with OpenAIServer(tools=False) as server:
        server.reply(Text(f"Sure.\n{TEXT_CALL}"))
        code, out, err = doctor(capsys, server)
        assert len(server.chat_requests) == 2
    assert code == 0, err
    assert "native tools  failed: HTTP 400 (tools are not supported by this server)" in out
    assert 'the text format does: use tool_calls = "text"' in out
    assert '  tool_calls = "text"' in out.splitlines()


def test_a_slow_talkative_model_gets_one_episode_at_a_time_and_long_timeouts(
    openai_server: OpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    openai_server.reply(Endless(0.1), Endless(0.1))
    code, out, err = doctor(capsys, openai_server, "--json", "--model-setting", "max_tokens=8")
    assert code == 0, err
    probes, report = jsonl.read(out)
    assert [p["type"] for p in probes] == ["probe", "probe"]
    for probe in probes:
        assert probe["finish_reason"] == "length" and probe["completion_tokens"] == 8
        assert 0.8 <= probe["latency_s"] < 3.0
        assert 2.0 < probe["tokens_per_s"] <= 10.0
    assert report["advice"]["concurrency"] == 1
    assert report["advice"]["timeout_s"] == 30.0
    assert report["advice"]["episode_timeout_s"] == 240.0, "twice four attempts of 30 s, rounded to minutes"
    assert report["advice"]["tool_calls"] == "native", "no valid call either way: native, the default, stays"
    assert report["advice"]["handler_timeout_s"] == 0.0, "four attempts of 30 s fit in the default 300 s"


def test_handlers_are_told_to_outlast_a_call_with_its_retries(
    openai_server: OpenAIServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "faultline.toml"
    config.write_text("[runtime]\nhandler_timeout_s = 60.0\n", encoding="utf-8")
    openai_server.reply(Endless(0.1), Endless(0.1))
    code, out, err = doctor(capsys, openai_server, "--config", str(config), "--model-setting", "max_tokens=8")
    assert code == 0, err
    lines = out.splitlines()
    assert "  timeout_s = 30" in lines
    assert lines[-2:] == ["  [runtime]", "  handler_timeout_s = 180"], "four attempts of 30 s, a minute more"


def test_every_table_that_asks_the_same_server_gets_the_timeout_for_the_longest_answers_and_most_retries(
    openai_server: OpenAIServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The user simulator and the judge wait on the same server as the tool agent; a role on another server or
    backend does not."""
    config = tmp_path / "faultline.toml"
    server = f'backend = "openai"\nbase_url = "{openai_server.url}"\nmodel = "m"\n'
    config.write_text(
        f"[models.default]\n{server}max_tokens = 400\n"
        f"[models.tool]\n{server}max_tokens = 8\nmax_retries = 0\n"
        f"[models.judge]\n{server.replace('/v1', '/other')}\n"
        '[models.user]\nbackend = "sim"\n',
        encoding="utf-8",
    )
    openai_server.reply(Endless(0.1), Endless(0.1))
    code = main(["doctor", "--config", str(config)])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = out.splitlines()
    start = lines.index("  [models.tool]")
    timeout = lines[start + 2]
    native = '  tool_calls = "native"  # the default: neither format gave a valid call'
    assert lines[start : start + 6] == ["  [models.tool]", native, timeout, "  [models.default]", timeout, "  [run]"]
    assert [line for line in lines if line.startswith("  [models.")] == ["  [models.tool]", "  [models.default]"]
    seconds = float(timeout.removeprefix("  timeout_s = "))
    assert seconds >= 90, "400 answer tokens at no more than 10 tokens/s, twice over: not the tool's 8"
    episode = float(next(line for line in lines if line.startswith("  episode_timeout_s = ")).split(" = ")[1])
    assert episode >= 2 * 4 * seconds, "twice the default table's four attempts, not the tool's one"


def test_an_endpoint_that_answers_neither_request_fails_with_both_causes(
    openai_server: OpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    openai_server.reply(Status(500, "overloaded"), Endless(0.02))
    code, out, err = doctor(
        capsys, openai_server, "--model-setting", "max_tokens=0", "--model-setting", "timeout_s=0.3"
    )
    assert code == 1
    assert len(openai_server.chat_requests) == 2, "the doctor measures once: no retries"
    assert "native tools  failed: HTTP 500 (overloaded)" in out
    assert "text format   failed: timed out after 0.3s" in out
    assert "no recommendation: neither request was answered" in out
    assert err == (
        f"faultline: error: openai endpoint {openai_server.url} (model m): native tools: HTTP 500 (overloaded);"
        " text format: timed out after 0.3s\n"
    )


def test_doctor_on_sim_is_one_usage_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor"]) == 2
    assert capsys.readouterr().err == (
        "faultline: usage error: doctor measures an openai endpoint, but the tool agent's role 'tool' uses sim:"
        " add --model openai\n"
    )
