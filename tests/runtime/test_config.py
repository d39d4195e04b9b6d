"""faultline.toml: defaults without a file, the example parses, bad keys are one line naming the key."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from faultline._errors import ConfigError
from faultline.agents import EpisodeSpec
from faultline.api import run_limits
from faultline.cli import build_parser, main
from faultline.cli._models import effective_config
from faultline.runtime import (
    LOCAL_SETTINGS,
    AgentConfig,
    Config,
    HelpersConfig,
    ModelConfig,
    WorkerConfig,
    check_system,
    load_config,
    make_backend,
    parse_config,
    worker_settings,
)
from faultline.runtime._layout import worker_groups
from faultline.runtime.models import OpenAIBackend
from tests.openai_server import OpenAIServer, Text

EXAMPLE = Path(__file__).resolve().parents[2] / "faultline.example.toml"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "faultline.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_no_file_gives_a_working_offline_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(None)
    assert config == Config()
    assert config.nats.url == ""
    assert config.nats.prefix == "fl"
    assert config.journal.path == "runs/journal.sqlite"
    assert config.workers == {"main": WorkerConfig(agents=("*",), count=1)}
    assert config.model("anything").backend == "sim"


def test_faultline_toml_in_the_working_directory_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, '[nats]\nprefix = "lab"\n')
    monkeypatch.chdir(tmp_path)
    assert load_config(None).nats.prefix == "lab"


def test_the_example_file_parses_and_shows_every_section() -> None:
    config = load_config(EXAMPLE)
    assert config.workers["tool"] == WorkerConfig(agents=("tool",), count=2)
    assert config.agents["tool"] == AgentConfig(model_role="agent")
    agent = config.model("agent")
    assert (agent.backend, agent.model, agent.temperature) == ("openai", "qwen2.5-7b-instruct", 0.0)
    assert config.model(config.role_of("tool")) is agent
    assert check_system(config) == {"tool": ("tool",), "rest": ("env", "user")}
    assert config.model("unconfigured").backend == "sim"
    example_keys = {line.split("=")[0].strip().lstrip("# ") for line in EXAMPLE.read_text().splitlines() if "=" in line}
    for section in (
        config.nats,
        config.journal,
        config.runtime,
        config.helpers,
        WorkerConfig(),
        ModelConfig(),
        config.run,
    ):
        assert set(section.__struct_fields__) <= example_keys


def test_relative_paths_are_relative_to_the_file(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, '[journal]\npath = "out/j.sqlite"\n[nats]\nstore_dir = "/abs/nats"\n'))
    assert config.journal.path == str(tmp_path / "out/j.sqlite")
    assert config.nats.store_dir == "/abs/nats"


def test_the_config_a_run_hands_its_processes_keeps_the_paths_it_was_given(tmp_path: Path) -> None:
    """They were placed when the run read faultline.toml; placing them again from the JSON's folder
    put a relative memory store in `runs/.faultline/runs/memory.sqlite`, where nothing looks for it."""
    effective = tmp_path / "runs" / ".faultline" / "effective-config.json"
    effective.parent.mkdir(parents=True)
    effective.write_bytes(msgspec.json.encode(parse_config({"memory": {"store": "runs/memory.sqlite"}})))
    assert load_config(effective).memory.store == "runs/memory.sqlite"


def test_a_role_inherits_unset_keys_from_the_default_model() -> None:
    config = parse_config(
        {
            "models": {
                "default": {"backend": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "big", "max_retries": 5},
                "verifier": {"model": "small"},
            }
        }
    )
    verifier = config.model("verifier")
    assert (verifier.backend, verifier.base_url, verifier.model, verifier.max_retries) == (
        "openai",
        "http://127.0.0.1:9/v1",
        "small",
        5,
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[workers.tool]\ncount = "two"\n', "faultline.toml: Expected int, got str - at $.workers.tool.count"),
        ("[workers.tool]\ncount = 0\n", "Expected int >= 1 - at $.workers.tool.count"),
        ('[nats]\nurll = ""\n', "Object contains unknown field urll (did you mean url?) - at $.nats"),
        ("[runtime]\nack_wait_s = -1.0\n", "Expected float > 0.0 - at $.runtime.ack_wait_s"),
        ("[runtime]\nack_wait_s = inf\n", "Expected float <= 2592000.0 - at $.runtime.ack_wait_s"),
        ("[runtime]\nlinger_s = nan\n", "- at $.runtime.linger_s"),
        ("[models.default]\ntimeout_s = 1e309\n", "Expected float <= 2592000.0 - at $.models.default.timeout_s"),
        ("[nats]\nmax_ack_pending = 99999999999999999999\n", "- at $.nats.max_ack_pending"),
        ("[workers.tool]\ncount = 1000000\n", "Expected int <= 256 - at $.workers.tool.count"),
        ('[models.judge]\nbackend = "gpt"\n', "- at $.models.judge.backend"),
        (
            "[models.judge]\ntimeout = 3\n",
            "Object contains unknown field timeout (did you mean timeout_s?) - at $.models.judge",
        ),
        ('[models.judge]\nbackend = "openai"\n', 'needed with backend = "openai" - at $.models.judge.model'),
        ('[agents.triage]\nclass = "triage.TriageAgent"\n', "'package.module:ClassName'"),
        ('[nats]\nprefix = "a.b"\n', "subject prefix 'a.b' is not a valid subject token"),
        ('[workers."tool agent"]\ncount = 1\n', "table name 'tool agent' is not a valid subject token"),
        ("workers = 3\n", "Expected a table of named entries - at $.workers"),
        ("[faultz]\n", "Object contains unknown field faultz"),
        ("[nats\n", "invalid TOML: Expected ']'"),
        (
            '[helpers]\nroster = ["dce", "oracle"]\n',
            "unknown helper 'oracle': use dce, tsa, tor, planner, memory, verifier",
        ),
        (
            '[helpers]\nroster = ["tor:3"]\n',
            "only memory takes a number, the user turns it keeps (memory:6) - at $.helpers.roster",
        ),
        (
            '[helpers]\nroster = ["memory:-1"]\n',
            "helper 'memory:-1': memory keeps K user turns, K a whole number from 1 (memory:6) - at $.helpers.roster",
        ),
        ("[helpers]\nsim_effect = 2.0\n", "Expected float <= 1.0 - at $.helpers.sim_effect"),
        ('[nats]\nsync_interval = "sometimes"\n', "- at $.nats.sync_interval"),
        ("[nats]\nserver_cores = -1\n", "- at $.nats.server_cores"),
    ],
)
def test_a_bad_file_is_one_line_naming_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text))
    assert message in str(caught.value)
    assert str(caught.value).startswith(str(tmp_path / "faultline.toml"))
    assert "\n" not in str(caught.value)


def test_the_helper_settings_default_to_what_an_episode_takes() -> None:
    helpers, episode = HelpersConfig(), EpisodeSpec(domain="retail", task="0")
    assert (helpers.wait_s, helpers.verifier_revisions, helpers.tor_threshold, helpers.sim_effect) == (
        episode.helper_wait_s,
        episode.verifier_revisions,
        episode.tor_threshold,
        episode.helper_effect,
    )


def test_a_broken_json_config_is_called_invalid_json(tmp_path: Path) -> None:
    """The JSON config is the one `faultline run` hands its processes; its error names JSON, not TOML."""
    path = tmp_path / "effective-config.json"
    path.write_text('{"nats": ', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"effective-config\.json: invalid JSON: ") as caught:
        load_config(path)
    assert "TOML" not in str(caught.value)


def test_a_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"missing\.toml: no such file"):
        load_config(tmp_path / "missing.toml")


async def test_make_backend_builds_the_openai_backend_for_a_role(openai_server: OpenAIServer) -> None:
    from faultline.core import ChatMessage, LlmRequest

    config = parse_config(
        {"models": {"agent": {"backend": "openai", "base_url": openai_server.url, "api_key_env": "", "model": "m7"}}}
    )
    openai_server.reply(Text("configured"))
    backend = make_backend(config, "agent")
    assert isinstance(backend, OpenAIBackend)
    try:
        response = await backend.complete(LlmRequest(role="agent", messages=[ChatMessage(role="user", content="hi")]))
    finally:
        await backend.aclose()
    assert response.content == "configured"
    assert openai_server.chat_requests[0]["model"] == "m7"


def test_make_backend_builds_the_sim_backend_by_default() -> None:
    sim = pytest.importorskip("faultline.runtime.models._sim")
    assert isinstance(make_backend(Config(), "agent"), sim.SimBackend)


def test_config_check_prints_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "check", "--config", str(EXAMPLE)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.splitlines()[0] == f"{EXAMPLE}: ok"
    assert "tool: 2 processes running tool\n" in out
    assert 'rest: 1 process running env, user ("*": every agent no other group names)' in out
    assert "agent: openai qwen2.5-7b-instruct at http://127.0.0.1:8000/v1" in out
    assert "default: sim (offline deterministic simulation" in out


def test_config_check_without_a_file_reports_the_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["config", "check"]) == 0
    assert capsys.readouterr().out.startswith("no config file: built-in defaults\n")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[workers.tool]\ncount = "x"\n', "Expected int, got str - at $.workers.tool.count"),
        (None, "no such file"),
    ],
)
def test_config_check_on_a_bad_or_missing_file_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str | None, expected: str
) -> None:
    path = write(tmp_path, text) if text is not None else tmp_path / "faultline.toml"
    assert main(["config", "check", "--config", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith(f"faultline: error: {path}: ")
    assert expected in err


def test_config_check_takes_runs_model_flags_and_checks_the_configuration_they_make(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, '[models.default]\nbackend = "sim"\n[models.tool]\nmax_tokens = 50\n')
    flags = ["--model", "openai", "--model-name", "qwen", "--base-url", "http://127.0.0.1:9/v1"]
    assert main(["config", "check", "--config", str(path), *flags, "--model-setting", "tool.max_tokens=64"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"{path} with the command line's model flags: ok"
    assert "default: openai qwen at http://127.0.0.1:9/v1" in out and "tool: openai qwen at" in out
    assert main(["config", "check", "--config", str(path), "--json", *flags]) == 0
    assert '"models":{"default":"openai","tool":"openai"}' in capsys.readouterr().out.replace(" ", "")
    for wrong in (["--model", "openai"], ["--model-setting", "tool.max_tokens=-1"], ["--model", "sim", *flags[2:4]]):
        assert main(["config", "check", "--config", str(path), *wrong]) != 0
        assert main(["run", "--config", str(path), "--journal", str(tmp_path / "j.sqlite"), *wrong]) != 0
        out, err = capsys.readouterr()
        check, run = err.splitlines()
        assert out == "" and check == run, "the same line as run's"
    assert not (tmp_path / ".faultline").exists(), "run refused before it started anything"


def test_a_star_group_takes_every_agent_no_other_group_names() -> None:
    config = parse_config(
        {
            "agents": {"triage": {"class": "tests.runtime.toy:Pinger"}},
            "workers": {"rest": {"agents": ["*"]}, "tools": {"agents": ["tool", "env"], "count": 2}},
        }
    )
    assert worker_groups(config) == {"rest": ("triage", "user"), "tools": ("tool", "env")}
    assert worker_groups(Config()) == {"main": ("env", "tool", "user")}


def write_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> None:
    (tmp_path / f"{name}.py").write_text(source, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[workers.a]\nagents = ["tool"]\n[workers.b]\nagents = ["tool", "user"]\n',
            "agent 'tool' is in workers.a and workers.b: pick one - at $.workers",
        ),
        (
            '[workers.a]\nagents = ["*"]\n[workers.b]\nagents = ["*"]\n',
            'workers.a and workers.b both take "*": keep one - at $.workers',
        ),
        (
            '[workers.a]\nagents = ["*"]\n[workers.dce]\nagents = ["dce"]\n',
            "agent 'dce' is placed by the runtime, not by a worker group (helpers run in the helper worker the"
            " roster drives, fama in `faultline fama serve`): remove it from workers.dce - at $.workers.dce.agents",
        ),
        (
            '[agents.tool_agent]\nmodel_role = "agent"\n',
            "agent 'tool_agent' is not a registered agent (dce, env, fama, planner, scorer, tool, tor, tsa, user, user_context,"
            " verifier) and has no class:"
            " set class = 'package.module:ClassName' - at $.agents.tool_agent",
        ),
        (
            '[workers.a]\nagents = ["scheduler"]\n',
            "cannot load agent 'scheduler': not a registered name (registered: dce, env, fama, planner, scorer, tool, tor,"
            " tsa, user, user_context, verifier) nor a package.module:Name path - at $.workers.a.agents",
        ),
        (
            '[agents.triage]\nclass = "no_such_package.triage:TriageAgent"\n',
            "cannot load agent 'no_such_package.triage:TriageAgent': no module named 'no_such_package'"
            " (is it installed, or in a --plugin-path folder?) - at $.agents.triage.class",
        ),
        (
            '[agents.triage]\nclass = "broken_agent_module:TriageAgent"\n',
            "cannot load agent 'broken_agent_module:TriageAgent': importing 'broken_agent_module' raised"
            " NameError: name 'undefined_name' is not defined - at $.agents.triage.class",
        ),
        (
            '[agents.ping]\nclass = "tests.runtime.toy:Pinger"\n',
            "agent 'ping' is class tests.runtime.toy.Pinger, whose name is 'pinger': messages to 'ping' would reach"
            " no one; name the table [agents.pinger] - at $.agents.ping.class",
        ),
        (
            '[agents.pinger]\nclass = "tests.runtime.toy:Pinger"\n[workers.main]\nagents = ["tool", "user", "env"]\n',
            "agent 'pinger' is in no worker group, so its messages would wait forever: add it to a"
            ' [workers.<name>] agents list, or give one group "*" - at $.workers',
        ),
        (
            '[system]\nclass = "tests.core.test_system:StrangeEntry"\n',
            "cannot load system 'tests.core.test_system:StrangeEntry': its entry 'nobody' is not one of its agents"
            " (solo) - at $.system.class",
        ),
        (
            '[agents.triage]\nclass = "tests.runtime.toy:SlowCountingBackend"\n',
            "cannot load agent 'tests.runtime.toy:SlowCountingBackend': class SlowCountingBackend is not a"
            " faultline Agent subclass with a name - at $.agents.triage.class",
        ),
    ],
)
def test_config_check_and_run_refuse_the_same_configurations_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    write_module(tmp_path, monkeypatch, "broken_agent_module", "undefined_name.attribute = 1\n")
    path = write(tmp_path, text)
    assert main(["config", "check", "--config", str(path)]) == 1
    assert main(["run", "--config", str(path), "--journal", str(tmp_path / "j.sqlite")]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    check, run = err.splitlines()
    assert check == run == f"faultline: error: {path}: {message}"
    assert not (tmp_path / ".faultline").exists(), "run refused before it started anything"


def test_command_line_model_settings_lie_over_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "[models.default]\nmax_tokens = 100\n[models.tool]\nmax_tokens = 50\ntimeout_s = 9.0\n")
    config = load_config(path, models={"*": {"max_tokens": 64}, "user": {"stop": ["\n\n"], "tool_calls": "text"}})
    assert config.model("tool").max_tokens == 64, "a setting for every role wins over a role's own table"
    assert config.model("tool").timeout_s == 9.0
    assert config.model("user").stop == ("\n\n",) and config.model("user").tool_calls == "text"
    assert config.model("user").max_tokens == 64, "a role created on the command line inherits the default"
    assert config.model("other").max_tokens == 64


def test_model_settings_without_a_file_and_a_wrong_one_names_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert load_config(None, models={"tool": {"max_retries": 0}}).model("tool").max_retries == 0
    with pytest.raises(ConfigError, match=r"^--model-setting: Expected int >= 0 - at \$\.models\.tool\.max_tokens$"):
        load_config(None, models={"tool": {"max_tokens": -1}})
    with pytest.raises(
        ConfigError,
        match=r"with --model-setting: Invalid enum value 'sometimes' - at \$\.models\.default\.retry_on\[0\]$",
    ):
        load_config(write(tmp_path, ""), models={"*": {"retry_on": ["sometimes"]}})


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ([], (8, 120.0)),
        (["--model", "openai", "--model-name", "m"], (2, 600.0)),
        (["--model", "openai", "--model-name", "m", "--model-setting", "timeout_s=200"], (2, 2 * (4 * 200 + 3.5))),
        (["--model", "openai", "--model-name", "m", "--concurrency", "3", "--episode-timeout", "9"], (3, 9.0)),
    ],
)
def test_run_limits_follow_the_backend_unless_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str], expected: tuple[int, float]
) -> None:
    monkeypatch.chdir(tmp_path)
    args = build_parser("run").parse_args(["run", *flags])
    assert run_limits(effective_config(args), args.concurrency or 0, args.episode_timeout or 0.0) == expected


LOCAL = ["--model", "openai", "--model-name", "local", *(w for s in LOCAL_SETTINGS for w in ("--model-setting", s))]


@pytest.mark.parametrize(
    ("flags", "file", "expected"),
    [
        ([], "", 300.0),
        (["--model", "openai", "--model-name", "m", "--model-setting", "timeout_s=200"], "", 4 * 200 + 3.5 + 60),
        (LOCAL, "", 2 * 300 + 0.5 + 60),
        (LOCAL, "[runtime]\nhandler_timeout_s = 120.0\n", 120.0),
    ],
)
def test_the_handler_timeout_outlasts_the_slowest_model_call_unless_told(
    tmp_path: Path, flags: list[str], file: str, expected: float
) -> None:
    path = write(tmp_path, file)
    config = effective_config(build_parser("run").parse_args(["run", "--config", str(path), *flags]))
    assert config.handler_timeout_s == expected
    assert worker_settings(config).handler_timeout_s == expected


def test_run_limits_from_the_config_file(tmp_path: Path) -> None:
    path = write(tmp_path, "[run]\nconcurrency = 1\nepisode_timeout_s = 900.0\n")
    args = build_parser("run").parse_args(["run", "--config", str(path), "--model", "openai", "--model-name", "m"])
    assert run_limits(effective_config(args)) == (1, 900.0)


def test_a_malformed_model_setting_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--model-setting", "max_tokens"]) == 2
    assert capsys.readouterr().err == (
        "faultline: usage error: --model-setting 'max_tokens': expected [ROLE.]KEY=VALUE, e.g. tool.max_tokens=256\n"
    )


def _commands_with_model_flags(parser: argparse.ArgumentParser, command: tuple[str, ...] = ()) -> Iterator[
    tuple[tuple[str, ...], argparse.ArgumentParser]
]:  # fmt: skip
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands_with_model_flags(sub, (*command, name))
    if "--model-name" in parser._option_string_actions:
        yield command, parser


MODEL_FLAG_COMMANDS = dict(_commands_with_model_flags(build_parser()))
NO_MODEL_NAME = '[models.tool]\nbackend = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n'


REQUIRED = {
    ("attribute",): ["j.sqlite"],
    ("campaign",): ["--out", "c"],
    ("fama", "analyze"): ["j.sqlite"],
    ("fork",): ["j.sqlite", "--episode", "e", "--at", "1", "--drop"],
    ("report",): ["c"],
}
"""What each command needs besides the model flags: never read, as the config is resolved before."""


def _flags_of(command: tuple[str, ...], config: Path, *flags: str) -> argparse.Namespace:
    return MODEL_FLAG_COMMANDS[command].parse_args([*REQUIRED.get(command, []), "--config", str(config), *flags])


def test_every_command_that_calls_models_takes_the_model_flags() -> None:
    wanted = {("run",), ("campaign",), ("fama", "loop"), ("fama", "analyze"), ("report",), ("attribute",), ("fork",)}
    assert wanted <= MODEL_FLAG_COMMANDS.keys()


@pytest.mark.parametrize("command", sorted(MODEL_FLAG_COMMANDS), ids=" ".join)
def test_the_command_line_model_flags_make_a_config_whole_before_it_is_checked(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    path = write(tmp_path, NO_MODEL_NAME)
    refused = f'{path}: a model name is needed with backend = "openai" - at $.models.tool.model'
    with pytest.raises(ConfigError) as alone:
        effective_config(_flags_of(command, path))
    assert str(alone.value) == refused
    tool = effective_config(_flags_of(command, path, "--model-name", "m")).model("tool")
    assert (tool.backend, tool.model, tool.base_url) == ("openai", "m", "http://127.0.0.1:9/v1")
    tool = effective_config(_flags_of(command, path, "--model-name", "m", "--base-url", "http://h/v1")).model("tool")
    assert (tool.model, tool.base_url) == ("m", "http://h/v1")
    assert effective_config(_flags_of(command, path, "--model", "sim")).model("tool").backend == "sim"
    set_on_line = _flags_of(command, write(tmp_path, ""), "--model-setting", "tool.backend=openai", "--model-name", "m")
    assert effective_config(set_on_line).model("tool").model == "m"


def test_model_flags_over_a_sim_role_leave_its_emulated_latency_behind(tmp_path: Path) -> None:
    path = write(tmp_path, '[models.tool.latency]\ndistribution = "fixed"\nseconds = 0.5\n')
    assert load_config(path).model("tool").latency.emulated
    args = build_parser("run").parse_args(["run", "--config", str(path), "--model", "openai", "--model-name", "m"])
    assert not effective_config(args).model("tool").latency.emulated, "the endpoint answers at its own pace"


def test_run_with_a_config_that_needs_the_model_name_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # the run's processes read the run's settings, not this folder's faultline.toml
    with OpenAIServer() as server:
        write(tmp_path, f'[models.default]\nbackend = "openai"\nbase_url = "{server.url}"\n')
        journal = ["--journal", str(tmp_path / "j.sqlite"), "--tasks", "1", "--max-turns", "1", "--json"]
        assert main(["run", *journal]) == 1
        assert capsys.readouterr().err == (
            'faultline: error: faultline.toml: a model name is needed with backend = "openai"'
            " - at $.models.default.model\n"
        )
        code = main(["run", *journal, "--model-name", "m"])
        out, err = capsys.readouterr()
        assert code in (0, 1), err
        assert out, err
        assert "error" not in json.loads(out)["outcomes"], err
        assert server.chat_requests and {body["model"] for body in server.chat_requests} == {"m"}
