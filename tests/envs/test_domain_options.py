"""What a domain can choose: failing gold steps, matching, error meaning, prompts, budgets, parameters, loading."""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from faultline._errors import DomainError, PluginError
from faultline.agents import EpisodeSpec, ToolAgent
from faultline.core import AgentHarness, UserTurn
from faultline.envs import Action, Budgets, Domain, Task, load_domain, tool, use_plugin_path
from faultline.runtime.models import SimBackend

GOLD = Action(name="stamp", arguments={"tags": {"who": "ann"}})


class Notes(Domain):
    """A notes table, a tool that changes its own arguments, and one that answers errors as strings."""

    name = "notes"
    policy = "You are the notes desk. Do only what is asked."
    budgets = Budgets(user_turns=5, agent_steps=30)

    def __init__(self, split: str = "train") -> None:
        if split not in ("train", "test"):
            raise ValueError(f"unknown split {split!r}")
        self.split = split

    def seed_database(self, db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")

    def tasks(self) -> list[Task]:
        tasks = [
            Task(id="0", instruction="Stamp a note for Ann.", actions=[GOLD], extra={"user_id": "ann"}),
            Task(
                id="1",
                instruction="Write 'hi', then try a bad note.",
                actions=[Action(name="write", arguments={"text": "hi"}), Action(name="write", arguments={"text": ""})],
                outputs=["1,093.34"],
            ),
        ]
        return tasks if self.split == "train" else tasks[1:]

    @tool("Stamp a note; fills in defaults.", writes=True, tags=("object", "Labels."))
    def stamp(self, db: sqlite3.Connection, tags: dict[str, Any]) -> dict[str, Any]:
        tags.setdefault("stamped", True)
        db.execute("INSERT INTO notes (text) VALUES (?)", (str(sorted(tags)),))
        return tags

    @tool("Write a note; an empty one is refused with an error string.", writes=True, text=("string", "The note."))
    def write(self, db: sqlite3.Connection, text: str) -> str:
        db.execute("INSERT INTO notes (text) VALUES (?)", (text,))
        return "Error: empty note" if not text else "ok"

    def output_error(self, output: Any) -> str:
        return output if isinstance(output, str) and output.startswith("Error") else ""


class Lenient(Notes):
    """The benchmark's way: gold steps may fail, errors keep their writes, numbers match without commas."""

    failing_gold_steps = "ignore"
    rollback_on_error = False
    policy_is_system_prompt = True

    def output_told(self, output: str, told: str) -> bool:
        return output.replace(",", "") in told.replace(",", "")


def notes_in(db: sqlite3.Connection) -> list[str]:
    return [text for (text,) in db.execute("SELECT text FROM notes ORDER BY id")]


def test_a_tool_that_changes_its_arguments_leaves_the_ground_truth_alone() -> None:
    domain = Notes()
    task = domain.task("0")
    before = domain.expected_hash(task)
    assert domain.call(domain.open_database(), task.actions[0]).output == {"who": "ann", "stamped": True}
    assert task.actions[0] == GOLD and GOLD.arguments == {"tags": {"who": "ann"}}
    domain._memo().expected.clear()
    assert domain.expected_hash(task) == before


def test_an_error_string_is_an_error_and_the_domain_says_whether_it_rolls_back() -> None:
    for domain, kept in ((Notes(), []), (Lenient(), [""])):
        db = domain.open_database()
        outcome = domain.call(db, Action(name="write", arguments={"text": ""}))
        assert (outcome.error, outcome.output) == ("Error: empty note", None)
        assert notes_in(db) == kept


def test_a_failing_gold_step_breaks_the_task_or_is_scored_past_as_the_domain_chooses() -> None:
    with pytest.raises(DomainError, match=r"ground-truth step 1 \(write\) fails: Error: empty note"):
        Notes().expected_hash(Notes().task("1"))
    lenient = Lenient()
    task = lenient.task("1")
    db = lenient.open_database()
    for action in task.actions:
        lenient.call(db, action)
    assert notes_in(db) == ["hi", ""]
    assert lenient.score(task, db, ["The total is 1093.34."]).reward == 1.0


def test_the_domain_matcher_decides_what_counts_as_told() -> None:
    domain = Lenient()
    task = domain.task("1")
    db = domain.open_database()
    for action in task.actions:
        domain.call(db, action)
    assert domain.score(task, db, ["It is 1,093.34."]).reward == 1.0
    assert domain.score(task, db, ["It is 1093.35."]).missing_outputs == ["1,093.34"]
    assert Notes.output_told(Notes(), "1,093.34", "THE TOTAL: 1,093.34") is True
    assert Notes.output_told(Notes(), "1,093.34", "1093.34") is False


async def test_the_policy_is_the_whole_system_prompt_only_when_the_domain_says_so() -> None:
    for spec, whole in (
        ("tests.envs.test_domain_options:Notes", False),
        ("tests.envs.test_domain_options:Lenient", True),
    ):
        agent = AgentHarness(ToolAgent(), backend=SimBackend())
        await agent.deliver(EpisodeSpec(domain=spec, task="0").start())
        await agent.deliver(UserTurn(text="Hello"), sender="user")
        [request] = [r for r in agent.recordings if r.call == "llm"]
        system = request.request.messages[0].content
        assert (system == Notes.policy) is whole
        assert Notes.policy in system


def test_parameters_after_the_class_reach_its_constructor_and_tasks_keep_extra_fields() -> None:
    train = load_domain("tests.envs.test_domain_options:Notes")
    test = load_domain("tests.envs.test_domain_options:Notes?split=test")
    assert [t.id for t in train.tasks()] == ["0", "1"] and [t.id for t in test.tasks()] == ["1"]
    assert train.task("0").extra == {"user_id": "ann"}
    assert load_domain("tests.envs.test_domain_options:Notes?split=test") is test
    assert test.budgets == Budgets(user_turns=5, agent_steps=30)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "tests.envs.test_domain_options:Notes?split=dev",
            "cannot load domain .*: the class refused its parameters: .*unknown split 'dev'",
        ),
        ("tests.envs.test_domain_options:Notes?colour=red", "the class refused its parameters: .*colour"),
        ("tests.envs.test_domain_options:Notes?split", "parameters must look like"),
    ],
)
def test_parameters_the_domain_refuses_are_one_line(spec: str, message: str) -> None:
    with pytest.raises(PluginError, match=message):
        load_domain(spec)


def test_a_plugin_folder_makes_a_domain_importable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "tiny_plugin_domain.py").write_text(
        "from faultline.envs import Domain, Task\n"
        "class Tiny(Domain):\n"
        "    def seed_database(self, db): db.execute('CREATE TABLE t (x)')\n"
        "    def tasks(self): return [Task(id='a', instruction='nothing')]\n"
    )
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(PluginError, match="cannot load domain 'tiny_plugin_domain:Tiny': no module named"):
        load_domain("tiny_plugin_domain:Tiny")
    use_plugin_path([tmp_path])
    assert [t.id for t in load_domain("tiny_plugin_domain:Tiny").tasks()] == ["a"]


class Profiles(Domain):
    """Rows with a column the benchmark ignores and JSON text whose key order it ignores."""

    name = "profiles"
    hashed_columns = {"profiles": ("id", "prefs")}

    def seed_database(self, db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE profiles (id TEXT PRIMARY KEY, prefs TEXT, seen_at REAL)")
        db.execute("""INSERT INTO profiles VALUES ('ann', '{"lang": "en", "tz": "UTC"}', 1.0)""")

    def tasks(self) -> list[Task]:
        return []

    def canonical_row(self, table: str, row: dict[str, Any]) -> Any:
        return {**row, "prefs": json.loads(str(row["prefs"]))}

    @tool(
        "Write a profile.", writes=True, user=("string", "Who."), prefs=("string", "JSON."), seen_at=("number", "When.")
    )
    def save(self, db: sqlite3.Connection, user: str, prefs: str, seen_at: float) -> str:
        db.execute("INSERT OR REPLACE INTO profiles VALUES (?, ?, ?)", (user, prefs, seen_at))
        return "ok"


def test_a_domain_chooses_the_columns_and_canonical_rows_of_its_state_hash_and_keeps_it_incremental() -> None:
    profiles = Profiles()
    db = profiles.open_database()
    seeded = profiles.state_hash(db)
    touched = Action(name="save", arguments={"user": "ann", "prefs": '{"tz": "UTC", "lang": "en"}', "seen_at": 9.0})
    assert profiles.call(db, touched).ok
    assert profiles.state_hash(db) == seeded  # only an ignored column and key order changed
    changed = Action(name="save", arguments={"user": "bo", "prefs": '{"lang": "fr"}', "seen_at": 2.0})
    assert profiles.call(db, changed).ok
    incremental = profiles.state_hash(db)
    assert incremental != seeded
    assert db.execute("SELECT count(*) FROM _fl_delta_profiles").fetchone()[0] > 0  # digested from the change log
    whole = sqlite3.connect(":memory:")
    db.backup(whole)
    whole.execute("DROP TABLE _fl_meta")  # no change log to start from: a full digest
    assert profiles.state_hash(whole) == incremental
