"""A third-party domain as a user would write one: loaded with `--domain tests.runtime.counter_domain:Counter`."""

from __future__ import annotations

import sqlite3

from faultline.envs import Action, Domain, Task, tool


class Counter(Domain):
    """One named counter per row; tasks add to them and report the result."""

    name = "counter"
    policy = "Only change the counter the user names. Tell the user the new value."

    def seed_database(self, db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER)")
        db.executemany("INSERT INTO counters VALUES (?, ?)", [("apples", 3), ("pears", 10)])

    @tool("Read a counter.", name=("string", "the counter's name"))
    def read(self, db: sqlite3.Connection, name: str) -> dict[str, object]:
        row = db.execute("SELECT value FROM counters WHERE name = ?", (name,)).fetchone()
        return {"name": name, "value": row[0] if row else None}

    @tool("Add to a counter.", writes=True, name=("string", "the counter's name"), amount=("integer", "how much"))
    def add(self, db: sqlite3.Connection, name: str, amount: int) -> dict[str, object]:
        db.execute("UPDATE counters SET value = value + ? WHERE name = ?", (amount, name))
        return self.read(db, name)

    def tasks(self) -> list[Task]:
        return [
            Task(
                id="more-apples",
                instruction="Add 4 to my apples counter and tell me the new value.",
                user_facts={"counter": "apples"},
                actions=[
                    Action(name="read", arguments={"name": "apples"}),
                    Action(name="add", arguments={"name": "apples", "amount": 4}),
                ],
                outputs=["7"],
            ),
            Task(
                id="check-pears",
                instruction="How many pears do I have?",
                user_facts={"counter": "pears"},
                actions=[Action(name="read", arguments={"name": "pears"})],
                outputs=["10"],
            ),
        ]
