"""Retail tasks, generated from the seeded store with their ground-truth actions.

Each kind of task has a builder that looks at one user and either makes a
task from their orders or declines. Builders see the initial store, so a
multi-step task orders its writes so that every step still succeeds.
"""

from __future__ import annotations

from collections.abc import Callable
from random import Random
from typing import NamedTuple

from faultline.envs._types import Action, Task
from faultline.envs.retail._data import Order, PaymentMethod, User, Variant, random_address
from faultline.envs.retail._index import StoreIndex, describe_options

_REASONS = {"no longer needed": "I no longer need it", "ordered by mistake": "I ordered it by mistake"}


class Part(NamedTuple):
    """One request inside a task: what the user says, the facts it needs, its ground truth."""

    sentence: str
    actions: list[Action]
    facts: dict[str, str] = {}
    outputs: list[str] = []
    forbidden: list[Action] = []


class Draft(NamedTuple):
    parts: list[Part]
    refusal: bool = False
    identify: bool = True


Builder = Callable[[StoreIndex, User, Random], Draft | None]


def generate_tasks(index: StoreIndex, seed: int) -> list[Task]:
    """Every retail task for the store, in a stable order."""
    rng = Random(f"retail-tasks:{seed}")
    users = list(index.data.users)
    rng.shuffle(users)
    used: set[str] = set()
    tasks: list[Task] = []
    for kind, count, build in _KINDS:
        made = 0
        for user in users:
            if made == count:
                break
            if user.user_id in used:
                continue
            draft = build(index, user, rng)
            if draft is None:
                continue
            used.add(user.user_id)
            tasks.append(_task(f"{kind}-{made:02d}", kind, draft, index, user, rng))
            made += 1
    return tasks


def _task(task_id: str, kind: str, draft: Draft, index: StoreIndex, user: User, rng: Random) -> Task:
    actions: list[Action] = []
    facts: dict[str, str] = {}
    if draft.identify:
        if rng.random() < 0.5 or not index.unique_name_zip(user):
            actions.append(Action(name="find_user_id_by_email", arguments={"email": user.email}))
            facts["email"] = user.email
        else:
            args = {"first_name": user.first_name, "last_name": user.last_name, "zip": user.address.zip}
            actions.append(Action(name="find_user_id_by_name_zip", arguments=args))
            facts |= {"first name": user.first_name, "last name": user.last_name, "zip code": user.address.zip}
    for part in draft.parts:
        actions.extend(part.actions)
        for key, value in part.facts.items():
            facts[key if facts.get(key, value) == value else f"other {key}"] = value
    return Task(
        id=task_id,
        instruction=" ".join(part.sentence for part in draft.parts),
        user_facts=facts,
        actions=actions,
        outputs=[output for part in draft.parts for output in part.outputs],
        refusal=draft.refusal,
        forbidden=[action for part in draft.parts for action in part.forbidden],
        tags=["retail", kind] + (["refusal"] if draft.refusal else []),
    )


# -- parts: one request about one order ------------------------------------------------------


def _look_up(order: Order, rng: Random, user_id: str) -> tuple[list[Action], dict[str, str]]:
    """Reading the order: by the id the user knows, or through the account when they do not."""
    read = Action(name="get_order_details", arguments={"order_id": order.order_id})
    if rng.random() < 0.7:
        return [read], {"order id": order.order_id}
    return [Action(name="get_user_details", arguments={"user_id": user_id}), read], {}


def _cancel(index: StoreIndex, order: Order, rng: Random) -> Part:
    reason = rng.choice(sorted(_REASONS))
    reads, facts = _look_up(order, rng, order.user_id)
    cancel = Action(name="cancel_pending_order", arguments={"order_id": order.order_id, "reason": reason})
    sentence = f"I want to cancel my order of the {index.describe_items(order.items)}; {_REASONS[reason]}."
    return Part(sentence, [*reads, cancel], facts)


def _change_address(index: StoreIndex, order: Order, rng: Random) -> Part:
    address = random_address(rng)
    reads, facts = _look_up(order, rng, order.user_id)
    args = {"order_id": order.order_id, **_address_args(address)}
    sentence = f"Please ship my pending order of the {index.describe_items(order.items)} to {address.describe()}."
    return Part(sentence, [*reads, Action(name="modify_pending_order_address", arguments=args)], facts)


def _swaps(index: StoreIndex, order: Order, rng: Random) -> list[tuple[Variant, Variant]]:
    swappable = [item for item in order.items if index.alternatives(item)]
    chosen = rng.sample(swappable, min(len(swappable), rng.choice([1, 1, 2])))
    return [(item, rng.choice(index.alternatives(item))) for item in chosen]


def _payer(index: StoreIndex, user: User, order: Order, difference: float) -> PaymentMethod:
    """Who pays a price difference: the order's method unless it is a gift card that cannot."""
    methods = [index.method(order.payment_method_id)] + [m for m in user.payment_methods if m.source != "gift_card"]
    return next(m for m in methods if m.source != "gift_card" or (m.balance or 0) >= difference or difference <= 0)


def _swap_part(index: StoreIndex, user: User, order: Order, rng: Random, tool: str) -> Part | None:
    swaps = _swaps(index, order, rng)
    if not swaps:
        return None
    difference = round(sum(new.price - old.price for old, new in swaps), 2)
    payer = _payer(index, user, order, difference)
    reads, facts = _look_up(order, rng, user.user_id)
    products = dict.fromkeys(old.product_id for old, _ in swaps)
    reads += [Action(name="get_product_details", arguments={"product_id": p}) for p in products]
    args = {
        "order_id": order.order_id,
        "item_ids": [old.item_id for old, _ in swaps],
        "new_item_ids": [new.item_id for _, new in swaps],
        "payment_method_id": payer.payment_method_id,
    }
    if tool == "modify_pending_order_items":
        wanted = " and ".join(f"the {index.describe_item(old)} to {describe_options(new)}" for old, new in swaps)
        request = f"Before my pending order ships, please change {wanted}"
    else:
        wanted = " and ".join(
            f"the {index.describe_item(old)} for the one with {describe_options(new)}" for old, new in swaps
        )
        request = f"I want to exchange {wanted} from my delivered order"
    sentence = f"{request}; settle any price difference with my {payer.describe()}."
    return Part(sentence, [*reads, Action(name=tool, arguments=args)], facts)


def _return_part(index: StoreIndex, user: User, order: Order, rng: Random) -> Part:
    items = rng.sample(order.items, rng.randint(1, len(order.items)))
    target = index.method(order.payment_method_id)
    cards = [m for m in user.payment_methods if m.source == "gift_card" and m != target]
    reads, facts = _look_up(order, rng, user.user_id)
    if cards and rng.random() < 0.4:
        target = cards[0]
        reads.append(Action(name="get_user_details", arguments={"user_id": user.user_id}))
        where = "my gift card"
    else:
        where = "the original payment method"
    args = {
        "order_id": order.order_id,
        "item_ids": [i.item_id for i in items],
        "payment_method_id": target.payment_method_id,
    }
    sentence = f"I want to return the {index.describe_items(items)} from my delivered order, refunded to {where}."
    return Part(sentence, [*reads, Action(name="return_delivered_order_items", arguments=args)], facts)


def _address_args(address: object) -> dict[str, str]:
    fields = ("address1", "address2", "city", "state", "country", "zip")
    return {field: getattr(address, field) for field in fields}


# -- builders: one kind of task each -----------------------------------------------------------


def _one(statuses: tuple[str, ...], make: Callable[[StoreIndex, Order, Random], Part]) -> Builder:
    def build(index: StoreIndex, user: User, rng: Random) -> Draft | None:
        orders = index.orders_of(user, *statuses)
        return Draft([make(index, orders[0], rng)]) if orders else None

    return build


def _modify_items(index: StoreIndex, user: User, rng: Random) -> Draft | None:
    orders = index.orders_of(user, "pending")
    part = _swap_part(index, user, orders[0], rng, "modify_pending_order_items") if orders else None
    return Draft([part]) if part else None


def _exchange(index: StoreIndex, user: User, rng: Random) -> Draft | None:
    orders = [o for o in index.orders_of(user) if index.in_return_window(o)]
    part = _swap_part(index, user, orders[0], rng, "exchange_delivered_order_items") if orders else None
    return Draft([part]) if part else None


def _return(index: StoreIndex, user: User, rng: Random) -> Draft | None:
    orders = [o for o in index.orders_of(user) if index.in_return_window(o)]
    return Draft([_return_part(index, user, orders[0], rng)]) if orders else None


def _change_payment(index: StoreIndex, user: User, rng: Random) -> Draft | None:
    for order in index.orders_of(user, "pending", "pending (items modified)"):
        others = [
            m
            for m in user.payment_methods
            if m.payment_method_id != order.payment_method_id and (m.balance is None or m.balance >= order.total)
        ]
        if others:
            method = rng.choice(others)
            reads, facts = _look_up(order, rng, user.user_id)
            account = Action(name="get_user_details", arguments={"user_id": user.user_id})
            if account not in reads:
                reads.append(account)
            args = {"order_id": order.order_id, "payment_method_id": method.payment_method_id}
            items = index.describe_items(order.items)
            sentence = f"I'd like to pay for my pending order of the {items} with my {method.describe()}."
            write = Action(name="modify_pending_order_payment", arguments=args)
            return Draft([Part(sentence, [*reads, write], facts)])
    return None


def _user_address(index: StoreIndex, user: User, rng: Random) -> Draft | None:
    address = random_address(rng)
    read = Action(name="get_user_details", arguments={"user_id": user.user_id})
    write = Action(name="modify_user_address", arguments={"user_id": user.user_id, **_address_args(address)})
    return Draft([Part(f"I moved to {address.describe()}; please make it my default address.", [read, write])])


def _cancel_and_return(index: StoreIndex, user: User, rng: Random) -> Draft | None:
    pending = index.orders_of(user, "pending")
    delivered = [o for o in index.orders_of(user) if index.in_return_window(o)]
    if not pending or not delivered:
        return None
    return Draft([_cancel(index, pending[0], rng), _return_part(index, user, delivered[0], rng)])


def _address_everywhere(index: StoreIndex, user: User, rng: Random) -> Draft | None:
    pending = index.orders_of(user, "pending", "pending (items modified)")
    if not pending:
        return None
    part = _change_address(index, pending[0], rng)
    new = {k: v for k, v in part.actions[-1].arguments.items() if k != "order_id"}
    write = Action(name="modify_user_address", arguments={"user_id": user.user_id, **new})
    also = Part("Please also make that address the default one on my account.", [write])
    return Draft([part, also])


def _cancel_two(index: StoreIndex, user: User, rng: Random) -> Draft | None:
    pending = index.orders_of(user, "pending")
    return Draft([_cancel(index, pending[0], rng), _cancel(index, pending[1], rng)]) if len(pending) >= 2 else None


def _exchange_and_modify(index: StoreIndex, user: User, rng: Random) -> Draft | None:
    pending = index.orders_of(user, "pending")
    delivered = [o for o in index.orders_of(user) if index.in_return_window(o)]
    if not pending or not delivered:
        return None
    first = _swap_part(index, user, delivered[0], rng, "exchange_delivered_order_items")
    second = _swap_part(index, user, pending[0], rng, "modify_pending_order_items")
    return Draft([first, second]) if first and second else None


# -- questions: reads only, the answer is an output ---------------------------------------------


def _count_variants(index: StoreIndex, user: User, rng: Random) -> Draft | None:
    product = rng.choice(index.data.products)
    count = sum(v.available for v in product.variants)
    reads = [
        Action(name="list_all_product_types"),
        Action(name="get_product_details", arguments={"product_id": product.product_id}),
    ]
    sentence = f"How many variants of the {product.name} can I buy right now? Just tell me the number."
    return Draft([Part(sentence, reads, outputs=[str(count)])], identify=False)


def _order_status(index: StoreIndex, user: User, rng: Random) -> Draft | None:
    orders = index.orders_of(user, "processed", "delivered", "cancelled")
    if not orders:
        return None
    order = orders[0]
    read = Action(name="get_order_details", arguments={"order_id": order.order_id})
    sentence = f"What is the status of my order of the {index.describe_items(order.items)}?"
    return Draft([Part(sentence, [read], {"order id": order.order_id}, outputs=[order.status])])


def _gift_card_balance(index: StoreIndex, user: User, rng: Random) -> Draft | None:
    cards = [m for m in user.payment_methods if m.source == "gift_card"]
    if not cards:
        return None
    read = Action(name="get_user_details", arguments={"user_id": user.user_id})
    return Draft([Part("How much money is left on my gift card?", [read], outputs=[f"{cards[0].balance:.2f}"])])


def _order_total(index: StoreIndex, user: User, rng: Random) -> Draft | None:
    orders = index.orders_of(user)
    if not orders:
        return None
    order = orders[-1]
    read = Action(name="get_order_details", arguments={"order_id": order.order_id})
    sentence = "How much did my order cost in total, before any refunds?"
    return Draft([Part(sentence, [read], {"order id": order.order_id}, outputs=[f"{order.total:.2f}"])])


# -- refusals: the user asks for something the policy or the order state does not allow --------


def _refuse(index: StoreIndex, order: Order, sentence: str, output: str, forbidden: list[Action]) -> Draft:
    read = Action(name="get_order_details", arguments={"order_id": order.order_id})
    text = f"{sentence} If that is not possible, tell me why."
    return Draft([Part(text, [read], {"order id": order.order_id}, [output], forbidden)], refusal=True)


def _cancel_refused(status: str, output: str, allowed_by_tool: bool) -> Builder:
    def build(index: StoreIndex, user: User, rng: Random) -> Draft | None:
        orders = index.orders_of(user, status)
        if not orders:
            return None
        order = orders[0]
        reason = rng.choice(sorted(_REASONS))
        cancel = Action(name="cancel_pending_order", arguments={"order_id": order.order_id, "reason": reason})
        sentence = f"I want to cancel my order of the {index.describe_items(order.items)}; {_REASONS[reason]}."
        return _refuse(index, order, sentence, output, [cancel] if allowed_by_tool else [])

    return build


def _late_return(index: StoreIndex, user: User, rng: Random) -> Draft | None:
    late = [o for o in index.orders_of(user, "delivered") if not index.in_return_window(o)]
    if not late:
        return None
    order = late[0]
    args = {
        "order_id": order.order_id,
        "item_ids": [item.item_id for item in order.items],
        "payment_method_id": order.payment_method_id,
    }
    sentence = f"I want to return everything in my order of the {index.describe_items(order.items)}."
    forbidden = [Action(name="return_delivered_order_items", arguments=args)]
    return _refuse(index, order, sentence, order.delivered_on, forbidden)


def _pending_return(index: StoreIndex, user: User, rng: Random) -> Draft | None:
    orders = index.orders_of(user, "pending")
    if not orders:
        return None
    sentence = f"I want to return the {index.describe_items(orders[0].items)} I ordered."
    return _refuse(index, orders[0], sentence, "pending", [])


def _second_modification(index: StoreIndex, user: User, rng: Random) -> Draft | None:
    orders = [o for o in index.orders_of(user, "pending (items modified)") if any(map(index.alternatives, o.items))]
    if not orders:
        return None
    item = next(i for i in orders[0].items if index.alternatives(i))
    new = index.alternatives(item)[0]
    sentence = f"In my pending order, please change the {index.describe_item(item)} to {describe_options(new)}."
    return _refuse(index, orders[0], sentence, "modified", [])


_KINDS: list[tuple[str, int, Builder]] = [
    ("cancel", 6, _one(("pending",), _cancel)),
    ("order-address", 5, _one(("pending", "pending (items modified)"), _change_address)),
    ("modify-items", 6, _modify_items),
    ("modify-payment", 4, _change_payment),
    ("user-address", 4, _user_address),
    ("return", 6, _return),
    ("exchange", 6, _exchange),
    ("cancel-and-return", 2, _cancel_and_return),
    ("address-everywhere", 2, _address_everywhere),
    ("cancel-two", 2, _cancel_two),
    ("exchange-and-modify", 2, _exchange_and_modify),
    ("count-variants", 2, _count_variants),
    ("order-status", 2, _order_status),
    ("gift-card-balance", 2, _gift_card_balance),
    ("order-total", 2, _order_total),
    ("refuse-processed-cancel", 3, _cancel_refused("processed", "processed", allowed_by_tool=False)),
    ("refuse-late-return", 3, _late_return),
    ("refuse-modified-cancel", 2, _cancel_refused("pending (items modified)", "modified", allowed_by_tool=True)),
    ("refuse-pending-return", 2, _pending_return),
    ("refuse-second-modification", 2, _second_modification),
]
