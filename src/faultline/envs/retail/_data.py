"""The retail store's seeded data: users, payment methods, products with variants, orders.

Everything comes from one `random.Random` seeded with the data seed, so the
same seed always gives the same store (and the same state hash).
"""

from __future__ import annotations

import itertools
import json
import sqlite3
from datetime import date, timedelta
from random import Random

import msgspec

TODAY = date(2024, 6, 15)
"""The store's "today": the policy's 30-day return window counts back from it."""

RETURN_WINDOW_DAYS = 30

USERS = 500

_CATALOG_TEXT = """
T-Shirt | 25 | color: black, white, red, blue, green; size: S, M, L, XL; material: cotton, polyester
Running Shoes | 110 | color: black, white, red, blue; size: 7, 8, 9, 10, 11; sole: rubber, EVA
Desk Lamp | 60 | color: black, white, silver; brightness: low, medium, high; power: AC adapter, USB, battery
Water Bottle | 22 | capacity: 500ml, 750ml, 1000ml; material: steel, glass, plastic; color: blue, green, black, red
Backpack | 80 | color: black, grey, navy, green; size: small, medium, large; material: nylon, polyester, leather
Wireless Earbuds | 120 | color: black, white, blue; battery life: 6h, 8h, 10h; water resistance: none, IPX4, IPX7
Coffee Maker | 95 | color: black, stainless steel, white; capacity: 4 cups, 8 cups, 12 cups; type: drip, espresso
Office Chair | 210 | material: mesh, leather, fabric; color: black, grey, blue; armrest: fixed, adjustable, none
Yoga Mat | 35 | thickness: 4mm, 6mm, 8mm; material: PVC, TPE, rubber; color: purple, blue, green, black
Mechanical Keyboard | 140 | switch type: linear, tactile, clicky; backlight: none, white, RGB; size: full size, 80%, 60%
Smart Watch | 250 | color: black, silver, gold; band: silicone, leather, metal; display: AMOLED, LCD
Sunglasses | 90 | frame color: black, brown, silver; lens color: grey, green, brown; lens type: polarized, non-polarized
Jigsaw Puzzle | 25 | pieces: 500, 1000, 2000; theme: animals, art, landscape, cities; difficulty: easy, medium, hard
Bluetooth Speaker | 75 | color: black, blue, red; battery life: 10 hours, 20 hours; water resistance: no, yes
Hiking Boots | 150 | size: 7, 8, 9, 10, 11, 12; material: leather, synthetic; waterproof: yes, no
Tea Kettle | 45 | material: glass, steel, ceramic; capacity: 1 l, 1.5 l, 2 l; stovetop: electric, gas, induction
Bookshelf | 180 | material: wood, metal, glass; color: white, brown, black; height: 3 ft, 4 ft, 5 ft, 6 ft
Fleece Jacket | 70 | size: S, M, L, XL; color: black, navy, red, grey; zipper: full, half
Skateboard | 85 | deck: maple, bamboo, plastic; length: 28 inch, 31 inch, 34 inch; design: plain, graphic, custom
Air Purifier | 230 | room size: small, medium, large; filter: HEPA, ionic, carbon; features: quiet, sensors, night light
Electric Toothbrush | 60 | color: white, black, blue; speed settings: low, high; battery: rechargeable, AA batteries
Notebook | 12 | size: A4, A5; cover: hard, soft; paper: lined, plain, dotted
Gaming Mouse | 55 | color: black, white, RGB; sensor: optical, laser; connectivity: wired, wireless
Garden Hose | 40 | length: 25ft, 50ft, 100ft; material: rubber, vinyl, latex; color: green, blue, black
"""


def _catalog() -> list[tuple[str, float, dict[str, list[str]]]]:
    """Product name, base price and option values, one product per line of `_CATALOG_TEXT`."""
    products = []
    for line in _CATALOG_TEXT.strip().splitlines():
        name, base, options = (part.strip() for part in line.split("|"))
        values = dict(option.split(": ") for option in options.split("; "))
        products.append((name, float(base), {key: value.split(", ") for key, value in values.items()}))
    return products


_FIRST = (
    "Olivia Liam Emma Noah Ava Ethan Sophia Mason Isabella Lucas Mia Aiden Amelia Yusuf Harper Mei "
    "Evelyn Omar Aria Daiki Chloe Mateo Sofia Ivan Layla Arjun Nora Fatima Lena Raj Zoe Kenji "
    "Grace Diego Hannah Tariq Lily Sven Ines Kwame"
).split()
_LAST = (
    "Smith Johnson Garcia Brown Lee Patel Kim Nguyen Lopez Wilson Ahmed Rossi Muller Silva Khan Cohen "
    "Ito Moreno Novak Okafor Hansen Dubois Sato Costa Ali Schmidt Rivera Chen Walsh Santos Gupta "
    "Anderson Kowalski Haddad Jensen Park Murphy Ortiz Fischer Yamamoto"
).split()
_CITIES = [
    ("Austin", "TX", "787"), ("Denver", "CO", "802"), ("Seattle", "WA", "981"), ("Boston", "MA", "021"),
    ("Chicago", "IL", "606"), ("Phoenix", "AZ", "850"), ("Portland", "OR", "972"), ("Atlanta", "GA", "303"),
    ("Miami", "FL", "331"), ("Columbus", "OH", "432"), ("Nashville", "TN", "372"), ("San Diego", "CA", "921"),
    ("Philadelphia", "PA", "191"), ("Minneapolis", "MN", "554"), ("Charlotte", "NC", "282"), ("Houston", "TX", "770"),
    ("San Jose", "CA", "951"), ("Detroit", "MI", "482"), ("Baltimore", "MD", "212"), ("Tucson", "AZ", "857"),
]  # fmt: skip
_STREETS = (
    "Maple Drive|Oak Street|Pine Avenue|Cedar Lane|Elm Street|Lakeview Road|Hillcrest Avenue|Sunset Boulevard|"
    "River Road|Park Place|Willow Way|Highland Avenue|Chestnut Street|Spring Street|Meadow Lane|Forest Drive|"
    "Church Street|Broadway|Main Street|Harbor View"
).split("|")

_STATUSES = [
    ("pending", 28),
    ("pending (items modified)", 4),
    ("processed", 14),
    ("delivered", 36),
    ("cancelled", 8),
    ("return requested", 5),
    ("exchange requested", 5),
]


class Address(msgspec.Struct, frozen=True, kw_only=True):
    address1: str
    address2: str
    city: str
    state: str
    country: str
    zip: str

    def describe(self) -> str:
        street = f"{self.address1}, {self.address2}" if self.address2 else self.address1
        return f"{street}, {self.city}, {self.state} {self.zip}, {self.country}"


class PaymentMethod(msgspec.Struct, frozen=True, kw_only=True):
    payment_method_id: str
    user_id: str
    source: str
    brand: str = ""
    last_four: str = ""
    balance: float | None = None

    def describe(self) -> str:
        if self.source == "credit_card":
            return f"{self.brand} credit card ending in {self.last_four}"
        return "PayPal account" if self.source == "paypal" else "gift card"


class User(msgspec.Struct, frozen=True, kw_only=True):
    user_id: str
    first_name: str
    last_name: str
    email: str
    address: Address
    payment_methods: list[PaymentMethod]


class Variant(msgspec.Struct, frozen=True, kw_only=True):
    item_id: str
    product_id: str
    options: dict[str, str]
    price: float
    available: bool


class Product(msgspec.Struct, frozen=True, kw_only=True):
    product_id: str
    name: str
    variants: list[Variant]


class Order(msgspec.Struct, frozen=True, kw_only=True):
    order_id: str
    user_id: str
    status: str
    address: Address
    items: list[Variant]
    payment_method_id: str
    placed_on: str
    delivered_on: str = ""

    @property
    def total(self) -> float:
        return round(sum(item.price for item in self.items), 2)


class StoreData(msgspec.Struct, frozen=True, kw_only=True):
    users: list[User]
    products: list[Product]
    orders: list[Order]


def options_text(options: dict[str, str]) -> str:
    """Options as stored and shown: JSON with sorted keys."""
    return json.dumps(options, sort_keys=True)


def generate(seed: int) -> StoreData:
    """The whole store for `seed`; pure and fast (a few milliseconds)."""
    rng = Random(f"retail-data:{seed}")
    ids = _Ids(rng)
    products = [_product(rng, ids, name, base, options) for name, base, options in _catalog()]
    users = [_user(rng, ids) for _ in range(USERS)]
    variants = [variant for product in products for variant in product.variants]
    statuses, weights = zip(*_STATUSES, strict=True)
    orders: list[Order] = []
    for user in users:
        for _ in range(rng.choices([0, 1, 2, 3, 4], [1, 3, 3, 2, 1])[0]):
            orders.append(_order(rng, ids, user, variants, rng.choices(statuses, weights)[0]))
    return StoreData(users=users, products=products, orders=orders)


class _Ids:
    """Unique random ids of a given shape."""

    def __init__(self, rng: Random) -> None:
        self._rng = rng
        self._used: set[str] = set()

    def new(self, prefix: str, digits: int) -> str:
        while True:
            value = prefix + "".join(self._rng.choice("0123456789") for _ in range(digits))
            if value not in self._used:
                self._used.add(value)
                return value


def _product(rng: Random, ids: _Ids, name: str, base: float, options: dict[str, list[str]]) -> Product:
    product_id = ids.new("", 10)
    combos = list(itertools.product(*options.values()))
    chosen = rng.sample(combos, min(len(combos), rng.randint(6, 14)))
    variants = [
        Variant(
            item_id=ids.new("", 10),
            product_id=product_id,
            options=dict(zip(options, combo, strict=True)),
            price=round(base * rng.uniform(0.8, 1.3), 2),
            available=rng.random() < 0.75,
        )
        for combo in chosen
    ]
    return Product(product_id=product_id, name=name, variants=variants)


def random_address(rng: Random) -> Address:
    city, state, zip3 = rng.choice(_CITIES)
    unit = rng.choice(["", "", f"Suite {rng.randint(100, 999)}", f"Apt {rng.randint(1, 40)}"])
    return Address(
        address1=f"{rng.randint(10, 9999)} {rng.choice(_STREETS)}",
        address2=unit,
        city=city,
        state=state,
        country="USA",
        zip=f"{zip3}{rng.randint(0, 99):02d}",
    )


def _user(rng: Random, ids: _Ids) -> User:
    first, last = rng.choice(_FIRST), rng.choice(_LAST)
    user_id = ids.new(f"{first.lower()}_{last.lower()}_", 4)
    methods: list[PaymentMethod] = []
    cards = 2 if rng.random() < 0.25 else (1 if rng.random() < 0.75 else 0)
    for _ in range(cards):
        methods.append(
            PaymentMethod(
                payment_method_id=ids.new("credit_card_", 7),
                user_id=user_id,
                source="credit_card",
                brand=rng.choice(["visa", "mastercard", "amex"]),
                last_four=f"{rng.randint(0, 9999):04d}",
            )
        )
    if rng.random() < 0.4 or not methods:
        methods.append(PaymentMethod(payment_method_id=ids.new("paypal_", 7), user_id=user_id, source="paypal"))
    if rng.random() < 0.4:
        methods.append(
            PaymentMethod(
                payment_method_id=ids.new("gift_card_", 7),
                user_id=user_id,
                source="gift_card",
                balance=float(rng.randint(5, 400)),
            )
        )
    return User(
        user_id=user_id,
        first_name=first,
        last_name=last,
        email=f"{first.lower()}.{last.lower()}{user_id[-4:]}@example.com",
        address=random_address(rng),
        payment_methods=methods,
    )


def _order(rng: Random, ids: _Ids, user: User, variants: list[Variant], status: str) -> Order:
    items: list[Variant] = []
    for variant in rng.sample(variants, rng.choices([1, 2, 3, 4, 5], [4, 3, 2, 1, 1])[0]):
        if all(item.product_id != variant.product_id for item in items):
            items.append(variant)
    if status.startswith("pending"):
        placed = TODAY - timedelta(days=rng.randint(0, 4))
    elif status == "processed":
        placed = TODAY - timedelta(days=rng.randint(2, 6))
    else:
        placed = TODAY - timedelta(days=rng.randint(10, 100))
    delivered = ""
    if status in ("delivered", "return requested", "exchange requested"):
        delivered = str(placed + timedelta(days=rng.randint(3, 7)))
    return Order(
        order_id=ids.new("#W", 7),
        user_id=user.user_id,
        status=status,
        address=user.address if rng.random() < 0.85 else random_address(rng),
        items=items,
        payment_method_id=rng.choice(user.payment_methods).payment_method_id,
        placed_on=str(placed),
        delivered_on=delivered,
    )


_SCHEMA = """
CREATE TABLE users (user_id TEXT PRIMARY KEY, first_name TEXT, last_name TEXT, email TEXT UNIQUE,
    address1 TEXT, address2 TEXT, city TEXT, state TEXT, country TEXT, zip TEXT);
CREATE TABLE payment_methods (payment_method_id TEXT PRIMARY KEY, user_id TEXT, source TEXT,
    brand TEXT, last_four TEXT, balance REAL);
CREATE TABLE products (product_id TEXT PRIMARY KEY, name TEXT);
CREATE TABLE variants (item_id TEXT PRIMARY KEY, product_id TEXT, options TEXT, price REAL, available INTEGER);
CREATE TABLE orders (order_id TEXT PRIMARY KEY, user_id TEXT, status TEXT, address1 TEXT, address2 TEXT,
    city TEXT, state TEXT, country TEXT, zip TEXT, payment_method_id TEXT, placed_on TEXT,
    delivered_on TEXT, cancel_reason TEXT);
CREATE TABLE order_items (order_id TEXT, position INTEGER, item_id TEXT, product_id TEXT, name TEXT,
    options TEXT, price REAL, PRIMARY KEY (order_id, position));
CREATE TABLE payments (order_id TEXT, position INTEGER, kind TEXT, payment_method_id TEXT, amount REAL,
    PRIMARY KEY (order_id, position));
CREATE TABLE requests (order_id TEXT, kind TEXT, item_id TEXT, new_item_id TEXT, payment_method_id TEXT);
CREATE INDEX users_by_name_zip ON users (lower(first_name), lower(last_name), zip);
CREATE INDEX users_by_email ON users (lower(email));
CREATE INDEX methods_by_user ON payment_methods (user_id);
CREATE INDEX variants_by_product ON variants (product_id);
CREATE INDEX orders_by_user ON orders (user_id);
"""


def write(db: sqlite3.Connection, data: StoreData) -> None:
    """Create the tables and insert `data` (inside the caller's transaction)."""
    for statement in _SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)
    db.executemany(
        "INSERT INTO users VALUES (?,?,?,?,?,?,?,?,?,?)",
        [(u.user_id, u.first_name, u.last_name, u.email, *_address_row(u.address)) for u in data.users],
    )
    db.executemany(
        "INSERT INTO payment_methods VALUES (?,?,?,?,?,?)",
        [
            (m.payment_method_id, m.user_id, m.source, m.brand, m.last_four, m.balance)
            for u in data.users
            for m in u.payment_methods
        ],
    )
    db.executemany("INSERT INTO products VALUES (?,?)", [(p.product_id, p.name) for p in data.products])
    db.executemany(
        "INSERT INTO variants VALUES (?,?,?,?,?)",
        [
            (v.item_id, v.product_id, options_text(v.options), v.price, int(v.available))
            for p in data.products
            for v in p.variants
        ],
    )
    names = {p.product_id: p.name for p in data.products}
    orders, items, payments, requests = [], [], [], []
    for o in data.orders:
        reason = "no longer needed" if o.status == "cancelled" else None
        orders.append(
            (o.order_id, o.user_id, o.status, *_address_row(o.address), o.payment_method_id, o.placed_on,
             o.delivered_on or None, reason)
        )  # fmt: skip
        for position, v in enumerate(o.items):
            items.append(
                (o.order_id, position, v.item_id, v.product_id, names[v.product_id], options_text(v.options), v.price)
            )
        payments.append((o.order_id, 0, "payment", o.payment_method_id, o.total))
        if o.status == "cancelled":
            payments.append((o.order_id, 1, "refund", o.payment_method_id, o.total))
        if o.status in ("return requested", "exchange requested"):
            requests.append((o.order_id, o.status.split()[0], o.items[0].item_id, None, o.payment_method_id))
    db.executemany("INSERT INTO orders VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", orders)
    db.executemany("INSERT INTO order_items VALUES (?,?,?,?,?,?,?)", items)
    db.executemany("INSERT INTO payments VALUES (?,?,?,?,?)", payments)
    db.executemany("INSERT INTO requests VALUES (?,?,?,?,?)", requests)


def _address_row(address: Address) -> tuple[str, ...]:
    return (address.address1, address.address2, address.city, address.state, address.country, address.zip)
