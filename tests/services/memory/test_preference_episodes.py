"""Preference memory across episodes: what one episode's user rated changes the tools the next is offered."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from faultline.agents import PROTOCOL, EnvironmentHost, EpisodeSpec, ToolAgent
from faultline.agents.memory import task_user
from faultline.bus import Bus
from faultline.cli import main
from faultline.core import (
    AgentHarness,
    ConversationEnded,
    EpisodeCompleted,
    LlmRequest,
    Recording,
    Start,
    ToolCall,
    UserTurn,
)
from faultline.envs import Task, load_domain
from faultline.journal import JournalReader
from faultline.runtime.models import SimBackend
from faultline.services.memory import (
    HashingEmbedder,
    MemoryEntry,
    MemoryService,
    MemoryStore,
    ToolCallRecord,
    tool_name,
)

PLUGINS = Path(__file__).resolve().parent / "plugins"
DOMAIN = "helpdesk:Helpdesk"


def tool_requests(journal: Path) -> dict[str, list[LlmRequest]]:
    """Per task, the tool agent's model requests as journaled."""
    with JournalReader(journal) as reader:
        envelopes = [r.envelope() for r in reader.rows()]
    tasks = {e.episode: e.body.task for e in envelopes if e.kind == "episode_started"}  # type: ignore[union-attr]
    found: dict[str, list[LlmRequest]] = {}
    for env in envelopes:
        if env.sender == "tool" and isinstance(env.body, Recording) and env.body.call == "llm":
            found.setdefault(tasks[env.episode], []).append(msgspec.convert(env.body.request, LlmRequest))
    return found


def offered(requests: list[LlmRequest]) -> set[str]:
    """Every tool name the agent's model was offered over an episode."""
    return {tool_name(schema) for request in requests for schema in request.tools}


@pytest.mark.slow
@pytest.mark.timeout(300)  # two runs of several processes each, on a shared machine
def test_a_zero_rating_in_one_run_hides_the_tool_from_that_user_in_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Checks the mechanism with the offline `sim` model, not whether a model uses the memory well.

    Run 1: Ann's agent opens her ticket in Zendesk (a forced wrong-tracker mistake); she rates that
    tool 0 and the memory keeps it. Run 2, a new process tree on the same memory store: Ann's next
    request is no longer offered Zendesk, Ben's still is, and the journal replays identically.
    """
    monkeypatch.chdir(tmp_path)
    (tmp_path / "faultline.toml").write_text(
        f'[plugins]\npath = ["{PLUGINS}"]\n\n[memory]\nmode = "topk"\nstore = "memory.sqlite"\n'
    )
    first = ["run", "--domain", DOMAIN, "--task-ids", "ann-0", "--error-rate", "wrong_entity=1.0", "--json"]
    assert main([*first, "--journal", "one.sqlite"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["outcomes"] == {"failure": 1}
    before = tool_requests(tmp_path / "one.sqlite")
    assert offered(before["ann-0"]) == {"create_zendesk_ticket", "create_jira_issue"}

    second = ["run", "--domain", DOMAIN, "--task-ids", "ann-1,ben-0", "--json", "--journal", "two.sqlite"]
    assert main(second) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["outcomes"] == {"success": 2}
    after = tool_requests(tmp_path / "two.sqlite")
    assert offered(after["ann-1"]) == {"create_jira_issue"}
    assert offered(after["ben-0"]) == {"create_zendesk_ticket", "create_jira_issue"}
    assert "avoided tools: create_zendesk_ticket" in after["ann-1"][0].messages[0].content

    assert main(["replay", "two.sqlite"]) == 0
    assert "identical" in capsys.readouterr().out


BUILT_IN = "phone?tasks=preference"
SUMMARY = "PREFERENCES\n- preferred tools: send_chat_message\n- avoided tools: send_message"


def extractor_requests(journal: Path) -> dict[str, LlmRequest]:
    """Per task, the request the memory service journaled when it asked its extractor model."""
    with JournalReader(journal) as reader:
        envelopes = [r.envelope() for r in reader.rows()]
    tasks = {e.episode: e.body.task for e in envelopes if e.kind == "episode_started"}  # type: ignore[union-attr]
    return {
        tasks[env.episode]: msgspec.convert(env.body.request, LlmRequest)
        for env in envelopes
        if env.sender == "memory" and isinstance(env.body, Recording)
    }


@pytest.mark.slow
@pytest.mark.timeout(300)  # two runs of several processes each, on a shared machine
def test_on_the_built_in_shared_phone_a_user_s_0_rating_hides_that_app_from_them_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The built-in preference tasks through the whole system with `sim` (the mechanism, not a model's use of it).

    Run 1: Tom's message goes out by Messages (a forced wrong-app mistake); he rates it 0, and the memory's
    extractor model (scripted here) is asked for his preferences. Run 2, on the same memory store: Tom is
    no longer offered Messages but still both calendar apps, which he has not rated; Grace, who wants
    Messages, still gets it; the journal replays identically.
    """
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "extractor.jsonl"
    script.write_text(json.dumps({"role": "memory_extractor", "reply": SUMMARY}) + "\n")
    (tmp_path / "faultline.toml").write_text(
        '[memory]\nmode = "topk"\nstore = "memory.sqlite"\n\n'
        f'[models.memory_extractor]\nbackend = "scripted"\nscript = "{script}"\n'
    )
    run = ["run", "--domain", BUILT_IN, "--json"]
    first = [*run, "--task-ids", "tom-send-00", "--error-rate", "wrong_entity=1.0", "--journal", "one.sqlite"]
    assert main(first) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["outcomes"] == {"failure": 1}
    both = {"send_message", "send_chat_message"}
    assert both <= offered(tool_requests(tmp_path / "one.sqlite")["tom-send-00"])
    asked = extractor_requests(tmp_path / "one.sqlite")["tom-send-00"]
    assert asked.metadata["style"] == "preferences"
    tools, did = asked.messages[1].content.split("## What the assistant did")
    assert '"name":"send_chat_message"' in tools and '"name":"send_message"' in did

    second = [*run, "--task-ids", "tom-send-01,tom-schedule-00,grace-send-01", "--journal", "two.sqlite"]
    assert main(second) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["outcomes"] == {"success": 3}
    after = tool_requests(tmp_path / "two.sqlite")
    assert "send_chat_message" in offered(after["tom-send-01"]) and "send_message" not in offered(after["tom-send-01"])
    assert {"add_reminder", "add_calendar_event"} <= offered(after["tom-schedule-00"])
    assert both <= offered(after["grace-send-01"])
    assert SUMMARY in after["tom-send-01"][0].messages[0].content

    assert main(["replay", "two.sqlite"]) == 0
    assert "identical" in capsys.readouterr().out
    assert (tmp_path / "memory.sqlite").is_file()  # where faultline.toml puts it, so `memory search` finds it


class MemoryHarness(AgentHarness):
    """A harness whose memory requests a real `MemoryService` answers from `store` (no episode ingestion)."""

    def __init__(self, service: MemoryService) -> None:
        super().__init__(ToolAgent(), episode="recall", backend=SimBackend())
        self.service = service
        self.asked: list[dict[str, Any]] = []

    async def request(self, service: str, payload: bytes, timeout_s: float) -> bytes:
        self.asked.append(msgspec.msgpack.decode(payload))
        return await self.service.answer(payload)


def past(i: int, domain: str, task: Task, tool: str, feedback: int) -> MemoryEntry:
    return MemoryEntry(
        id=f"p{i}",
        episode=f"p{i}",
        domain=domain,
        query=f"{task.instruction} ({i})",
        feedback=feedback,  # type: ignore[arg-type]
        calls=[ToolCallRecord(name=tool)],
        user=task_user(task),
    )


@pytest.mark.parametrize(
    ("domain", "task_id", "protocol", "ranker", "named", "grouped"),
    [
        (DOMAIN, "ann-0", PROTOCOL, "rating", True, True),
        (DOMAIN, "ann-0", PROTOCOL, "similarity", True, False),
        (DOMAIN, "ann-0", 5, "rating", False, True),
        (BUILT_IN, "tom-send-00", PROTOCOL, "similarity", True, False),
        ("retail", "cancel-00", PROTOCOL, "similarity", False, False),
    ],
)
async def test_recall_names_the_user_of_a_preference_task_and_groups_examples_as_configured(
    bus: Bus,
    monkeypatch: pytest.MonkeyPatch,
    domain: str,
    task_id: str,
    protocol: int,
    ranker: str,
    named: bool,
    grouped: bool,
) -> None:
    """From protocol 6 the tool agent names a preference task's user, so the tool that user rated 0 is
    not offered; a protocol 5 episode asks anonymously, as it was recorded, and so does a general task
    (hard preference guiding is for personalised tool use). `ranker` "rating" groups the examples."""
    monkeypatch.setattr(sys, "path", [str(PLUGINS), *sys.path])
    task = load_domain(domain).task(task_id)
    disliked = {t.name for t in load_domain(domain).tools()} - {task.actions[-1].name}
    assert task_user(task) and disliked
    unwanted = sorted(disliked)[0]
    with MemoryStore(":memory:", HashingEmbedder()) as store:
        await store.add_many([past(1, domain, task, unwanted, 0), past(2, domain, task, task.actions[-1].name, 1)])
        harness = MemoryHarness(MemoryService(bus, store))
        memory = {"mode": "topk", "k": 5, "ranker": ranker}
        spec = EpisodeSpec(domain=domain, task=task.id, memory=memory, protocol=protocol)
        await harness.deliver(Start(data=msgspec.to_builtins(spec)))
        await harness.deliver(UserTurn(text=task.instruction), sender="user")
    [asked] = harness.asked
    assert asked["user"] == (task_user(task) if named else "")
    [request] = [msgspec.convert(r.request, LlmRequest) for r in harness.recordings if r.call == "llm"]
    assert (unwanted not in {tool_name(t) for t in request.tools}) == named
    system = request.messages[0].content
    assert ("### Requests the user was not satisfied with" in system) == grouped
    assert "Example 1" in system


@pytest.mark.parametrize("protocol", [PROTOCOL, 5])
async def test_the_environment_reports_the_user_and_their_tool_ratings_from_protocol_6(
    monkeypatch: pytest.MonkeyPatch, protocol: int
) -> None:
    """On a preference task each tool called is rated (1: the one the user wanted); before protocol 6 the
    completed event carries neither user nor ratings, as journals of that protocol recorded it."""
    monkeypatch.setattr(sys, "path", [str(PLUGINS), *sys.path])
    env = AgentHarness(EnvironmentHost())
    await env.deliver(EpisodeSpec(domain=DOMAIN, task="ann-0", protocol=protocol).start())
    for i, name in enumerate(["create_zendesk_ticket", "create_jira_issue", "create_zendesk_ticket"]):
        await env.deliver(ToolCall(call_id=f"c{i}", name=name, arguments={"title": "x"}), sender="tool")
    [done] = await env.deliver(ConversationEnded(turns=1), sender="user")
    assert isinstance(done.body, EpisodeCompleted)
    added = {key: done.body.details.get(key) for key in ("user", "preference", "tool_ratings")}
    if protocol >= 6:
        assert added == {
            "user": "ann",
            "preference": True,
            "tool_ratings": {"create_zendesk_ticket": 0, "create_jira_issue": 1},
        }
    else:
        assert added == {"user": None, "preference": None, "tool_ratings": None}
