"""The retail domain: an online store's users, products and orders behind fourteen tools."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Hashable
from functools import cached_property
from typing import Any

from faultline._errors import ToolError
from faultline.envs._domain import Domain, tool
from faultline.envs._types import Action, Task
from faultline.envs.retail import _breaches, _mistakes, _tasks
from faultline.envs.retail._data import generate, write
from faultline.envs.retail._index import StoreIndex
from faultline.envs.retail._policy import POLICY

CANCEL_REASONS = ("no longer needed", "ordered by mistake")

_ADDRESS_FIELDS = ("address1", "address2", "city", "state", "country", "zip")
_ADDRESS_ARGS: dict[str, Any] = {  # Any: spread into @tool's keywords, which are not all fields
    "address1": ("string", "Street and number, such as '200 Cedar Lane'."),
    "address2": ("string", "Suite or apartment, such as 'Apt 12'; empty if none."),
    "city": ("string", "City."),
    "state": ("string", "Two-letter state code, such as 'TX'."),
    "country": ("string", "Country, such as 'USA'."),
    "zip": ("string", "Five-digit zip code."),
}
_ORDER = ("string", "The order id, starting with '#W', such as '#W0123456'.")
_USER = ("string", "The user id, such as 'olivia_smith_1234'.")
_METHOD = ("string", "A payment method id of the customer, such as 'credit_card_0123456'.")
_ITEMS = ("string[]", "Item ids of items in the order, such as ['1008292230'].")
_NEW_ITEMS = ("string[]", "The item id replacing each item at the same position.")


class Retail(Domain):
    """A store with hundreds of users, dozens of products and about a thousand orders."""

    name = "retail"
    policy = POLICY

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    @property
    def data_key(self) -> Hashable:
        return self.seed

    @cached_property
    def index(self) -> StoreIndex:
        """The seeded store (initial state) by id."""
        return StoreIndex(generate(self.seed))

    def seed_database(self, db: sqlite3.Connection) -> None:
        write(db, self.index.data)

    def tasks(self) -> list[Task]:
        return list(self._task_list)

    @cached_property
    def _task_list(self) -> list[Task]:
        return _tasks.generate_tasks(self.index, self.seed)

    def mistake_candidates(self, task: Task, step: int, category: str) -> list[Action]:
        return _mistakes.candidates(self.index, task, step, category)

    def policy_breach(self, task: Task, action: Action) -> str:
        """Judged against the seeded store by the rules of `_breaches`, read off the policy."""
        return _breaches.breach(self.index, task, action)

    # -- reads ------------------------------------------------------------------------------

    @tool("Find a user id by email address.", email=("string", "The email address."))
    def find_user_id_by_email(self, db: sqlite3.Connection, email: str) -> str:
        row = db.execute("SELECT user_id FROM users WHERE lower(email) = lower(?)", (email.strip(),)).fetchone()
        if row is None:
            raise ToolError(f"no user with email {email!r}")
        return str(row[0])

    @tool(
        "Find a user id by first name, last name and zip code.",
        first_name=("string", "First name, such as 'Olivia'."),
        last_name=("string", "Last name, such as 'Smith'."),
        zip=("string", "Five-digit zip code of the user's address."),
    )
    def find_user_id_by_name_zip(self, db: sqlite3.Connection, first_name: str, last_name: str, zip: str) -> str:
        row = db.execute(
            "SELECT user_id FROM users WHERE lower(first_name) = lower(?) AND lower(last_name) = lower(?)"
            " AND zip = ? ORDER BY user_id",
            (first_name.strip(), last_name.strip(), zip.strip()),
        ).fetchone()
        if row is None:
            raise ToolError(f"no user named {first_name} {last_name} with zip code {zip}")
        return str(row[0])

    @tool("Get a user's name, email, default address, payment methods and order ids.", user_id=_USER)
    def get_user_details(self, db: sqlite3.Connection, user_id: str) -> dict[str, Any]:
        row = db.execute(
            f"SELECT first_name, last_name, email, {', '.join(_ADDRESS_FIELDS)} FROM users WHERE user_id = ?",
            (user_id,),
        ).fetchone()
        if row is None:
            raise ToolError(f"user {user_id!r} not found")
        methods = []
        for method_id, source, brand, last_four, balance in db.execute(
            "SELECT payment_method_id, source, brand, last_four, balance FROM payment_methods"
            " WHERE user_id = ? ORDER BY payment_method_id",
            (user_id,),
        ):
            method: dict[str, Any] = {"payment_method_id": method_id, "source": source}
            if source == "credit_card":
                method |= {"brand": brand, "last_four": last_four}
            if source == "gift_card":
                method["balance"] = balance
            methods.append(method)
        orders = db.execute("SELECT order_id FROM orders WHERE user_id = ? ORDER BY placed_on, order_id", (user_id,))
        return {
            "user_id": user_id,
            "name": {"first_name": row[0], "last_name": row[1]},
            "email": row[2],
            "address": dict(zip(_ADDRESS_FIELDS, row[3:], strict=True)),
            "payment_methods": methods,
            "orders": [order_id for (order_id,) in orders],
        }

    @tool("Get an order's status, items, address, payments and dates.", order_id=_ORDER)
    def get_order_details(self, db: sqlite3.Connection, order_id: str) -> dict[str, Any]:
        row = _order(db, order_id)
        items = [
            {"item_id": i, "product_id": p, "name": n, "options": json.loads(o), "price": price}
            for i, p, n, o, price in db.execute(
                "SELECT item_id, product_id, name, options, price FROM order_items"
                " WHERE order_id = ? ORDER BY position",
                (order_id,),
            )
        ]
        details: dict[str, Any] = {
            "order_id": order_id,
            "user_id": row["user_id"],
            "status": row["status"],
            "address": {field: row[field] for field in _ADDRESS_FIELDS},
            "items": items,
            "total": round(sum(item["price"] for item in items), 2),
            "payment_method_id": row["payment_method_id"],
            "payments": [
                {"kind": k, "payment_method_id": m, "amount": a}
                for k, m, a in db.execute(
                    "SELECT kind, payment_method_id, amount FROM payments WHERE order_id = ? ORDER BY position",
                    (order_id,),
                )
            ],
            "placed_on": row["placed_on"],
        }
        if row["delivered_on"]:
            details["delivered_on"] = row["delivered_on"]
        if row["cancel_reason"]:
            details["cancel_reason"] = row["cancel_reason"]
        requests = db.execute(
            "SELECT kind, item_id, new_item_id, payment_method_id FROM requests WHERE order_id = ? ORDER BY rowid",
            (order_id,),
        ).fetchall()
        if requests:
            details["requests"] = [
                {"kind": k, "item_id": i, "new_item_id": n, "payment_method_id": m} for k, i, n, m in requests
            ]
        return details

    @tool("Get a product's name and every variant with its options, price and availability.",
          product_id=("string", "The product id, such as '6086499569'."))  # fmt: skip
    def get_product_details(self, db: sqlite3.Connection, product_id: str) -> dict[str, Any]:
        row = db.execute("SELECT name FROM products WHERE product_id = ?", (product_id,)).fetchone()
        if row is None:
            raise ToolError(f"product {product_id!r} not found")
        variants = {
            item_id: {"options": json.loads(options), "price": price, "available": bool(available)}
            for item_id, options, price, available in db.execute(
                "SELECT item_id, options, price, available FROM variants WHERE product_id = ? ORDER BY item_id",
                (product_id,),
            )
        }
        return {"product_id": product_id, "name": row[0], "variants": variants}

    @tool("List every product type in the store with its product id.")
    def list_all_product_types(self, db: sqlite3.Connection) -> dict[str, str]:
        return {name: pid for name, pid in db.execute("SELECT name, product_id FROM products ORDER BY name")}

    # -- writes -----------------------------------------------------------------------------

    @tool(
        "Cancel a pending order. The refund goes to the order's payment method.",
        writes=True,
        order_id=_ORDER,
        reason=("string", "Either 'no longer needed' or 'ordered by mistake'."),
    )
    def cancel_pending_order(self, db: sqlite3.Connection, order_id: str, reason: str) -> dict[str, Any]:
        row = _order(db, order_id)
        if not row["status"].startswith("pending"):
            raise ToolError(f"order {order_id} is {row['status']}; only pending orders can be cancelled")
        if reason not in CANCEL_REASONS:
            raise ToolError(f"reason must be one of {list(CANCEL_REASONS)}, got {reason!r}")
        paid = db.execute(
            "SELECT coalesce(sum(CASE kind WHEN 'payment' THEN amount ELSE -amount END), 0)"
            " FROM payments WHERE order_id = ?",
            (order_id,),
        ).fetchone()[0]
        _move_money(db, order_id, "refund", row["payment_method_id"], round(paid, 2))
        db.execute("UPDATE orders SET status = 'cancelled', cancel_reason = ? WHERE order_id = ?", (reason, order_id))
        return self.get_order_details(db, order_id)

    @tool("Change the shipping address of a pending order.", writes=True, order_id=_ORDER, **_ADDRESS_ARGS)
    def modify_pending_order_address(self, db: sqlite3.Connection, order_id: str, **address: str) -> dict[str, Any]:
        row = _order(db, order_id)
        if not row["status"].startswith("pending"):
            raise ToolError(f"order {order_id} is {row['status']}; only pending orders can change address")
        _set_address(db, "orders", "order_id", order_id, address)
        return self.get_order_details(db, order_id)

    @tool(
        "Swap items of a pending order for other variants; possible once per order.",
        writes=True,
        order_id=_ORDER,
        item_ids=_ITEMS,
        new_item_ids=_NEW_ITEMS,
        payment_method_id=("string", "Payment method id that pays or receives the price difference."),
    )
    def modify_pending_order_items(
        self,
        db: sqlite3.Connection,
        order_id: str,
        item_ids: list[str],
        new_item_ids: list[str],
        payment_method_id: str,
    ) -> dict[str, Any]:
        row = _order(db, order_id)
        if row["status"] != "pending":
            raise ToolError(f"order {order_id} is {row['status']}; items can be modified once, in state pending")
        positions, difference = _swap_prices(db, order_id, item_ids, new_item_ids)
        _check_method(db, row["user_id"], payment_method_id, charge=difference)
        for position, new_item in zip(positions, new_item_ids, strict=True):
            product_id, name, options, price, _ = _variant(db, new_item)
            db.execute(
                "UPDATE order_items SET item_id = ?, product_id = ?, name = ?, options = ?, price = ?"
                " WHERE order_id = ? AND position = ?",
                (new_item, product_id, name, options, price, order_id, position),
            )
        if difference:
            kind = "payment" if difference > 0 else "refund"
            _move_money(db, order_id, kind, payment_method_id, abs(difference))
        db.execute("UPDATE orders SET status = 'pending (items modified)' WHERE order_id = ?", (order_id,))
        return self.get_order_details(db, order_id)

    @tool(
        "Pay a pending order with another payment method of the customer.",
        writes=True,
        order_id=_ORDER,
        payment_method_id=_METHOD,
    )
    def modify_pending_order_payment(
        self, db: sqlite3.Connection, order_id: str, payment_method_id: str
    ) -> dict[str, Any]:
        row = _order(db, order_id)
        if not row["status"].startswith("pending"):
            raise ToolError(f"order {order_id} is {row['status']}; only pending orders can change payment")
        if payment_method_id == row["payment_method_id"]:
            raise ToolError(f"order {order_id} is already paid with {payment_method_id}")
        total = db.execute("SELECT round(sum(price), 2) FROM order_items WHERE order_id = ?", (order_id,)).fetchone()[0]
        _check_method(db, row["user_id"], payment_method_id, charge=total)
        _move_money(db, order_id, "payment", payment_method_id, total)
        _move_money(db, order_id, "refund", row["payment_method_id"], total)
        db.execute("UPDATE orders SET payment_method_id = ? WHERE order_id = ?", (payment_method_id, order_id))
        return self.get_order_details(db, order_id)

    @tool("Change the default address of a user.", writes=True, user_id=_USER, **_ADDRESS_ARGS)
    def modify_user_address(self, db: sqlite3.Connection, user_id: str, **address: str) -> dict[str, Any]:
        if db.execute("SELECT 1 FROM users WHERE user_id = ?", (user_id,)).fetchone() is None:
            raise ToolError(f"user {user_id!r} not found")
        _set_address(db, "users", "user_id", user_id, address)
        return self.get_user_details(db, user_id)

    @tool(
        "Request the return of items of a delivered order.",
        writes=True,
        order_id=_ORDER,
        item_ids=_ITEMS,
        payment_method_id=("string", "Payment method id that receives the refund."),
    )
    def return_delivered_order_items(
        self, db: sqlite3.Connection, order_id: str, item_ids: list[str], payment_method_id: str
    ) -> dict[str, Any]:
        row = _order(db, order_id)
        if row["status"] != "delivered":
            raise ToolError(f"order {order_id} is {row['status']}; only delivered orders can be returned")
        _positions(db, order_id, item_ids)
        _check_method(db, row["user_id"], payment_method_id, charge=0)
        db.executemany(
            "INSERT INTO requests VALUES (?, 'return', ?, NULL, ?)",
            [(order_id, item, payment_method_id) for item in item_ids],
        )
        db.execute("UPDATE orders SET status = 'return requested' WHERE order_id = ?", (order_id,))
        return self.get_order_details(db, order_id)

    @tool(
        "Request the exchange of items of a delivered order for other variants.",
        writes=True,
        order_id=_ORDER,
        item_ids=_ITEMS,
        new_item_ids=_NEW_ITEMS,
        payment_method_id=("string", "Payment method id that pays or receives the price difference."),
    )
    def exchange_delivered_order_items(
        self,
        db: sqlite3.Connection,
        order_id: str,
        item_ids: list[str],
        new_item_ids: list[str],
        payment_method_id: str,
    ) -> dict[str, Any]:
        row = _order(db, order_id)
        if row["status"] != "delivered":
            raise ToolError(f"order {order_id} is {row['status']}; only delivered orders can be exchanged")
        _, difference = _swap_prices(db, order_id, item_ids, new_item_ids)
        _check_method(db, row["user_id"], payment_method_id, charge=difference)
        db.executemany(
            "INSERT INTO requests VALUES (?, 'exchange', ?, ?, ?)",
            [(order_id, old, new, payment_method_id) for old, new in zip(item_ids, new_item_ids, strict=True)],
        )
        db.execute("UPDATE orders SET status = 'exchange requested' WHERE order_id = ?", (order_id,))
        return self.get_order_details(db, order_id)

    @tool("Hand the customer over to a human agent, with a summary of the issue.",
          summary=("string", "What the customer needs and why the tools cannot do it."))  # fmt: skip
    def transfer_to_human_agents(self, db: sqlite3.Connection, summary: str) -> str:
        return "Transfer successful"


_ORDER_COLUMNS = (
    "user_id", "status", *_ADDRESS_FIELDS, "payment_method_id", "placed_on", "delivered_on", "cancel_reason",
)  # fmt: skip


def _order(db: sqlite3.Connection, order_id: str) -> dict[str, Any]:
    row = db.execute(f"SELECT {', '.join(_ORDER_COLUMNS)} FROM orders WHERE order_id = ?", (order_id,)).fetchone()
    if row is None:
        raise ToolError(f"order {order_id!r} not found")
    return dict(zip(_ORDER_COLUMNS, row, strict=True))


def _variant(db: sqlite3.Connection, item_id: str) -> tuple[str, str, str, float, bool]:
    row = db.execute(
        "SELECT v.product_id, p.name, v.options, v.price, v.available FROM variants v"
        " JOIN products p USING (product_id) WHERE v.item_id = ?",
        (item_id,),
    ).fetchone()
    if row is None:
        raise ToolError(f"item {item_id!r} not found")
    return row[0], row[1], row[2], row[3], bool(row[4])


def _positions(db: sqlite3.Connection, order_id: str, item_ids: list[str]) -> list[int]:
    """The order positions holding `item_ids`, each position used once."""
    free = db.execute(
        "SELECT position, item_id FROM order_items WHERE order_id = ? ORDER BY position", (order_id,)
    ).fetchall()
    positions = []
    for item_id in item_ids:
        match = next((p for p, i in free if i == item_id and p not in positions), None)
        if match is None:
            raise ToolError(f"item {item_id!r} is not in order {order_id} (or is listed twice)")
        positions.append(match)
    return positions


def _swap_prices(db: sqlite3.Connection, order_id: str, old: list[str], new: list[str]) -> tuple[list[int], float]:
    """Check a swap of `old` items for `new` ones; return the positions and the price difference."""
    if len(old) != len(new):
        raise ToolError(f"item_ids has {len(old)} item(s) but new_item_ids has {len(new)}")
    positions = _positions(db, order_id, old)
    difference = 0.0
    for old_item, new_item in zip(old, new, strict=True):
        if old_item == new_item:
            raise ToolError(f"new item {new_item} is the same as the old one")
        *_, price, available = _variant(db, new_item)
        if not available:
            raise ToolError(f"item {new_item} is not available")
        difference += price - _variant(db, old_item)[3]
    return positions, round(difference, 2)


def _check_method(db: sqlite3.Connection, user_id: str, method_id: str, *, charge: float) -> None:
    row = db.execute(
        "SELECT source, balance FROM payment_methods WHERE payment_method_id = ? AND user_id = ?", (method_id, user_id)
    ).fetchone()
    if row is None:
        raise ToolError(f"payment method {method_id!r} not found for user {user_id}")
    if row[0] == "gift_card" and charge > 0 and row[1] < charge:
        raise ToolError(f"gift card {method_id} has a balance of {row[1]:.2f}, less than {charge:.2f}")


def _move_money(db: sqlite3.Connection, order_id: str, kind: str, method_id: str, amount: float) -> None:
    position = db.execute(
        "SELECT coalesce(max(position), -1) + 1 FROM payments WHERE order_id = ?", (order_id,)
    ).fetchone()[0]
    db.execute("INSERT INTO payments VALUES (?, ?, ?, ?, ?)", (order_id, position, kind, method_id, round(amount, 2)))
    sign = -1 if kind == "payment" else 1
    db.execute(
        "UPDATE payment_methods SET balance = round(balance + ?, 2)"
        " WHERE payment_method_id = ? AND source = 'gift_card'",
        (sign * amount, method_id),
    )


def _set_address(db: sqlite3.Connection, table: str, key: str, value: str, address: dict[str, str]) -> None:
    assignments = ", ".join(f"{field} = ?" for field in _ADDRESS_FIELDS)
    db.execute(
        f"UPDATE {table} SET {assignments} WHERE {key} = ?",
        (*(address[field].strip() for field in _ADDRESS_FIELDS), value),
    )
