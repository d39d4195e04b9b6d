"""`Domain.policy_breach` and `Domain.names_record`: the evidence the categorizer reads from a domain.

Retail judges a call against its seeded store by the rules of its policy text; the ground truth
breaks none of them, and every write a task forbids breaks one.
"""

from __future__ import annotations

import pytest

from faultline.envs import Action, Task, load_domain
from faultline.envs.retail import Retail


@pytest.fixture(scope="module")
def retail() -> Retail:
    domain = load_domain("retail")
    assert isinstance(domain, Retail)
    return domain


def _task(retail: Retail, task_id: str) -> Task:
    return retail.task(task_id)


def _write(task: Task, tool: str) -> Action:
    return next(a for a in task.actions if a.name == tool)


def _with(action: Action, **changed: object) -> Action:
    return Action(name=action.name, arguments={**action.arguments, **changed})


def test_no_ground_truth_action_of_any_task_breaks_a_rule(retail: Retail) -> None:
    broken = [(t.id, a.name, retail.policy_breach(t, a)) for t in retail.tasks() for a in t.actions]
    assert [b for b in broken if b[2]] == []


def test_every_write_a_task_forbids_breaks_a_rule_the_store_shows(retail: Retail) -> None:
    forbidden = [(t, a) for t in retail.tasks() for a in t.forbidden]
    assert len(forbidden) >= 4
    rules = {retail.policy_breach(t, a) for t, a in forbidden}
    assert "" not in rules
    assert any("30 days" in r for r in rules) and any("pending" in r for r in rules)


def test_an_exchange_for_a_variant_of_another_product_breaks_the_same_product_rule(retail: Retail) -> None:
    task = _task(retail, "exchange-00")
    gold = _write(task, "exchange_delivered_order_items")
    old = retail.index.variants[gold.arguments["item_ids"][0]]
    same = retail.index.alternatives(old)[0]
    other = next(v for v in retail.index.variants.values() if v.product_id != old.product_id and v.available)
    assert retail.policy_breach(task, _with(gold, new_item_ids=[same.item_id])) == ""
    assert "same product" in retail.policy_breach(task, _with(gold, new_item_ids=[other.item_id]))


def test_a_refund_may_go_only_to_the_orders_own_method_or_a_gift_card(retail: Retail) -> None:
    for task in retail.tasks():
        gold = next((a for a in task.actions if a.name == "return_delivered_order_items"), None)
        if gold is None:
            continue
        order = retail.index.orders[gold.arguments["order_id"]]
        methods = retail.index.users[order.user_id].payment_methods
        elsewhere = [m for m in methods if m.source != "gift_card" and m.payment_method_id != order.payment_method_id]
        if elsewhere:
            assert retail.policy_breach(task, _with(gold, payment_method_id=order.payment_method_id)) == ""
            wrong = _with(gold, payment_method_id=elsewhere[0].payment_method_id)
            assert "refund" in retail.policy_breach(task, wrong)
            return
    pytest.fail("no return task whose customer has a card other than the order's")


def test_acting_on_an_order_of_another_customer_breaks_the_own_account_rule(retail: Retail) -> None:
    task = _task(retail, "cancel-00")
    gold = _write(task, "cancel_pending_order")
    owner = retail.index.orders[gold.arguments["order_id"]].user_id
    theirs = next(o for o in retail.index.data.orders if o.user_id != owner and o.status == "pending")
    assert "own account" in retail.policy_breach(task, _with(gold, order_id=theirs.order_id))


def test_cancelling_an_order_whose_items_were_modified_breaks_the_pending_rule(retail: Retail) -> None:
    task = _task(retail, "refuse-modified-cancel-00")
    [forbidden] = task.forbidden
    assert retail.index.orders[forbidden.arguments["order_id"]].status == "pending (items modified)"
    assert "pending" in retail.policy_breach(task, forbidden)


def test_ids_the_store_does_not_know_are_the_tools_to_refuse(retail: Retail) -> None:
    task = _task(retail, "cancel-00")
    gold = _write(task, "cancel_pending_order")
    assert retail.policy_breach(task, _with(gold, order_id="#W-none")) == ""


def test_by_default_a_domain_checks_no_rule() -> None:
    phone = load_domain("phone")
    task = phone.tasks()[0]
    assert all(phone.policy_breach(task, a) == "" for a in task.actions)


def test_a_record_is_named_by_a_one_column_primary_key_of_the_seeded_data(retail: Retail) -> None:
    order = retail.index.data.orders[0]
    assert retail.names_record(order.order_id) and retail.names_record(order.user_id)
    assert retail.names_record(order.items[0].item_id)
    assert not retail.names_record("#W-none") and not retail.names_record("no longer needed")
    assert not retail.names_record(True) and not retail.names_record(["#W0"]) and not retail.names_record(None)
    phone = load_domain("phone")
    assert phone.names_record(3) and phone.names_record("Alice")  # a message id, a contact's name
    assert not phone.names_record(42) and not phone.names_record("Ken")
