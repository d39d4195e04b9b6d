"""Plausible wrong retail actions, by FAMA error category, for the simulator to make.

Candidates are drawn from the initial store; `Domain.mistake` keeps those the
tools accept and that change the final state.
"""

from __future__ import annotations

from collections.abc import Callable

from faultline.envs._types import POLICY_VIOLATION, WRONG_ENTITY, WRONG_VALUE, Action, Task
from faultline.envs.retail._index import StoreIndex

_LIMIT = 4


def candidates(index: StoreIndex, task: Task, step: int, category: str) -> list[Action]:
    if step >= len(task.actions):
        return []
    action = task.actions[step]
    build = _BY_TOOL.get(action.name)
    return build(index, action.arguments, category)[:_LIMIT] if build else []


def _act(tool: str, /, **arguments: object) -> Action:
    return Action(name=tool, arguments=arguments)


def _altered_zip(zip_code: str) -> str:
    return zip_code[:-1] + str((int(zip_code[-1]) + 3) % 10) if zip_code[-1:].isdigit() else zip_code + "1"


def _address(args: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in args.items() if k in ("address1", "address2", "city", "state", "country", "zip")}


def _other_orders(index: StoreIndex, order_id: str, *statuses: str) -> list[str]:
    order = index.orders[order_id]
    user = index.users[order.user_id]
    return [o.order_id for o in index.orders_of(user, *statuses) if o.order_id != order_id]


def _cancel(index: StoreIndex, args: dict[str, object], category: str) -> list[Action]:
    order_id, reason = str(args["order_id"]), args["reason"]
    if category == WRONG_VALUE:
        other = "ordered by mistake" if reason == "no longer needed" else "no longer needed"
        return [_act("cancel_pending_order", order_id=order_id, reason=other)]
    if category == WRONG_ENTITY:
        others = _other_orders(index, order_id, "pending", "pending (items modified)")
        return [_act("cancel_pending_order", order_id=o, reason=reason) for o in others]
    return []


def _order_address(index: StoreIndex, args: dict[str, object], category: str) -> list[Action]:
    order_id = str(args["order_id"])
    if category == WRONG_VALUE:
        wrong_zip = {**args, "zip": _altered_zip(str(args["zip"]))}
        return [_act("modify_pending_order_address", **wrong_zip)]
    if category == WRONG_ENTITY:
        user_id = index.orders[order_id].user_id
        others = _other_orders(index, order_id, "pending", "pending (items modified)")
        return [_act("modify_user_address", user_id=user_id, **_address(args))] + [
            _act("modify_pending_order_address", order_id=o, **_address(args)) for o in others
        ]
    return []


def _user_address(index: StoreIndex, args: dict[str, object], category: str) -> list[Action]:
    if category == WRONG_VALUE:
        return [_act("modify_user_address", **{**args, "zip": _altered_zip(str(args["zip"]))})]
    if category == WRONG_ENTITY:
        user = index.users[str(args["user_id"])]
        pending = index.orders_of(user, "pending", "pending (items modified)")
        return [_act("modify_pending_order_address", order_id=o.order_id, **_address(args)) for o in pending]
    return []


def _swap(tool: str, index: StoreIndex, args: dict[str, object], category: str) -> list[Action]:
    """Item swaps (pending modifications and delivered exchanges) go wrong the same ways."""
    order_id = str(args["order_id"])
    old: list[str] = list(args["item_ids"])  # type: ignore[call-overload]
    new: list[str] = list(args["new_item_ids"])  # type: ignore[call-overload]
    if category == WRONG_VALUE:
        variant = index.variants[old[0]]
        wrong = [v.item_id for v in index.alternatives(variant) if v.item_id not in new]
        return [_act(tool, **{**args, "new_item_ids": [w, *new[1:]]}) for w in wrong]
    if category == POLICY_VIOLATION:
        foreign = index.foreign(index.variants[old[0]])
        return [_act(tool, **{**args, "new_item_ids": [f.item_id, *new[1:]]}) for f in foreign[::7]]
    if category == WRONG_ENTITY:
        order = index.orders[order_id]
        if tool == "exchange_delivered_order_items":
            refund_to = order.payment_method_id
            return [_act("return_delivered_order_items", order_id=order_id, item_ids=old, payment_method_id=refund_to)]
        others = [i for i in order.items if i.item_id not in old and index.alternatives(i)]
        return [
            _act(tool, **{**args, "item_ids": [i.item_id], "new_item_ids": [index.alternatives(i)[0].item_id]})
            for i in others
        ]
    return []


def _payment(index: StoreIndex, args: dict[str, object], category: str) -> list[Action]:
    order_id, method = str(args["order_id"]), args["payment_method_id"]
    order = index.orders[order_id]
    if category == WRONG_VALUE:
        user = index.users[order.user_id]
        methods = [m.payment_method_id for m in user.payment_methods]
        return [_act("modify_pending_order_payment", order_id=order_id, payment_method_id=m) for m in methods]
    if category == WRONG_ENTITY:
        others = _other_orders(index, order_id, "pending", "pending (items modified)")
        return [_act("modify_pending_order_payment", order_id=o, payment_method_id=method) for o in others]
    return []


def _return(index: StoreIndex, args: dict[str, object], category: str) -> list[Action]:
    order = index.orders[str(args["order_id"])]
    items: list[str] = list(args["item_ids"])  # type: ignore[call-overload]
    user = index.users[order.user_id]
    if category == POLICY_VIOLATION:
        banned = [
            m.payment_method_id
            for m in user.payment_methods
            if m.payment_method_id != order.payment_method_id and m.source != "gift_card"
        ]
        return [_act("return_delivered_order_items", **{**args, "payment_method_id": m}) for m in banned]
    if category == WRONG_VALUE:
        rest = [i.item_id for i in order.items if i.item_id not in items]
        return [_act("return_delivered_order_items", **{**args, "item_ids": [r, *items[1:]]}) for r in rest]
    if category == WRONG_ENTITY:
        others = [o for o in index.orders_of(user, "delivered") if o.order_id != order.order_id]
        return [
            _act(
                "return_delivered_order_items",
                order_id=o.order_id,
                item_ids=[o.items[0].item_id],
                payment_method_id=o.payment_method_id,
            )
            for o in others
        ]
    return []


_Build = Callable[[StoreIndex, dict[str, object], str], list[Action]]

_BY_TOOL: dict[str, _Build] = {
    "cancel_pending_order": _cancel,
    "modify_pending_order_address": _order_address,
    "modify_user_address": _user_address,
    "modify_pending_order_items": lambda i, a, c: _swap("modify_pending_order_items", i, a, c),
    "exchange_delivered_order_items": lambda i, a, c: _swap("exchange_delivered_order_items", i, a, c),
    "modify_pending_order_payment": _payment,
    "return_delivered_order_items": _return,
}
