"""entry_from_episode: what an episode's messages make of its memory entry, without a bus."""

from __future__ import annotations

from typing import Any

import msgspec

from faultline.core import ChatMessage, Envelope, EpisodeCompleted, LlmRequest, LlmResponse, UserTurn, derive_id
from faultline.services.memory import (
    MEMORY_AGENT,
    ToolCallRecord,
    entry_from_episode,
    entry_from_facts,
    episode_facts,
    extractor_request,
    sim_preferences,
    sim_reflection,
)
from faultline.services.memory._projection import extraction_input, reflection_recording
from tests.services.memory.episodes import episode, mistake


def test_a_success_is_the_first_user_turn_its_calls_and_feedback_1() -> None:
    envs = episode("s", query="  Cancel order #W1  ", calls=[("get_order_details", {"order_id": "#W1"}, {"ok": 1})])
    entry = entry_from_episode(envs)
    assert entry is not None
    assert (entry.id, entry.episode, entry.domain) == ("s", "s", "retail")
    assert entry.query == "Cancel order #W1"
    assert entry.calls == [ToolCallRecord(name="get_order_details", arguments={"order_id": "#W1"})]
    assert entry.feedback == 1
    assert entry.reflection == ""


def test_a_failure_gets_the_offline_critique_of_what_it_shows() -> None:
    calls = [("get_order_details", {"order_id": "#W1"}, {"ok": 1}), ("cancel_pending_order", {"order_id": "#W1"}, "ok")]
    facts = episode_facts(episode("f", query="Cancel order #W1", reward=0.0, calls=calls))
    assert facts is not None
    entry = entry_from_facts(facts)
    assert entry.feedback == 0
    assert entry.reflection == sim_reflection(facts.exchanges, "All done.")
    assert entry.reflection.startswith("The run failed after 2 tool calls.")


def test_a_simulators_own_mistake_labels_change_no_entry_and_no_extractor_request() -> None:
    """The completed event of a sim episode carries the simulator's labels of its mistakes; with them removed
    or scrambled the entry and what a model extractor would be asked are the same: neither reads them."""
    calls = [("cancel_pending_order", {"order_id": "#W1"}, "ok"), ("refund", {"order_id": "#W1"}, None)]
    runs = [
        episode("f", query="Cancel order #W7", reward=0.0, calls=calls, mistakes=labels)
        for labels in ([mistake(0)], [], [mistake(3, "early_stop", made="goodbye", intended="refund #W7")])
    ]
    facts = [episode_facts(run) for run in runs]
    assert all(f is not None for f in facts)
    entries = [entry_from_facts(f) for f in facts if f is not None]
    assert entries[0].reflection and entries[1:] == [entries[0], entries[0]]
    requests = [extractor_request(extraction_input(f, similar=[], tools=[])) for f in facts if f is not None]
    assert requests[1:] == [requests[0], requests[0]]


def test_with_the_extractor_off_no_entry_carries_a_reflection() -> None:
    """`[memory] extractor = "off"` as the episode recorded it: neither a failure's critique nor a preference
    task's summary, and nothing for the service to ask an extractor (`reflects`)."""
    failed: dict[str, Any] = {"query": "Cancel order #W1", "reward": 0.0, "mistakes": [mistake(0)]}
    rated: dict[str, Any] = {"query": "Open a ticket", "calls": [("create_jira_issue", {}, "ok")], "ratings": {}}
    for kind in (failed, rated):
        on = episode_facts(episode("on", memory={"mode": "topk", "extractor": "on"}, **kind))
        off = episode_facts(episode("off", memory={"mode": "topk", "extractor": "off"}, **kind))
        assert on is not None and on.reflects and entry_from_facts(on).reflection
        assert off is not None and not off.reflects and entry_from_facts(off).reflection == ""
        assert entry_from_facts(off).calls == entry_from_facts(on).calls


def test_feedback_is_1_only_for_a_full_reward() -> None:
    entry = entry_from_episode(episode("p", query="Cancel order #W1", reward=0.99, outcome="success"))
    assert entry is not None and entry.feedback == 0


def test_messages_after_the_first_completed_event_are_not_part_of_the_episode() -> None:
    envs = episode("late", query="Cancel order #W1", late=True)
    again = Envelope(id="x", episode="late", sender="runner", body=EpisodeCompleted(outcome="timeout"))
    assert entry_from_episode([*envs, again]) == entry_from_episode(envs[:-1])


def test_the_query_is_the_first_non_empty_user_turn_to_the_tool_agent() -> None:
    envs = episode("q", query="The real request")
    aside = Envelope(id="aside", episode="q", sender="user", recipient="helper", body=UserTurn(text="not to the agent"))
    blank = Envelope(id="blank", episode="q", sender="user", recipient="tool", body=UserTurn(text="   "))
    entry = entry_from_episode([envs[0], aside, blank, *envs[1:]])
    assert entry is not None and entry.query == "The real request"


def test_episodes_without_an_entry() -> None:
    envs = episode("n", query="Cancel order #W1")
    assert entry_from_episode(envs[:-1]) is None, "not completed"
    assert entry_from_episode([e for e in envs if not isinstance(e.body, UserTurn)]) is None, "no query"
    assert entry_from_episode(episode("e", query="Cancel order #W1", outcome="error", reward=0.0)) is None


def test_user_and_tool_ratings_come_from_the_completed_details() -> None:
    envs = episode("u", query="Book a table", user="alice")
    end = envs[-1]
    assert isinstance(end.body, EpisodeCompleted)
    details = {**end.body.details, "tool_ratings": {"book_table": 0, "find_table": 1, "bad": 5}}
    envs[-1] = msgspec.structs.replace(end, body=msgspec.structs.replace(end.body, details=details))
    entry = entry_from_episode(envs)
    assert entry is not None
    assert entry.user == "alice"
    assert entry.tool_ratings == {"book_table": 0, "find_table": 1}


def test_a_preference_episode_gets_the_offline_preference_summary_whatever_its_feedback() -> None:
    calls = [("create_zendesk_ticket", {"title": "x"}, "ok"), ("create_jira_issue", {"title": "x"}, "ok")]
    ratings = {"create_zendesk_ticket": 0, "create_jira_issue": 1}
    for reward in (0.0, 1.0):
        entry = entry_from_episode(episode("pref", query="Open a ticket", calls=calls, reward=reward, ratings=ratings))
        assert entry is not None
        assert entry.reflection == sim_preferences(ratings)
        assert entry.reflection == (
            "PREFERENCES\n- preferred tools: create_jira_issue\n- avoided tools: create_zendesk_ticket"
        )
    assert sim_preferences({}) == "No clear preference"


def test_a_journaled_model_reflection_wins_over_the_offline_one() -> None:
    envs = episode("m", query="Cancel order #W1", reward=0.0, mistakes=[mistake(0)])
    facts = episode_facts(envs)
    assert facts is not None and facts.reflection is None
    request = LlmRequest(role="memory_extractor", messages=[ChatMessage(role="user", content="critique")])
    recording = reflection_recording(facts, request, LlmResponse(content=" The agent picked the wrong order. "))
    assert recording.sender == MEMORY_AGENT
    assert recording.id == derive_id(envs[-1].id, 0, "r")
    assert recording.causation == envs[-1].id
    entry = entry_from_episode([*envs, recording])
    assert entry is not None and entry.reflection == "The agent picked the wrong order."
    facts = episode_facts([*envs, recording])
    assert facts is not None and facts.reflection == recording.body


def test_exchanges_pair_calls_with_results_for_the_extractor() -> None:
    envs = episode(
        "x", query="Cancel order #W1", reward=0.0, calls=[("a", {"k": 1}, {"z": 2, "y": 1}), ("b", {}, "text")]
    )
    facts = episode_facts(envs)
    assert facts is not None
    assert [(e.call.name, e.response) for e in facts.exchanges] == [("a", '{"y":1,"z":2}'), ("b", "text")]
