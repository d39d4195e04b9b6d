"""Tools as a benchmark defines them: exact JSON Schemas, names of their own, dict-based code; and which
tables the state hash covers."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from faultline._errors import DomainError
from faultline.envs import Action, Domain, Task, ToolSpec, document_tool, seed_documents, tool

PLACE = {
    "type": "object",
    "properties": {
        "book": {"type": "string"},
        "pickup": {
            "type": "object",
            "properties": {"branch": {"type": "string", "enum": ["north", "south"]}, "days": {"type": "integer"}},
            "required": ["branch"],
            "additionalProperties": False,
        },
        "notes": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["book", "pickup"],
}


def rename(data: dict[str, Any], member: str, name: str) -> str:
    """Benchmark-style: mutates nested data in place, answers a string."""
    data["members"][member]["profile"]["name"] = name
    data["log"][f"{member}:{name}"] = {"by": member}
    return "renamed"


def forget(data: dict[str, Any], member: str) -> str:
    del data["members"][member]
    raise RuntimeError("forgot, then failed")


class Desk(Domain):
    name = "desk"
    hashed_tables = frozenset({"members", "log", "holds"})

    def seed_database(self, db: sqlite3.Connection) -> None:
        seed_documents(
            db,
            {
                "members": {"m1": {"profile": {"name": "Ann", "age": 30}}, "m2": {"profile": {"name": "Bo"}}},
                "log": {},
            },
        )
        db.execute("CREATE TABLE holds (book TEXT, pickup TEXT)")
        db.execute("CREATE TABLE scratch (note TEXT)")

    def tasks(self) -> list[Task]:
        return []

    @tool("Hold a book.", writes=True, schema=PLACE)
    def place(self, db: sqlite3.Connection, book: str, pickup: dict[str, Any], **more: Any) -> str:
        db.execute("INSERT INTO holds VALUES (?, ?)", (book, json.dumps(pickup)))
        return "held"

    @tool("List the tasks of the day: a name the interface itself uses.", called="tasks")
    def tasks_tool(self, db: sqlite3.Connection) -> list[str]:
        return ["shelve"]

    @tool("Jot a note nobody scores.", writes=True, text=("string", "The note."))
    def jot(self, db: sqlite3.Connection, text: str) -> str:
        db.execute("INSERT INTO scratch VALUES (?)", (text,))
        return "noted"

    def registered_tools(self) -> Iterable[tuple[ToolSpec, Callable[..., Any]]]:
        strings = {"type": "object", "properties": {"member": {"type": "string"}, "name": {"type": "string"}}}
        yield ToolSpec(name="rename", description="Rename.", parameters=strings, writes=True), document_tool(rename)
        yield ToolSpec(name="forget", description="Forget.", parameters=strings, writes=True), document_tool(forget)


def documents(db: sqlite3.Connection, table: str) -> dict[str, Any]:
    return {key: json.loads(doc) for key, doc in db.execute(f"SELECT key, doc FROM {table}")}


def test_the_schema_given_whole_is_what_the_model_sees_and_what_a_call_is_checked_against() -> None:
    desk = Desk()
    assert next(s for s in desk.tools() if s.name == "place").parameters == PLACE
    db = desk.open_database()
    fits = [
        {"book": "b1", "pickup": {"branch": "north"}},
        {"book": "b1", "pickup": {"branch": "south", "days": 3}, "notes": []},
        {"book": "b1", "pickup": {"branch": "south"}, "extra": "allowed: the schema does not close the object"},
    ]
    for arguments in fits:
        assert desk.call(db, Action(name="place", arguments=arguments)).error == ""
    breaks = {
        "expected one of ['north', 'south'], got 'east' - at $.pickup.branch": {"pickup": {"branch": "east"}},
        "unexpected argument 'floor' - at $.pickup": {"pickup": {"branch": "north", "floor": 2}},
        "expected string, got int - at $.notes[0]": {"pickup": {"branch": "north"}, "notes": [3]},
    }
    for message, arguments in breaks.items():
        outcome = desk.call(db, Action(name="place", arguments={"book": "b1", **arguments}))
        assert outcome.error == f"invalid arguments for place: {message}"


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "object", "properties": {"a": {"$ref": "#/defs/a"}}}, "keyword '$ref' is not checked - at $.a"),
        ({"type": "object", "properties": {"a": {"type": "date"}}}, "unknown type 'date' - at $.a"),
    ],
)
def test_a_schema_the_check_would_not_enforce_is_refused_when_the_tool_is_defined(
    schema: dict[str, Any], message: str
) -> None:
    with pytest.raises(DomainError) as refused:
        tool("A tool.", schema=schema)(lambda self, db: None)
    assert message.split(" - ")[0] in str(refused.value) and message.split(" - ")[1] in str(refused.value)


def test_tools_are_registered_by_name_not_by_method_so_any_name_works() -> None:
    desk = Desk()
    assert [s.name for s in desk.tools()] == ["place", "tasks", "jot", "rename", "forget"]
    assert desk.call(desk.open_database(), Action(name="tasks")).output == ["shelve"]
    with pytest.raises(DomainError, match=r"tool method 'score' clashes .* called='score'"):

        class Clash(Desk):
            @tool("Shadows the interface.")
            def score(self, db: sqlite3.Connection) -> None:  # type: ignore[override]
                return None


def test_dict_tools_run_unchanged_and_their_changes_are_written_back() -> None:
    desk = Desk()
    db = desk.open_database()
    assert desk.call(db, Action(name="rename", arguments={"member": "m2", "name": "Bea"})).output == "renamed"
    assert documents(db, "members")["m2"] == {"profile": {"name": "Bea"}}
    assert documents(db, "log") == {"m2:Bea": {"by": "m2"}}
    outcome = desk.call(db, Action(name="forget", arguments={"member": "m1"}))
    assert outcome.error == "forget failed: RuntimeError: forgot, then failed"
    assert set(documents(db, "members")) == {"m1", "m2"}  # rolled back with the call


def test_document_key_order_never_reaches_the_state_hash() -> None:
    desk = Desk()
    db = desk.open_database()
    desk.call(db, Action(name="rename", arguments={"member": "m1", "name": "Ann"}))
    assert desk.state_hash(db) != desk.state_hash(desk.open_database())  # the log entry is new
    other = desk.open_database()
    other.execute("DELETE FROM log")
    other.execute("INSERT INTO log VALUES ('m1:Ann', '{\"by\":\"m1\"}')")
    assert desk.state_hash(other) == desk.state_hash(db)


class OrderedDesk(Domain):
    """A benchmark whose tools return stored documents whole: the model sees them in their own key order."""

    name = "ordered-desk"

    def seed_database(self, db: sqlite3.Connection) -> None:
        seed_documents(db, {"members": {"m1": {"name": "Ann", "age": 30, "city": "Oslo"}}}, key_order="kept")

    def tasks(self) -> list[Task]:
        return []

    def canonical_row(self, table: str, row: dict[str, Any]) -> Any:
        return {**row, "doc": json.loads(row["doc"])} if "doc" in row else row

    @tool("Look a member up.", member=("string", "The member's id."))
    def lookup(self, db: sqlite3.Connection, member: str) -> Any:
        return document_tool(lambda data, member: data["members"][member])(db, member=member)

    @tool("Move a member.", writes=True, member=("string", "The id."), city=("string", "The new city."))
    def move(self, db: sqlite3.Connection, member: str, city: str) -> str:
        def write(data: Any, member: str, city: str) -> str:
            data["members"][member] = {
                "city": city,
                **{k: v for k, v in data["members"][member].items() if k != "city"},
            }
            return "moved"

        return str(document_tool(write)(db, member=member, city=city))


def test_documents_seeded_with_their_key_order_kept_come_back_in_it() -> None:
    desk = OrderedDesk()
    db = desk.open_database()
    assert list(desk.call(db, Action(name="lookup", arguments={"member": "m1"})).output) == ["name", "age", "city"]
    before = desk.state_hash(db)
    desk.call(db, Action(name="move", arguments={"member": "m1", "city": "Oslo"}))  # same values, other order
    assert list(desk.call(db, Action(name="lookup", arguments={"member": "m1"})).output) == ["city", "name", "age"]
    assert desk.state_hash(db) == before  # the domain's canonical_row keeps key order out of the hash


def test_only_the_hashed_tables_count_and_the_fast_digest_still_equals_a_full_recount() -> None:
    desk = Desk()
    db = desk.open_database()
    fresh = desk.state_hash(db)
    desk.call(db, Action(name="jot", arguments={"text": "scratch work"}))
    assert desk.state_hash(db) == fresh
    desk.call(db, Action(name="place", arguments={"book": "b1", "pickup": {"branch": "north"}}))
    fast = desk.state_hash(db)
    assert fast != fresh
    copy = sqlite3.connect(":memory:")
    for table in ("members", "log", "holds", "scratch"):
        columns = [c[1] for c in db.execute(f"PRAGMA table_info({table})")]
        copy.execute(f"CREATE TABLE {table} ({', '.join(columns)})")
        copy.executemany(
            f"INSERT INTO {table} VALUES ({', '.join('?' * len(columns))})", db.execute(f"SELECT * FROM {table}")
        )
    assert desk.state_hash(copy) == fast
