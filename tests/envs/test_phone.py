"""The phone domain: device state gates the tools, the inbox limit forces a deletion."""

from __future__ import annotations

import sqlite3
from random import Random

import pytest

from faultline import PluginError
from faultline.agents.memory import is_preference_task, preference_ratings, task_user
from faultline.envs import ERROR_CATEGORIES, WRONG_ENTITY, Action, load_domain
from faultline.envs.phone import CAPACITY, POLICY, Phone

SHARED = "phone?tasks=preference"
APPS = {"send_message": "send_chat_message", "add_reminder": "add_calendar_event"}
"""Each job's two apps on the shared phone."""


def _phone(spec: str) -> Phone:
    domain = load_domain(spec)
    assert isinstance(domain, Phone)
    return domain


@pytest.fixture(scope="module")
def phone() -> Phone:
    return _phone("phone")


@pytest.fixture(scope="module")
def shared() -> Phone:
    return _phone(SHARED)


def _act(tool: str, /, **arguments: object) -> Action:
    return Action(name=tool, arguments=arguments)


def _run(phone: Phone, *actions: Action) -> sqlite3.Connection:
    db = phone.open_database()
    for action in actions:
        outcome = phone.call(db, action)
        assert outcome.ok, (action, outcome.error)
    return db


def test_the_domain_has_enough_tasks_and_tools(phone: Phone) -> None:
    assert len(phone.tasks()) >= 20
    assert len(phone.tools()) >= 12
    assert sum(task.refusal for task in phone.tasks()) >= 3


@pytest.mark.parametrize("spec", ["phone", SHARED])
def test_every_ground_truth_succeeds_and_scores_one(spec: str) -> None:
    phone = _phone(spec)
    for task in phone.tasks():
        db = _run(phone, *task.actions)
        assert phone.score(task, db, task.outputs).reward == 1.0, task.id


@pytest.mark.parametrize(
    ("spec", "categories"),
    [("phone", {"policy_violation", "wrong_value", "wrong_entity"}), (SHARED, {"wrong_value", "wrong_entity"})],
)
def test_every_mistake_the_simulator_can_make_breaks_its_task(spec: str, categories: set[str]) -> None:
    phone = _phone(spec)
    seen = set()
    for task in phone.tasks():
        for step in range(len(task.actions) + 1):
            for category in ERROR_CATEGORIES:
                wrong = phone.mistake(task, step, category, Random(0))
                if wrong is None:
                    continue
                seen.add(category)
                db = phone.open_database()
                for action in [*task.actions[:step], wrong, *task.actions[step + 1 :]]:
                    phone.call(db, action)
                assert phone.score(task, db, task.outputs).reward == 0.0, (task.id, step, category)
    assert seen == categories


def test_messages_need_login_and_wifi(phone: Phone) -> None:
    db = phone.open_database()
    send = _act("send_message", receiver="Frank", text="hi")
    assert "not logged in" in phone.call(db, send).error
    assert phone.call(db, _act("login_device")).ok
    assert "Wi-Fi is off" in phone.call(db, send).error
    assert phone.call(db, _act("turn_on_wifi")).ok
    assert phone.call(db, send).output == {"message_id": 10, "status": "Message sent to Frank."}


def test_a_full_inbox_needs_a_deletion_before_the_next_send(phone: Phone) -> None:
    db = _run(phone, _act("login_device"), _act("turn_on_wifi"), _act("send_message", receiver="Bob", text="one"))
    assert phone.call(db, _act("get_device_status")).output["messages"] == CAPACITY
    full = phone.call(db, _act("send_message", receiver="Bob", text="two"))
    assert "inbox is full" in full.error
    assert phone.call(db, _act("get_earliest_message_id")).output == 1
    assert phone.call(db, _act("delete_message", message_id=1)).ok
    assert phone.call(db, _act("send_message", receiver="Bob", text="two")).ok


def test_unknown_receivers_ids_and_bad_times_are_errors(phone: Phone) -> None:
    db = _run(phone, _act("login_device"), _act("turn_on_wifi"))
    assert "'Zed' is not a saved contact" in phone.call(db, _act("send_message", receiver="Zed", text="x")).error
    assert "no message with id 99" in phone.call(db, _act("delete_message", message_id=99)).error
    assert "expected integer, got str" in phone.call(db, _act("delete_message", message_id="3")).error
    bad_time = phone.call(db, _act("add_reminder", title="x", time="tomorrow"))
    assert "is not in the form 'YYYY-MM-DD HH:MM'" in bad_time.error
    assert "already exists" in phone.call(db, _act("add_contact", name="alice", phone="1")).error


def test_the_policy_only_rules_are_not_enforced_by_the_tools(phone: Phone) -> None:
    db = _run(phone, _act("login_device"))
    assert phone.call(db, _act("delete_message", message_id=2)).ok
    assert phone.call(db, _act("add_reminder", title="late", time="2024-01-01 08:00")).ok


def test_the_standard_phone_keeps_its_tools_tasks_and_policy(phone: Phone, shared: Phone) -> None:
    """Its journals replay only while its model requests stay as recorded: the second apps are the shared phone's."""
    tools = [spec.name for spec in phone.tools()]
    assert len(tools) == 15 and len(phone.tasks()) == 23 and phone.policy == POLICY
    assert not any(is_preference_task(task) for task in phone.tasks())
    assert [spec.name for spec in shared.tools()] == [*tools, *APPS.values()]
    assert "Chat (`send_chat_message`)" in shared.policy and "Chat" not in phone.policy


def test_an_unknown_task_set_is_refused() -> None:
    with pytest.raises(PluginError, match="phone has no task set 'nope'; it has standard, preference"):
        load_domain("phone?tasks=nope")


def test_each_user_of_the_shared_phone_wants_one_app_per_job_and_each_app_is_someone_s_unwanted_one(
    shared: Phone,
) -> None:
    tasks = shared.tasks()
    assert all(is_preference_task(task) for task in tasks)
    wanted: dict[str, set[str]] = {}
    for task in tasks:
        wanted.setdefault(task_user(task), set()).add(task.actions[-1].name)
    assert len(wanted) >= 3 and all(sum(task_user(t) == user for t in tasks) >= 4 for user in wanted)
    for apps in wanted.values():
        assert len(apps) == 2 and all(len(apps & {one, other}) == 1 for one, other in APPS.items())
    for app in [*APPS, *APPS.values()]:
        assert any(app in apps for apps in wanted.values()) and any(app not in apps for apps in wanted.values())
    assert [task_user(task) for task in tasks[:3]] == list(wanted)  # a run of the first three rates every user


def test_the_wrong_entity_on_a_preference_task_is_the_other_app_and_the_user_rates_it_0(shared: Phone) -> None:
    for task in shared.tasks():
        step = len(task.actions) - 1
        right = task.actions[step]
        wrong = shared.mistake(task, step, WRONG_ENTITY, Random(0))
        assert wrong is not None and wrong.arguments == right.arguments
        assert {wrong.name, right.name} in ({one, other} for one, other in APPS.items())
        assert preference_ratings(task, [a.name for a in task.actions[:step]] + [wrong.name])[wrong.name] == 0


def test_chat_needs_login_wifi_and_a_contact_but_no_room_in_the_inbox(shared: Phone) -> None:
    db = shared.open_database()
    chat = _act("send_chat_message", receiver="bob", text="hi")
    assert "not logged in" in shared.call(db, chat).error
    assert shared.call(db, _act("login_device")).ok
    assert "Wi-Fi is off" in shared.call(db, chat).error
    assert shared.call(db, _act("turn_on_wifi")).ok
    assert shared.call(db, _act("send_message", receiver="Bob", text="one")).ok
    assert shared.call(db, _act("get_device_status")).output["messages"] == CAPACITY
    assert shared.call(db, chat).output == {"chat_id": 1, "status": "Chat message sent to Bob."}
    assert "'Zed' is not a saved contact" in shared.call(db, _act("send_chat_message", receiver="Zed", text="x")).error


def test_a_calendar_event_checks_its_time_as_a_reminder_does(shared: Phone) -> None:
    db = _run(shared, _act("login_device"))
    bad = shared.call(db, _act("add_calendar_event", title="x", time="tomorrow"))
    assert "is not in the form 'YYYY-MM-DD HH:MM'" in bad.error
    event = shared.call(db, _act("add_calendar_event", title="Gym", time="2024-06-16 07:00"))
    assert event.output == {"event_id": 1, "status": "Event 'Gym' added to the calendar for 2024-06-16 07:00."}
