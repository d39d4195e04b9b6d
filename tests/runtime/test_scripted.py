"""The scripted model: answers from a rules file or a function, checked before a run starts, recorded live
and served again by replay like any model call."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import msgspec
import pytest

from faultline import ConfigError, ModelError
from faultline.bus import Bus
from faultline.cli import main
from faultline.core import ChatMessage, EpisodeStarted, LlmRequest, LlmResponse, Note, Recording, Start
from faultline.journal import JournalReader
from faultline.replay import Replayer
from faultline.runtime import Completions, Worker, load_config, make_backend, start_episode
from faultline.runtime._journal_service import JournalService
from faultline.runtime.models import ScriptedBackend
from tests.runtime.toy import Pinger, Ponger

RULES = [
    {"role": "writer", "contains": "draft", "reply": "Here is the merged draft."},
    {"contains": "weather", "tool_calls": [{"name": "forecast", "arguments": {"city": "Oslo"}}]},
    {"role": "ponger", "contains": "ping 2", "reply": "pong two"},
    {"role": "ponger", "reply": "pong"},
]


def request(role: str, text: str) -> LlmRequest:
    return LlmRequest(
        role=role, messages=[ChatMessage(role="system", content="x"), ChatMessage(role="user", content=text)]
    )


def write_rules(folder: Path, rules: list[dict[str, object]] = RULES, name: str = "answers.jsonl") -> Path:
    path = folder / name
    path.write_text("".join(json.dumps(rule) + "\n" for rule in rules))
    return path


def configured(folder: Path, script: str) -> Path:
    path = folder / "faultline.toml"
    path.write_text(f'[models.ponger]\nbackend = "scripted"\nscript = "{script}"\n')
    return path


def answer_in_upper_case(request: LlmRequest) -> str:
    return request.messages[-1].content.upper()


async def test_the_first_matching_rule_answers(tmp_path: Path) -> None:
    config = load_config(configured(tmp_path, write_rules(tmp_path).name))  # relative to the config file
    backend = make_backend(config, "ponger")
    assert isinstance(backend, ScriptedBackend)
    assert (await backend.complete(request("writer", "merge the draft"))).content == "Here is the merged draft."
    called = await backend.complete(request("anyone", "what is the weather"))
    assert [(c.name, c.arguments) for c in called.tool_calls] == [("forecast", {"city": "Oslo"})]
    assert called.finish_reason == "tool_calls"
    assert (await backend.complete(request("ponger", "ping 2"))).content == "pong two"
    assert (await backend.complete(request("ponger", "ping 3"))).content == "pong"


async def test_a_request_no_rule_answers_fails_its_call_naming_role_and_message(tmp_path: Path) -> None:
    backend = make_backend(load_config(configured(tmp_path, write_rules(tmp_path).name)), "ponger")
    with pytest.raises(ModelError, match=r"^scripted: no rule answers role 'critic' after 'rate this'$"):
        await backend.complete(request("critic", "rate this"))


async def test_a_function_answers_when_the_script_names_one(tmp_path: Path) -> None:
    config = load_config(configured(tmp_path, f"{__name__}:answer_in_upper_case"))
    reply = await make_backend(config, "ponger").complete(request("ponger", "ping 1"))
    assert (
        reply == LlmResponse(content="PING 1", model="scripted", finish_reason="stop", usage=reply.usage)
        and reply.usage.prompt_tokens == 3
    )


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ('{"reply": "fine"}\n{"reply": 3}\n', r"answers.jsonl:2: Expected `str`, got `int` - at `\$.reply`"),
        ('{"reply": "fine"}\nnot json\n', r"answers.jsonl:2: JSON is malformed"),
        ('{"answer": "typo"}\n', r"answers.jsonl:1: Object contains unknown field `answer`"),
        ("\n", r"answers.jsonl: holds no rule"),
    ],
)
def test_a_bad_rules_file_is_one_line_naming_file_and_line_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], lines: str, message: str
) -> None:
    (tmp_path / "answers.jsonl").write_text(lines)
    config = configured(tmp_path, "answers.jsonl")
    with pytest.raises(ConfigError, match=message):
        load_config(config)
    assert main(["config", "check", "--config", str(config)]) == 1
    assert main(["run", "--config", str(config), "--tasks", "1", "--journal", str(tmp_path / "j.sqlite")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.endswith("- at $.models.ponger.script") for line in err), err
    assert not (tmp_path / ".faultline").exists()


def test_a_scripted_role_without_a_script_or_with_a_missing_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "faultline.toml"
    path.write_text('[models.ponger]\nbackend = "scripted"\n')
    with pytest.raises(ConfigError, match=r'set script = "answers.jsonl" or "package.module:function"'):
        load_config(path)
    with pytest.raises(ConfigError, match=r"nowhere.jsonl: no such file - at \$.models.ponger.script"):
        load_config(configured(tmp_path, "nowhere.jsonl"))


async def test_scripted_answers_are_recorded_live_and_served_again_by_replay(bus: Bus, tmp_path: Path) -> None:
    backend = make_backend(load_config(configured(tmp_path, write_rules(tmp_path).name)), "ponger")
    path = tmp_path / "journal.sqlite"
    service = JournalService(bus, path)
    worker = Worker(bus, [Pinger, Ponger], backends=lambda role: backend)
    async with anyio.create_task_group() as tg, Completions(bus, (Pinger.name,)) as completions:
        tg.start_soon(service.run)
        tg.start_soon(worker.run)
        await service.wait_ready()
        await worker.wait_ready()
        await start_episode(bus, "s1", "pinger", EpisodeStarted(task="toy"), Start(data={"rounds": 3}))
        with anyio.fail_after(20):
            done = await completions.wait(["s1"])
            await service.wait_for((await bus.stream_state()).last_seq)
        worker.stop()
        service.stop()
    assert done["s1"].outcome == "success"
    with JournalReader(path) as reader:
        journal = [row.envelope() for row in reader.rows()]
    answers = [msgspec.convert(e.body.response, LlmResponse).content for e in journal if isinstance(e.body, Recording)
               and e.body.call == "llm"]  # fmt: skip
    assert answers == ["pong", "pong two", "pong"]
    assert [e.body.text for e in journal if isinstance(e.body, Note) and e.sender == "ponger"] == answers
    report = Replayer({"pinger": Pinger, "ponger": Ponger}.get).replay(path)  # no model: the journal answers
    assert report.identical and report.agents == 2, report
