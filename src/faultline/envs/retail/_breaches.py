"""The retail policy's rules that one call can break while the tools still accept it.

Each rule is read off the policy text (`_policy.py`) and judged against the seeded store: whose
account a task is about (from its ground truth), which order an id names and its state, which
product an item is a variant of. Rules the tools enforce themselves (a cancel reason, one item
change per order, a gift card's balance) are the tools' to refuse, and are not repeated here.
"""

from __future__ import annotations

from faultline.envs._types import Action, Task
from faultline.envs.retail._data import RETURN_WINDOW_DAYS
from faultline.envs.retail._index import StoreIndex

OWN_ACCOUNT = "act only on the authenticated customer's own account and orders"
CANCEL_PENDING = "only orders in state pending can be cancelled"
SAME_PRODUCT = "an item may only be swapped for another variant of the same product"
RETURN_WINDOW = f"returns and exchanges only within {RETURN_WINDOW_DAYS} days of delivery"
REFUND_TARGET = "a refund goes to the order's own payment method or a gift card of the customer"

_SWAPS = ("modify_pending_order_items", "exchange_delivered_order_items")
_AFTER_DELIVERY = ("return_delivered_order_items", "exchange_delivered_order_items")


def breach(index: StoreIndex, task: Task, action: Action) -> str:
    """The rule `action` breaks in `task`, or ""; ids the store does not know are the tools' to refuse."""
    args = action.arguments
    owner = _owner(index, action)
    if owner and owner != _customer(index, task):  # a task with no customer authenticated nobody
        return OWN_ACCOUNT
    order = index.orders.get(str(args.get("order_id", "")))
    if order is None:
        return ""
    if action.name == "cancel_pending_order" and order.status != "pending":
        return CANCEL_PENDING
    if action.name in _SWAPS and _other_product(index, args.get("item_ids"), args.get("new_item_ids")):
        return SAME_PRODUCT
    if action.name in _AFTER_DELIVERY and order.status == "delivered" and not index.in_return_window(order):
        return RETURN_WINDOW
    if action.name == "return_delivered_order_items":
        target = str(args.get("payment_method_id", ""))
        method = index.methods.get(target)
        gift_card = method is not None and method.source == "gift_card"
        if target != order.payment_method_id and not gift_card:
            return REFUND_TARGET
    return ""


def _owner(index: StoreIndex, action: Action) -> str:
    """The customer whose account or order the call acts on; "" when it names neither."""
    user_id = action.arguments.get("user_id")
    if isinstance(user_id, str) and user_id in index.users:
        return user_id
    order = index.orders.get(str(action.arguments.get("order_id", "")))
    return order.user_id if order else ""


def _customer(index: StoreIndex, task: Task) -> str:
    """The customer a task is about: the first the ground truth finds or acts for; "" for none."""
    for action in task.actions:
        args = action.arguments
        if action.name == "find_user_id_by_email":
            email = str(args.get("email", "")).strip().casefold()
            found = next((u.user_id for u in index.data.users if u.email.casefold() == email), "")
        elif action.name == "find_user_id_by_name_zip":
            name = (str(args.get("first_name", "")).casefold(), str(args.get("last_name", "")).casefold())
            found = next(
                (
                    u.user_id
                    for u in sorted(index.data.users, key=lambda u: u.user_id)
                    if (u.first_name.casefold(), u.last_name.casefold()) == name and u.address.zip == args.get("zip")
                ),
                "",
            )
        else:
            found = _owner(index, action)
        if found:
            return found
    return ""


def _other_product(index: StoreIndex, old: object, new: object) -> bool:
    """Whether some item of `old` is swapped for a variant of another product in `new`."""
    if not isinstance(old, list) or not isinstance(new, list):
        return False
    for old_item, new_item in zip(old, new, strict=False):
        before, after = index.variants.get(str(old_item)), index.variants.get(str(new_item))
        if before is not None and after is not None and before.product_id != after.product_id:
            return True
    return False
