"""`categorize` on hand-written wrong actions against retail's ground truth.

The domain here refuses to list mistakes: every category below is found from evidence (the two
actions, the task, the policy hook and the data), never from the simulator's lists.
"""

from __future__ import annotations

from typing import Any

import pytest

from faultline.envs import EARLY_STOP, POLICY_VIOLATION, WRONG_ENTITY, WRONG_VALUE, Action, Task
from faultline.envs.retail import Retail
from faultline.replay import categorize


class Unlisted(Retail):
    """Retail whose simulator mistake lists cannot be read."""

    def mistake_candidates(self, task: Task, step: int, category: str) -> list[Action]:
        raise AssertionError("categorize read the simulator's mistake lists")


@pytest.fixture(scope="module")
def retail() -> Unlisted:
    return Unlisted()


def _gold(retail: Retail, task_id: str, tool: str, nth: int = 0) -> tuple[Task, dict[str, Any]]:
    task = retail.task(task_id)
    return task, [a.as_dict() for a in task.actions if a.name == tool][nth]


def _with(action: dict[str, Any], **changed: Any) -> dict[str, Any]:
    return {"name": action["name"], "arguments": {**action["arguments"], **changed}}


def test_the_same_request_on_another_order_of_the_customer_is_a_wrong_entity(retail: Unlisted) -> None:
    task, first = _gold(retail, "cancel-two-00", "cancel_pending_order")
    _, second = _gold(retail, "cancel-two-00", "cancel_pending_order", 1)
    wrong = _with(first, order_id=second["arguments"]["order_id"])
    assert categorize(wrong, first, task, retail) == WRONG_ENTITY


def test_another_tool_for_the_same_request_is_a_wrong_entity(retail: Unlisted) -> None:
    task, gold = _gold(retail, "return-00", "return_delivered_order_items")
    items = gold["arguments"]["item_ids"]
    alternatives = [retail.index.alternatives(retail.index.variants[i])[0].item_id for i in items]
    order = retail.index.orders[gold["arguments"]["order_id"]]
    exchange = {
        "name": "exchange_delivered_order_items",
        "arguments": {**gold["arguments"], "new_item_ids": alternatives, "payment_method_id": order.payment_method_id},
    }
    assert categorize(exchange, gold, task, retail) == WRONG_ENTITY


def test_other_values_on_the_right_record_are_wrong_values(retail: Unlisted) -> None:
    task, cancel = _gold(retail, "cancel-two-00", "cancel_pending_order")
    other_reason = "no longer needed" if cancel["arguments"]["reason"] != "no longer needed" else "ordered by mistake"
    assert categorize(_with(cancel, reason=other_reason), cancel, task, retail) == WRONG_VALUE
    task, exchange = _gold(retail, "exchange-00", "exchange_delivered_order_items")
    old, new = exchange["arguments"]["item_ids"][0], exchange["arguments"]["new_item_ids"][0]
    variant = next(v for v in retail.index.alternatives(retail.index.variants[old]) if v.item_id != new)
    assert categorize(_with(exchange, new_item_ids=[variant.item_id]), exchange, task, retail) == WRONG_VALUE
    task, ret = _gold(retail, "return-00", "return_delivered_order_items")
    fewer = ret["arguments"]["item_ids"][1:]
    assert categorize(_with(ret, item_ids=fewer), ret, task, retail) == WRONG_VALUE


def test_a_misread_key_that_names_no_record_is_a_wrong_value(retail: Unlisted) -> None:
    task, cancel = _gold(retail, "cancel-00", "cancel_pending_order")
    assert categorize(_with(cancel, order_id="#W0000000x"), cancel, task, retail) == WRONG_VALUE


def test_what_the_retail_policy_forbids_is_a_policy_violation(retail: Unlisted) -> None:
    task, exchange = _gold(retail, "exchange-00", "exchange_delivered_order_items")
    old = retail.index.variants[exchange["arguments"]["item_ids"][0]]
    foreign = next(v for v in retail.index.variants.values() if v.product_id != old.product_id and v.available)
    assert categorize(_with(exchange, new_item_ids=[foreign.item_id]), exchange, task, retail) == POLICY_VIOLATION
    task, cancel = _gold(retail, "cancel-00", "cancel_pending_order")
    owner = retail.index.orders[cancel["arguments"]["order_id"]].user_id
    theirs = next(o for o in retail.index.data.orders if o.user_id != owner and o.status == "pending")
    # Another order, as a wrong entity is, but of someone else: the policy breach is the finding.
    assert categorize(_with(cancel, order_id=theirs.order_id), cancel, task, retail) == POLICY_VIOLATION


def test_a_write_the_task_forbids_is_a_policy_violation_even_without_a_domain(retail: Unlisted) -> None:
    task = retail.task("refuse-late-return-00")
    [forbidden] = task.forbidden
    final = {"name": "reply", "text": "That order is past the return window.", "done": True}
    assert categorize(forbidden.as_dict(), final, task, None) == POLICY_VIOLATION
    assert categorize(forbidden.as_dict(), final, task, retail) == POLICY_VIOLATION


def test_a_later_write_made_before_the_lookups_first_is_a_policy_violation(retail: Unlisted) -> None:
    task, cancel = _gold(retail, "cancel-00", "cancel_pending_order")
    lookup = task.actions[0].as_dict()
    assert categorize(cancel, lookup, task, retail) == POLICY_VIOLATION


def test_ending_before_the_work_is_done_is_an_early_stop_and_a_wrong_answer_a_wrong_value(retail: Unlisted) -> None:
    task, cancel = _gold(retail, "cancel-00", "cancel_pending_order")
    goodbye = {"name": "reply", "text": "All done, goodbye!", "done": True}
    assert categorize(goodbye, cancel, task, retail) == EARLY_STOP
    final = {"name": "reply", "text": "The total is 120.00.", "done": True}
    assert categorize({**final, "text": "The total is 12.00."}, final, task, retail) == WRONG_VALUE
    assert categorize(goodbye, None, task, retail) == ""


def test_without_a_domain_an_id_argument_picks_the_record(retail: Unlisted) -> None:
    right = {"name": "cancel_pending_order", "arguments": {"order_id": "#W1", "reason": "no longer needed"}}
    assert categorize(_with(right, order_id="#W2"), right, None, None) == WRONG_ENTITY
    assert categorize(_with(right, reason="ordered by mistake"), right, None, None) == WRONG_VALUE
    assert categorize({"name": "modify_user_address", "arguments": {}}, right, None, None) == WRONG_ENTITY


def test_categorize_never_reads_the_simulators_mistake_lists(retail: Unlisted) -> None:
    with pytest.raises(AssertionError, match="mistake lists"):
        retail.mistake_candidates(retail.tasks()[0], 0, WRONG_VALUE)
    seen = set()
    for task in retail.tasks():
        for gold in task.actions:
            for wrong in task.actions:  # every other gold call of the task in this one's place
                if wrong != gold:
                    seen.add(categorize(wrong.as_dict(), gold.as_dict(), task, retail))
    assert seen <= {POLICY_VIOLATION, WRONG_ENTITY, WRONG_VALUE} and len(seen) >= 2
