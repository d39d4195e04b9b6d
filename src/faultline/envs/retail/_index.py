"""Look-ups over the seeded store that task and mistake generation share."""

from __future__ import annotations

from datetime import date

from faultline.envs.retail._data import RETURN_WINDOW_DAYS, TODAY, Order, PaymentMethod, StoreData, User, Variant


class StoreIndex:
    """The seeded store by id. Reflects the initial state, before any task runs."""

    def __init__(self, data: StoreData) -> None:
        self.data = data
        self.users = {user.user_id: user for user in data.users}
        self.orders = {order.order_id: order for order in data.orders}
        self.methods = {m.payment_method_id: m for user in data.users for m in user.payment_methods}
        self.product_names = {product.product_id: product.name for product in data.products}
        self.variants = {v.item_id: v for product in data.products for v in product.variants}
        self.by_product = {product.product_id: product.variants for product in data.products}
        self._orders_of: dict[str, list[Order]] = {}
        for order in data.orders:
            self._orders_of.setdefault(order.user_id, []).append(order)
        name_zip: dict[tuple[str, str, str], int] = {}
        for user in data.users:
            key = (user.first_name, user.last_name, user.address.zip)
            name_zip[key] = name_zip.get(key, 0) + 1
        self._name_zip_counts = name_zip

    def orders_of(self, user: User, *statuses: str) -> list[Order]:
        return [o for o in self._orders_of.get(user.user_id, []) if not statuses or o.status in statuses]

    def unique_name_zip(self, user: User) -> bool:
        return self._name_zip_counts[(user.first_name, user.last_name, user.address.zip)] == 1

    def in_return_window(self, order: Order) -> bool:
        if order.status != "delivered":
            return False
        return (TODAY - date.fromisoformat(order.delivered_on)).days <= RETURN_WINDOW_DAYS

    def alternatives(self, item: Variant) -> list[Variant]:
        """Other available variants of the same product."""
        return [v for v in self.by_product[item.product_id] if v.available and v.item_id != item.item_id]

    def foreign(self, item: Variant) -> list[Variant]:
        """Available variants of other products (swapping to one breaks the policy)."""
        return [
            v
            for product_id, variants in self.by_product.items()
            if product_id != item.product_id
            for v in variants
            if v.available
        ]

    def method(self, method_id: str) -> PaymentMethod:
        return self.methods[method_id]

    def describe_item(self, item: Variant) -> str:
        return f"{self.product_names[item.product_id]} ({describe_options(item)})"

    def describe_items(self, items: list[Variant]) -> str:
        described = [self.describe_item(item) for item in items]
        return described[0] if len(described) == 1 else ", ".join(described[:-1]) + " and " + described[-1]


def describe_options(item: Variant) -> str:
    return ", ".join(f"{key} {value}" for key, value in item.options.items())
