"""The plugin interface, exercised through a tiny domain defined here."""

from __future__ import annotations

import sqlite3
from random import Random

import pytest

from faultline._errors import DomainError, PluginError, ToolError
from faultline.envs import (
    EARLY_STOP,
    POLICY_VIOLATION,
    WRONG_ENTITY,
    WRONG_VALUE,
    Action,
    Domain,
    Task,
    ToolOutcome,
    load_domain,
    tool,
)
from faultline.envs.retail import Retail


class Ledger(Domain):
    """Two accounts and a deposit tool: small enough to reason about every row."""

    name = "ledger"
    policy = "Deposit only what the user asks for."

    def seed_database(self, db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE accounts (name TEXT PRIMARY KEY, balance INTEGER)")
        db.executemany("INSERT INTO accounts VALUES (?, ?)", [("alice", 10), ("bob", 5)])

    def tasks(self) -> list[Task]:
        return [
            Task(
                id="pay-bob",
                instruction="Put 7 into Bob's account and tell me the new balance.",
                actions=[
                    Action(name="get_balance", arguments={"name": "bob"}),
                    Action(name="deposit", arguments={"name": "bob", "amount": 7}),
                ],
                outputs=["12"],
            ),
            Task(
                id="broken",
                instruction="Put 1 into Carol's account.",
                actions=[Action(name="deposit", arguments={"name": "carol", "amount": 1})],
            ),
        ]

    def mistake_candidates(self, task: Task, step: int, category: str) -> list[Action]:
        intended = task.actions[step] if step < len(task.actions) else None
        if intended is None or intended.name != "deposit":
            return []
        amount = intended.arguments["amount"]
        if category == WRONG_VALUE:
            return [
                Action(name="deposit", arguments={"name": "bob", "amount": amount + 1}),
                intended,
                Action(name="deposit", arguments={"name": "nobody", "amount": 1}),
            ]
        if category == WRONG_ENTITY:
            return [Action(name="deposit", arguments={"name": "alice", "amount": amount})]
        if category == POLICY_VIOLATION:
            return [Action(name="deposit", arguments={"name": "bob", "amount": amount, "memo": "same effect"})]
        return []

    @tool("Read a balance.", name=("string", "Account name."))
    def get_balance(self, db: sqlite3.Connection, name: str) -> int:
        row = db.execute("SELECT balance FROM accounts WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise ToolError(f"no account {name!r}")
        return int(row[0])

    @tool(
        "Add money to an account.",
        writes=True,
        optional=("memo",),
        name=("string", "Account name."),
        amount=("integer", "Whole dollars."),
        memo=("string", "A note."),
    )
    def deposit(self, db: sqlite3.Connection, name: str, amount: int, memo: str = "") -> int:
        db.execute("UPDATE accounts SET balance = balance + ? WHERE name = ?", (amount, name))
        if amount > 1000:
            raise ToolError("deposits above 1000 need a human")
        if amount == 13:
            raise RuntimeError("unlucky")
        return self.get_balance(db, name)


class NotADomain:
    pass


class Abstract(Domain):
    name = "abstract"


@pytest.fixture
def ledger() -> Ledger:
    return Ledger()


def test_tools_come_from_marked_methods_in_definition_order(ledger: Ledger) -> None:
    specs = ledger.tools()
    assert [spec.name for spec in specs] == ["get_balance", "deposit"]
    assert [spec.writes for spec in specs] == [False, True]
    deposit = specs[1].openai()
    assert deposit["type"] == "function"
    assert deposit["function"]["name"] == "deposit"
    assert deposit["function"]["parameters"]["required"] == ["name", "amount"]
    assert deposit["function"]["parameters"]["properties"]["amount"]["type"] == "integer"


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        (Action(name="withdraw", arguments={}), "unknown tool 'withdraw'"),
        (Action(name="deposit", arguments={"name": "bob"}), "missing required argument 'amount'"),
        (Action(name="deposit", arguments={"name": "bob", "amount": "7"}), "expected integer, got str - at $.amount"),
        (Action(name="deposit", arguments={"name": "bob", "amount": True}), "expected integer, got bool"),
        (Action(name="deposit", arguments={"name": 3, "amount": 7}), "expected string, got int - at $.name"),
        (Action(name="deposit", arguments={"name": "bob", "amount": 7, "to": "x"}), "unexpected argument 'to'"),
        (Action(name="deposit", arguments=["bob", 7]), "expected object, got list"),  # type: ignore[arg-type]
        (Action(name=None, arguments={}), "unknown tool None"),  # type: ignore[arg-type]
        (Action(name="get_balance", arguments={"name": "carol"}), "no account 'carol'"),
        (Action(name="deposit", arguments={"name": "bob", "amount": 5000}), "deposits above 1000 need a human"),
        (Action(name="deposit", arguments={"name": "bob", "amount": 13}), "deposit failed: RuntimeError: unlucky"),
    ],
)
def test_a_bad_call_is_an_error_outcome_and_changes_nothing(ledger: Ledger, action: Action, expected: str) -> None:
    db = ledger.open_database()
    before = ledger.state_hash(db)
    outcome = ledger.call(db, action)
    assert expected in outcome.error
    assert not outcome.ok
    assert outcome.as_text().startswith("Error: ")
    assert ledger.state_hash(db) == before


def test_a_good_call_returns_the_output_and_commits(ledger: Ledger) -> None:
    db = ledger.open_database()
    outcome = ledger.call(db, Action(name="deposit", arguments={"name": "bob", "amount": 7, "memo": "rent"}))
    assert outcome == ToolOutcome(output=12)
    assert outcome.as_text() == "12"
    assert not db.in_transaction


def test_a_closed_database_is_an_error_too(ledger: Ledger) -> None:
    db = ledger.open_database()
    db.close()
    assert "database unavailable" in ledger.call(db, Action(name="get_balance", arguments={"name": "bob"})).error


def test_each_open_database_is_independent(ledger: Ledger) -> None:
    first, second = ledger.open_database(), ledger.open_database()
    ledger.call(first, Action(name="deposit", arguments={"name": "alice", "amount": 1}))
    assert ledger.call(first, Action(name="get_balance", arguments={"name": "alice"})).output == 11
    assert ledger.call(second, Action(name="get_balance", arguments={"name": "alice"})).output == 10
    assert ledger.state_hash(first) != ledger.state_hash(second)
    assert ledger.state_hash(ledger.open_database()) == ledger.state_hash(second)


def test_the_state_hash_ignores_row_order_but_not_content(ledger: Ledger) -> None:
    db = ledger.open_database()
    reordered = sqlite3.connect(":memory:")
    reordered.execute("CREATE TABLE accounts (name TEXT PRIMARY KEY, balance INTEGER)")
    reordered.executemany("INSERT INTO accounts VALUES (?, ?)", [("bob", 5), ("alice", 10)])
    assert ledger.state_hash(reordered) == ledger.state_hash(db)
    reordered.execute("UPDATE accounts SET balance = 6 WHERE name = 'bob'")
    assert ledger.state_hash(reordered) != ledger.state_hash(db)


def test_score_needs_the_expected_state_and_every_output(ledger: Ledger) -> None:
    task = ledger.task("pay-bob")
    db = ledger.open_database()
    assert ledger.score(task, db, ["Bob now has 12 dollars."]).db_match is False
    for action in task.actions:
        ledger.call(db, action)
    assert ledger.score(task, db, ["Done."]).missing_outputs == ["12"]
    assert ledger.score(task, db, ["Done."]).reward == 0.0
    good = ledger.score(task, db, ["Done.", "Bob now has 12 dollars."])
    assert (good.reward, good.db_match, good.missing_outputs) == (1.0, True, [])


def test_a_ground_truth_that_fails_is_reported_with_its_step(ledger: Ledger) -> None:
    with pytest.raises(DomainError, match=r"task 'broken': ground-truth step 0 \(deposit\) fails"):
        ledger.expected_hash(ledger.task("broken"))
    with pytest.raises(DomainError, match="has no task 'nope'"):
        ledger.task("nope")


def test_mistakes_are_only_the_decisive_candidates(ledger: Ledger) -> None:
    task = ledger.task("pay-bob")
    rng = Random(0)
    wrong_value = ledger.mistake(task, 1, WRONG_VALUE, rng)
    assert wrong_value == Action(name="deposit", arguments={"name": "bob", "amount": 8})
    wrong_entity = ledger.mistake(task, 1, WRONG_ENTITY, rng)
    assert wrong_entity == Action(name="deposit", arguments={"name": "alice", "amount": 7})
    # Accepted, but the memo is not stored: the final state is the expected one, so not a mistake.
    assert ledger.mistake(task, 1, POLICY_VIOLATION, rng) is None
    assert ledger.mistake(task, 0, WRONG_VALUE, rng) is None
    assert ledger.mistake(task, 1, EARLY_STOP, rng) is None


def test_forbidden_writes_are_the_policy_mistake_at_the_final_step(ledger: Ledger) -> None:
    refusal = Task(
        id="refuse",
        instruction="Deposit 500 into Alice's account.",
        actions=[Action(name="get_balance", arguments={"name": "alice"})],
        outputs=["policy"],
        refusal=True,
        forbidden=[Action(name="deposit", arguments={"name": "alice", "amount": 500})],
    )
    assert ledger.mistake(refusal, 1, POLICY_VIOLATION, Random(0)) == refusal.forbidden[0]
    assert ledger.mistake(refusal, 1, WRONG_VALUE, Random(0)) is None


def test_a_tool_name_may_not_shadow_the_interface() -> None:
    with pytest.raises(DomainError, match="clashes with a Domain method"):

        class Clash(Domain):
            @tool("Oops.")
            def call(self, db: sqlite3.Connection) -> None: ...


def test_load_domain_by_builtin_name_and_import_path() -> None:
    retail = load_domain("retail")
    assert isinstance(retail, Retail)
    assert load_domain("retail") is retail
    assert load_domain("faultline.envs.retail:Retail") is not retail
    ledger = load_domain(f"{__name__}:Ledger")
    assert isinstance(ledger, Ledger)
    assert ledger.task("pay-bob").outputs == ["12"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "shop",
            "cannot load domain 'shop': not a registered name (registered: phone, retail)"
            " nor a package.module:Name path",
        ),
        (
            "no_such_package.domains:Shop",
            "cannot load domain 'no_such_package.domains:Shop': no module named 'no_such_package'"
            " (is it installed, or in a --plugin-path folder?)",
        ),
        (f"{__name__}:Missing", f"cannot load domain '{__name__}:Missing': module '{__name__}' has no attribute"),
        (f"{__name__}:NotADomain", "it is a type, not a Domain subclass"),
        (f"{__name__}:pytest", "it is a module, not a Domain subclass"),
        (f"{__name__}:Abstract", "the class refused its parameters"),
    ],
)
def test_load_domain_explains_a_bad_spec(spec: str, message: str) -> None:
    with pytest.raises(PluginError) as caught:
        load_domain(spec)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def _recounted(db: sqlite3.Connection, ledger: Ledger) -> str:
    """The hash of a plain copy, which has no change log and is digested row by row."""
    plain = sqlite3.connect(":memory:")
    db.backup(plain)
    plain.execute("DROP TABLE _fl_meta")
    return ledger.state_hash(plain)


def test_the_fast_hash_of_a_changed_copy_equals_a_full_recount(ledger: Ledger) -> None:
    db = ledger.open_database()
    assert ledger.state_hash(db) == _recounted(db, ledger)
    ledger.call(db, Action(name="deposit", arguments={"name": "bob", "amount": 3}))
    db.execute("INSERT INTO accounts VALUES ('carol', '42')")
    db.execute("INSERT OR REPLACE INTO accounts VALUES ('alice', 1)")
    db.execute("DELETE FROM accounts WHERE name = 'carol'")
    db.execute("UPDATE accounts SET balance = balance - 3 WHERE name = 'bob'")
    assert ledger.state_hash(db) == _recounted(db, ledger)
    db.execute("UPDATE accounts SET balance = 10 WHERE name = 'alice'")
    assert ledger.state_hash(db) == ledger.state_hash(ledger.open_database())
