"""The phone domain: device state gates the tools, the inbox limit forces a deletion."""

from __future__ import annotations

import sqlite3
from random import Random

import pytest

from faultline.envs import ERROR_CATEGORIES, Action, load_domain
from faultline.envs.phone import CAPACITY, Phone


@pytest.fixture(scope="module")
def phone() -> Phone:
    domain = load_domain("phone")
    assert isinstance(domain, Phone)
    return domain


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


def test_every_ground_truth_succeeds_and_scores_one(phone: Phone) -> None:
    for task in phone.tasks():
        db = _run(phone, *task.actions)
        assert phone.score(task, db, task.outputs).reward == 1.0, task.id


def test_every_mistake_the_simulator_can_make_breaks_its_task(phone: Phone) -> None:
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
    assert seen == {"policy_violation", "wrong_value", "wrong_entity"}


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
