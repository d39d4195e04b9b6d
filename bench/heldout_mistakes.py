"""A held-out family of wrong retail actions, each labelled with the FAMA category it was built as.

The simulator draws its mistakes from lists of its own (the retail domain's and the ones derived
from tool schemas); a categorizer checked against those lists agrees with them by construction.
This family is written apart from them, from the category definitions and the retail policy
alone: it reads the store only through the domain's tools and database on a fresh copy, and it
lives in bench/, which is not part of the installed package, so neither
`faultline.replay.categorize`, its tests nor the sim judge can import it.

For each ground-truth write of a task, each rule below makes wrong actions in place of it:

- wrong entity: the same request on another order of the same customer whose state allows it
  (`other-order`); the request read as another one, a different tool on the same order or
  address (`other-tool`);
- wrong value: the same tool on the same record with another value of an argument that does not
  name the record: the other cancel reason, the address the record has now or a zip code with
  two digits swapped, another variant of the same product, another payment method of the
  customer, other items of the order, the other refund target the policy allows;
- policy violation: what the policy forbids and the tools still accept: a variant of another
  product, a refund to a card that is neither the order's nor a gift card, the request on an
  order or account of another customer, a return or exchange after the window, cancelling an
  order whose items were modified;
- early stop: ending the conversation in place of the write.

A wrong action is kept when the tool accepts it after the ground truth before it and the task
still ends in another state when the ground truth carries on after it (`Domain.is_decisive`).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterator
from datetime import date
from typing import Any

import msgspec

from faultline.envs import EARLY_STOP, POLICY_VIOLATION, WRONG_ENTITY, WRONG_VALUE, Action, Domain, Task

PER_RULE = 2
"""At most this many wrong actions per rule at one step, the first ones in a fixed order."""

CANCEL_REASONS = ("no longer needed", "ordered by mistake")
"""The two reasons the policy allows for a cancellation."""

GOODBYE = {"name": "reply", "text": "Your request is taken care of. Have a nice day!", "done": True}


class Mistake(msgspec.Struct, frozen=True, kw_only=True):
    """One wrong action in place of ground-truth step `step` of `task`, and how it was made."""

    task: str
    step: int
    category: str
    rule: str
    wrong: dict[str, Any]
    right: dict[str, Any]


class Store:
    """The store as the tools show it, on one database that the caller owns."""

    def __init__(self, domain: Domain, db: sqlite3.Connection) -> None:
        self.domain, self.db = domain, db
        today = re.search(r"Today is (\d{4}-\d{2}-\d{2})", domain.policy)
        window = re.search(r"within (\d+) days", domain.policy)
        if today is None or window is None:
            raise ValueError("the retail policy no longer states today's date and the return window")
        self.today, self.window = date.fromisoformat(today[1]), int(window[1])

    def read(self, tool: str, **arguments: Any) -> Any:
        outcome = self.domain.call(self.db, Action(name=tool, arguments=arguments))
        if outcome.error:
            raise LookupError(outcome.error)
        return outcome.output

    def order(self, order_id: str) -> dict[str, Any]:
        return dict(self.read("get_order_details", order_id=order_id))

    def user(self, user_id: str) -> dict[str, Any]:
        return dict(self.read("get_user_details", user_id=user_id))

    def variants(self, product_id: str) -> dict[str, Any]:
        return dict(self.read("get_product_details", product_id=product_id)["variants"])

    def products(self) -> list[str]:
        return sorted(self.read("list_all_product_types").values())

    def orders_of(self, user_id: str) -> list[dict[str, Any]]:
        return [self.order(o) for o in self.user(user_id)["orders"]]

    def orders_of_others(self, user_id: str, status: str) -> list[str]:
        """Orders of other customers in `status`; no tool lists them, so the database is asked."""
        rows = self.db.execute(
            "SELECT order_id FROM orders WHERE user_id != ? AND status = ? ORDER BY order_id LIMIT ?",
            (user_id, status, PER_RULE),
        )
        return [order_id for (order_id,) in rows]

    def in_window(self, order: dict[str, Any]) -> bool:
        if order["status"] != "delivered" or "delivered_on" not in order:
            return False
        return (self.today - date.fromisoformat(order["delivered_on"])).days <= self.window

    def same_product(self, order: dict[str, Any], item_id: str, *, besides: tuple[str, ...] = ()) -> list[str]:
        """Available variants of the product of item `item_id` in `order`, other than it and `besides`."""
        product = next(i["product_id"] for i in order["items"] if i["item_id"] == item_id)
        return [
            v for v, about in self.variants(product).items() if about["available"] and v != item_id and v not in besides
        ]


Rule = Callable[[Store, dict[str, Any]], Iterator[Action]]
"""Wrong actions in place of a ground-truth call with these arguments, read from the store."""


def _act(tool: str, **arguments: Any) -> Action:
    return Action(name=tool, arguments=arguments)


def _customer(store: Store, arguments: dict[str, Any]) -> str:
    if "user_id" in arguments:
        return str(arguments["user_id"])
    return str(store.order(str(arguments["order_id"]))["user_id"])


_ADDRESS = ("address1", "address2", "city", "state", "country", "zip")


def _address(arguments: dict[str, Any]) -> dict[str, Any]:
    return {k: arguments[k] for k in _ADDRESS}


def _swap_zip(zip_code: str) -> str:
    """The zip code with its last two digits the other way round (a misread), or itself."""
    return zip_code[:-2] + zip_code[-1] + zip_code[-2] if len(zip_code) >= 2 else zip_code


# -- what a request needs of an order, by the policy ---------------------------------------------


def _allows(store: Store, tool: str, order: dict[str, Any]) -> bool:
    """Whether the policy allows `tool` on `order` in its state."""
    status = order["status"]
    if tool in ("cancel_pending_order", "modify_pending_order_items"):
        return bool(status == "pending")
    if tool in ("modify_pending_order_address", "modify_pending_order_payment"):
        return bool(status in ("pending", "pending (items modified)"))
    return store.in_window(order)


def _swaps(store: Store, order: dict[str, Any], count: int) -> tuple[list[str], list[str]]:
    """Up to `count` items of `order` and, for each, another variant of the same product."""
    old: list[str] = []
    new: list[str] = []
    for item in order["items"]:
        others = store.same_product(order, item["item_id"])
        if others and item["item_id"] not in old and len(old) < count:
            old.append(item["item_id"])
            new.append(others[0])
    return old, new


def _on_order(store: Store, tool: str, args: dict[str, Any], order: dict[str, Any]) -> Action | None:
    """The request of `tool` with `args`, made on `order` instead: same reason, address or payer."""
    order_id = order["order_id"]
    if tool == "cancel_pending_order":
        return _act(tool, order_id=order_id, reason=args["reason"])
    if tool == "modify_pending_order_address":
        return _act(tool, order_id=order_id, **_address(args))
    if tool == "modify_pending_order_payment":
        return _act(tool, order_id=order_id, payment_method_id=args["payment_method_id"])
    if tool in ("modify_pending_order_items", "exchange_delivered_order_items"):
        old, new = _swaps(store, order, len(args["item_ids"]))
        if not old:
            return None
        return _act(
            tool, order_id=order_id, item_ids=old, new_item_ids=new, payment_method_id=args["payment_method_id"]
        )
    if tool == "return_delivered_order_items":
        items = [i["item_id"] for i in order["items"]][: len(args["item_ids"])]
        return _act(tool, order_id=order_id, item_ids=items, payment_method_id=order["payment_method_id"])
    return None


# -- wrong entity ------------------------------------------------------------------------------


def _other_order(tool: str) -> Rule:
    def rule(store: Store, args: dict[str, Any]) -> Iterator[Action]:
        for order in store.orders_of(_customer(store, args)):
            if order["order_id"] != args["order_id"] and _allows(store, tool, order):
                made = _on_order(store, tool, args, order)
                if made is not None:
                    yield made

    return rule


def _other_tool(tool: str) -> Rule:
    def rule(store: Store, args: dict[str, Any]) -> Iterator[Action]:
        if tool == "return_delivered_order_items":
            order = store.order(args["order_id"])
            pairs = [(i, store.same_product(order, i)) for i in args["item_ids"]]
            if all(others for _, others in pairs):
                yield _act(
                    "exchange_delivered_order_items",
                    order_id=args["order_id"],
                    item_ids=[i for i, _ in pairs],
                    new_item_ids=[others[0] for _, others in pairs],
                    payment_method_id=order["payment_method_id"],
                )
        elif tool == "exchange_delivered_order_items":
            refund_to = store.order(args["order_id"])["payment_method_id"]
            yield _act("return_delivered_order_items", order_id=args["order_id"], item_ids=args["item_ids"],
                       payment_method_id=refund_to)  # fmt: skip
        elif tool == "modify_pending_order_address":
            yield _act("modify_user_address", user_id=_customer(store, args), **_address(args))
        elif tool == "modify_user_address":
            for order in store.orders_of(args["user_id"]):
                if _allows(store, "modify_pending_order_address", order):
                    yield _act("modify_pending_order_address", order_id=order["order_id"], **_address(args))
        elif tool == "modify_pending_order_items":
            yield _act("cancel_pending_order", order_id=args["order_id"], reason="no longer needed")

    return rule


# -- wrong value -------------------------------------------------------------------------------


def _other_reason(store: Store, args: dict[str, Any]) -> Iterator[Action]:
    for reason in CANCEL_REASONS:
        if reason != args["reason"]:
            yield _act("cancel_pending_order", order_id=args["order_id"], reason=reason)


def _address_now(tool: str) -> Rule:
    """The address the record has now, read from the tool output, set again; and a misread zip."""

    def rule(store: Store, args: dict[str, Any]) -> Iterator[Action]:
        key = "order_id" if "order_id" in args else "user_id"
        record = store.order(args[key]) if key == "order_id" else store.user(args[key])
        yield _act(tool, **{key: args[key]}, **_address(record["address"]))
        yield _act(tool, **{**args, "zip": _swap_zip(str(args["zip"]))})

    return rule


def _other_variant(tool: str) -> Rule:
    def rule(store: Store, args: dict[str, Any]) -> Iterator[Action]:
        order = store.order(args["order_id"])
        old, new = args["item_ids"][0], args["new_item_ids"][0]
        for variant in store.same_product(order, old, besides=(new,)):
            yield _act(tool, **{**args, "new_item_ids": [variant, *args["new_item_ids"][1:]]})

    return rule


def _other_method(tool: str) -> Rule:
    """Another payment method of the customer than the ground truth's (and, to pay with, than the order's)."""

    def rule(store: Store, args: dict[str, Any]) -> Iterator[Action]:
        user = store.user(_customer(store, args))
        current = store.order(args["order_id"])["payment_method_id"]
        for method in user["payment_methods"]:
            chosen = method["payment_method_id"]
            if chosen != args["payment_method_id"] and (tool != "modify_pending_order_payment" or chosen != current):
                yield _act(tool, **{**args, "payment_method_id": chosen})

    return rule


def _other_items(store: Store, args: dict[str, Any]) -> Iterator[Action]:
    order = store.order(args["order_id"])
    items = [i["item_id"] for i in order["items"]]
    chosen = list(args["item_ids"])
    rest = [i for i in items if i not in chosen]
    if rest:
        yield _act("return_delivered_order_items", **{**args, "item_ids": [rest[0], *chosen[1:]]})
        yield _act("return_delivered_order_items", **{**args, "item_ids": [*chosen, rest[0]]})
    elif len(chosen) > 1:
        yield _act("return_delivered_order_items", **{**args, "item_ids": chosen[:-1]})


def _other_refund_target(store: Store, args: dict[str, Any]) -> Iterator[Action]:
    """The other target the policy allows: a gift card of the customer, or the order's own method."""
    own = store.order(args["order_id"])["payment_method_id"]
    allowed = [own] + [
        m["payment_method_id"]
        for m in store.user(_customer(store, args))["payment_methods"]
        if m["source"] == "gift_card"
    ]
    for target in allowed:
        if target != args["payment_method_id"]:
            yield _act("return_delivered_order_items", **{**args, "payment_method_id": target})


# -- policy violation --------------------------------------------------------------------------


def _foreign_variant(tool: str) -> Rule:
    def rule(store: Store, args: dict[str, Any]) -> Iterator[Action]:
        order = store.order(args["order_id"])
        product = next(i["product_id"] for i in order["items"] if i["item_id"] == args["item_ids"][0])
        for other in store.products():
            if other != product:
                available = [v for v, about in store.variants(other).items() if about["available"]]
                if available:
                    yield _act(tool, **{**args, "new_item_ids": [available[0], *args["new_item_ids"][1:]]})

    return rule


def _refund_elsewhere(store: Store, args: dict[str, Any]) -> Iterator[Action]:
    own = store.order(args["order_id"])["payment_method_id"]
    for method in store.user(_customer(store, args))["payment_methods"]:
        if method["source"] != "gift_card" and method["payment_method_id"] != own:
            yield _act("return_delivered_order_items", **{**args, "payment_method_id": method["payment_method_id"]})


def _other_customer(tool: str) -> Rule:
    """The same request on an order, or the account, of someone else (the policy allows only the caller's own)."""

    def rule(store: Store, args: dict[str, Any]) -> Iterator[Action]:
        customer = _customer(store, args)
        if tool == "modify_user_address":
            for order_id in store.orders_of_others(customer, "pending"):
                yield _act(tool, user_id=store.order(order_id)["user_id"], **_address(args))
            return
        status = "delivered" if tool.endswith("delivered_order_items") else "pending"
        for order_id in store.orders_of_others(customer, status):
            made = _on_order(store, tool, args, store.order(order_id))
            if made is not None:
                yield made

    return rule


def _late(tool: str) -> Rule:
    def rule(store: Store, args: dict[str, Any]) -> Iterator[Action]:
        for order in store.orders_of(_customer(store, args)):
            if order["status"] == "delivered" and not store.in_window(order):
                made = _on_order(store, tool, args, order)
                if made is not None:
                    yield made

    return rule


def _cancel_modified(store: Store, args: dict[str, Any]) -> Iterator[Action]:
    for order in store.orders_of(_customer(store, args)):
        if order["status"] == "pending (items modified)":
            yield _act("cancel_pending_order", order_id=order["order_id"], reason=args["reason"])


# -- the family --------------------------------------------------------------------------------

_SWAPS = ("modify_pending_order_items", "exchange_delivered_order_items")

RULES: dict[str, list[tuple[str, str, Rule]]] = {
    "cancel_pending_order": [
        (WRONG_ENTITY, "other-order", _other_order("cancel_pending_order")),
        (WRONG_VALUE, "other-reason", _other_reason),
        (POLICY_VIOLATION, "other-customer", _other_customer("cancel_pending_order")),
        (POLICY_VIOLATION, "cancel-modified", _cancel_modified),
    ],
    "modify_pending_order_address": [
        (WRONG_ENTITY, "other-order", _other_order("modify_pending_order_address")),
        (WRONG_ENTITY, "other-tool", _other_tool("modify_pending_order_address")),
        (WRONG_VALUE, "address-now", _address_now("modify_pending_order_address")),
        (POLICY_VIOLATION, "other-customer", _other_customer("modify_pending_order_address")),
    ],
    "modify_user_address": [
        (WRONG_ENTITY, "other-tool", _other_tool("modify_user_address")),
        (WRONG_VALUE, "address-now", _address_now("modify_user_address")),
        (POLICY_VIOLATION, "other-customer", _other_customer("modify_user_address")),
    ],
    "modify_pending_order_payment": [
        (WRONG_ENTITY, "other-order", _other_order("modify_pending_order_payment")),
        (WRONG_VALUE, "other-method", _other_method("modify_pending_order_payment")),
    ],
    "return_delivered_order_items": [
        (WRONG_ENTITY, "other-order", _other_order("return_delivered_order_items")),
        (WRONG_ENTITY, "other-tool", _other_tool("return_delivered_order_items")),
        (WRONG_VALUE, "other-items", _other_items),
        (WRONG_VALUE, "other-refund-target", _other_refund_target),
        (POLICY_VIOLATION, "refund-elsewhere", _refund_elsewhere),
        (POLICY_VIOLATION, "other-customer", _other_customer("return_delivered_order_items")),
        (POLICY_VIOLATION, "late", _late("return_delivered_order_items")),
    ],
    **{
        tool: [
            (WRONG_ENTITY, "other-order", _other_order(tool)),
            (WRONG_ENTITY, "other-tool", _other_tool(tool)),
            (WRONG_VALUE, "other-variant", _other_variant(tool)),
            (WRONG_VALUE, "other-method", _other_method(tool)),
            (POLICY_VIOLATION, "foreign-variant", _foreign_variant(tool)),
        ]
        + ([(POLICY_VIOLATION, "late", _late(tool))] if tool == "exchange_delivered_order_items" else [])
        for tool in _SWAPS
    },
}
"""Per ground-truth write tool: the category, the rule's name and the rule."""


def mistakes(domain: Domain, tasks: list[Task]) -> list[Mistake]:
    """The held-out family for `tasks` of the retail `domain`, in task, step and rule order."""
    made: list[Mistake] = []
    for task in tasks:
        for step, right in enumerate(task.actions):
            rules = RULES.get(right.name)
            if rules is None:
                continue
            made.append(Mistake(task=task.id, step=step, category=EARLY_STOP, rule="goodbye", wrong=GOODBYE,
                                right=right.as_dict()))  # fmt: skip
            db = domain.open_database()
            try:
                for action in task.actions[:step]:
                    domain.call(db, action)
                store = Store(domain, db)
                for category, name, rule in rules:
                    kept: list[Action] = []
                    for wrong in rule(store, dict(right.arguments)):
                        if len(kept) == PER_RULE:
                            break
                        if wrong != right and wrong not in kept and domain.is_decisive(task, step, wrong):
                            kept.append(wrong)
                    made.extend(
                        Mistake(
                            task=task.id,
                            step=step,
                            category=category,
                            rule=name,
                            wrong=w.as_dict(),
                            right=right.as_dict(),
                        )  # fmt: skip
                        for w in kept
                    )
            finally:
                db.close()
    return made
