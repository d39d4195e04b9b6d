"""The retail domain: seeded store, tools, policy split between tools and agent, tasks."""

from __future__ import annotations

import sqlite3
import time
from collections import Counter
from random import Random

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from faultline.envs import ERROR_CATEGORIES, Action, Task, load_domain
from faultline.envs.retail import Retail
from faultline.envs.retail._data import generate, write

READS = {
    "find_user_id_by_email",
    "find_user_id_by_name_zip",
    "get_user_details",
    "get_order_details",
    "get_product_details",
    "list_all_product_types",
}


@pytest.fixture(scope="module")
def retail() -> Retail:
    domain = load_domain("retail")
    assert isinstance(domain, Retail)
    return domain


def _run(domain: Retail, actions: list[Action]) -> sqlite3.Connection:
    db = domain.open_database()
    for action in actions:
        outcome = domain.call(db, action)
        assert outcome.ok, (action, outcome.error)
    return db


def _hash_of_store(seed: int) -> str:
    db = sqlite3.connect(":memory:")
    write(db, generate(seed))
    return Retail(seed).state_hash(db)


def test_the_store_is_generated_fast_and_at_scale() -> None:
    started = time.perf_counter()
    data = generate(123)
    assert time.perf_counter() - started < 1.0
    assert len(data.users) == 500
    assert len(data.products) >= 20
    assert all(len(product.variants) >= 6 for product in data.products)
    assert 800 <= len(data.orders) <= 1200
    statuses = Counter(order.status for order in data.orders)
    assert set(statuses) == {
        "pending",
        "pending (items modified)",
        "processed",
        "delivered",
        "cancelled",
        "return requested",
        "exchange requested",
    }


def test_the_same_seed_gives_the_same_store_and_tasks() -> None:
    assert generate(7) == generate(7)
    assert _hash_of_store(7) == _hash_of_store(7)
    assert _hash_of_store(7) != _hash_of_store(8)
    assert Retail(7).tasks() == Retail(7).tasks()
    assert Retail(7).tasks() != Retail(8).tasks()


def test_the_domain_is_rich_enough(retail: Retail) -> None:
    tools = retail.tools()
    assert len(tools) >= 12
    assert {spec.name for spec in tools if not spec.writes} >= READS
    tasks = retail.tasks()
    assert len(tasks) >= 60
    assert len({task.id for task in tasks}) == len(tasks)
    writes = [sum(action.name not in READS for action in task.actions) for task in tasks]
    assert sum(count >= 2 for count in writes) >= 6
    refusals = [task for task in tasks if task.refusal]
    assert len(refusals) >= 8
    for task in refusals:
        assert all(action.name in READS for action in task.actions), task.id
        assert task.outputs, task.id
    assert sum(bool(task.forbidden) for task in refusals) >= 4


def test_every_ground_truth_succeeds_and_scores_one(retail: Retail) -> None:
    for task in retail.tasks():
        db = _run(retail, task.actions)
        assert retail.score(task, db, [" / ".join(task.outputs)]).reward == 1.0, task.id
        if task.outputs:
            assert retail.score(task, db, ["I could not find out."]).reward == 0.0, task.id


def test_a_wrong_write_scores_zero(retail: Retail) -> None:
    unrelated = next(o for o in retail.index.data.orders if o.status == "pending")
    for task in retail.tasks():
        if any(action.arguments.get("order_id") == unrelated.order_id for action in task.actions):
            continue
        arguments = {"order_id": unrelated.order_id, "reason": "no longer needed"}
        extra = Action(name="cancel_pending_order", arguments=arguments)
        db = _run(retail, [*task.actions, extra])
        result = retail.score(task, db, task.outputs)
        assert (result.reward, result.db_match) == (0.0, False), task.id


def test_every_mistake_the_simulator_can_make_breaks_its_task(retail: Retail) -> None:
    """Each mistake the simulator can make is accepted by the tools and breaks the task."""
    made: Counter[str] = Counter()
    for task in retail.tasks():
        for step in range(len(task.actions) + 1):
            for category in ERROR_CATEGORIES:
                wrong = retail.mistake(task, step, category, Random(step))
                if wrong is None:
                    continue
                made[category] += 1
                actions = [*task.actions[:step], wrong, *task.actions[step + 1 :]]
                db = retail.open_database()
                for action in actions:
                    retail.call(db, action)
                assert retail.score(task, db, task.outputs).reward == 0.0, (task.id, step, category)
    assert made["policy_violation"] >= 10
    assert made["wrong_value"] >= 20
    assert made["wrong_entity"] >= 10


def _order(retail: Retail, status: str) -> str:
    return next(order.order_id for order in retail.index.data.orders if order.status == status)


def test_order_states_are_enforced_by_the_tools(retail: Retail) -> None:
    db = retail.open_database()
    delivered = _order(retail, "delivered")
    processed = _order(retail, "processed")
    arguments = {"order_id": delivered, "reason": "no longer needed"}
    cancel = retail.call(db, Action(name="cancel_pending_order", arguments=arguments))
    assert "only pending orders can be cancelled" in cancel.error
    order = retail.index.orders[processed]
    args = {"order_id": processed, "item_ids": [order.items[0].item_id], "payment_method_id": order.payment_method_id}
    returned = retail.call(db, Action(name="return_delivered_order_items", arguments=args))
    assert "only delivered orders can be returned" in returned.error
    pending = _order(retail, "pending")
    reason = retail.call(db, Action(name="cancel_pending_order", arguments={"order_id": pending, "reason": "too slow"}))
    assert "reason must be one of" in reason.error


def test_items_can_be_modified_once(retail: Retail) -> None:
    task = next(t for t in retail.tasks() if "modify-items" in t.tags)
    db = _run(retail, task.actions)
    again = retail.call(db, task.actions[-1])
    assert "items can be modified once" in again.error


def test_a_gift_card_must_cover_a_charge(retail: Retail) -> None:
    index = retail.index
    order, card = next(
        (order, method)
        for user in index.data.users
        for method in user.payment_methods
        if method.source == "gift_card"
        for order in index.orders_of(user, "pending")
        if order.payment_method_id != method.payment_method_id and (method.balance or 0) < order.total
    )
    arguments = {"order_id": order.order_id, "payment_method_id": card.payment_method_id}
    outcome = retail.call(retail.open_database(), Action(name="modify_pending_order_payment", arguments=arguments))
    assert f"gift card {card.payment_method_id} has a balance of {card.balance:.2f}" in outcome.error


def test_policy_only_rules_are_left_to_the_agent(retail: Retail) -> None:
    """The tools accept what only the policy forbids; that is where policy violations land."""
    late = next(t for t in retail.tasks() if "refuse-late-return" in t.tags)
    db = retail.open_database()
    assert retail.call(db, late.forbidden[0]).ok
    assert retail.score(late, db, late.outputs).reward == 0.0
    modified = next(t for t in retail.tasks() if "refuse-modified-cancel" in t.tags)
    assert retail.call(retail.open_database(), modified.forbidden[0]).ok


def test_a_write_returns_the_changed_order(retail: Retail) -> None:
    task = next(t for t in retail.tasks() if "cancel" in t.tags)
    db = _run(retail, task.actions[:-1])
    outcome = retail.call(db, task.actions[-1])
    assert outcome.output["status"] == "cancelled"
    assert outcome.output["payments"][-1]["kind"] == "refund"
    assert outcome.output["cancel_reason"] == task.actions[-1].arguments["reason"]


def test_identity_lookups(retail: Retail) -> None:
    user = retail.index.data.users[0]
    db = retail.open_database()
    by_email = retail.call(db, Action(name="find_user_id_by_email", arguments={"email": user.email.upper()}))
    assert by_email.output == user.user_id
    args = {"first_name": user.first_name, "last_name": user.last_name, "zip": user.address.zip}
    assert retail.call(db, Action(name="find_user_id_by_name_zip", arguments=args)).output == user.user_id
    missing = retail.call(db, Action(name="find_user_id_by_email", arguments={"email": "nobody@example.com"}))
    assert missing.error == "no user with email 'nobody@example.com'"


def _arguments_for(schema: dict[str, object]) -> st.SearchStrategy[dict[str, object]]:
    """Arguments that are right, wrong or absent per field, so checks and tools both get exercised."""
    values = st.one_of(
        st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=12), st.sampled_from(["#W0000000", "pending"]),
        st.lists(st.one_of(st.text(max_size=10), st.integers()), max_size=3),
    )  # fmt: skip
    properties = dict(schema.get("properties", {}))  # type: ignore[call-overload]
    return st.fixed_dictionaries({}, optional={name: values for name in [*properties, "extra"]})


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_any_arguments_give_an_outcome_and_a_failed_call_changes_nothing(retail: Retail, data: st.DataObject) -> None:
    spec = data.draw(st.sampled_from(retail.tools()))
    arguments = data.draw(_arguments_for(spec.parameters))
    db = retail.open_database()
    before = retail.state_hash(db)
    outcome = retail.call(db, Action(name=spec.name, arguments=arguments))
    if outcome.error:
        assert retail.state_hash(db) == before


def test_a_task_round_trips_through_its_wire_form(retail: Retail) -> None:
    task = retail.tasks()[0]
    assert msgspec.json.decode(msgspec.json.encode(task), type=Task) == task
