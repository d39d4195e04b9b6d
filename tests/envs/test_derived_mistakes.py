"""A plugged-in domain with no mistake code of its own still gets decisive mistakes in every category,
derived from its gold actions, tool schemas and data (for the sim backend, a simulation)."""

from __future__ import annotations

import sys
from pathlib import Path
from random import Random

import pytest

from faultline.envs import POLICY_VIOLATION, WRONG_ENTITY, WRONG_VALUE, Action, Domain, load_domain, use_plugin_path

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


@pytest.fixture
def lendbench(monkeypatch: pytest.MonkeyPatch) -> Domain:
    monkeypatch.setattr(sys, "path", list(sys.path))
    use_plugin_path([EXAMPLES])
    return load_domain("lendbench_faultline:LendBench?split=test")


def made(domain: Domain, task: str, step: int, category: str) -> list[Action]:
    return domain._decisive_mistakes(domain.task(task), step, category)


def test_a_wrong_entity_is_another_key_of_the_same_table(lendbench: Domain) -> None:
    assert made(lendbench, "0", 1, WRONG_ENTITY) == [
        Action(
            name="place_hold",
            arguments={"member_id": "m-bob", "book_id": "b-dune", "pickup": {"branch": "north", "hold_days": 7}},
        ),
        Action(
            name="place_hold",
            arguments={"member_id": "m-cy", "book_id": "b-dune", "pickup": {"branch": "north", "hold_days": 7}},
        ),
        Action(
            name="place_hold",
            arguments={"member_id": "m-ann", "book_id": "b-emma", "pickup": {"branch": "north", "hold_days": 7}},
        ),
        Action(
            name="place_hold",
            arguments={"member_id": "m-ann", "book_id": "b-kells", "pickup": {"branch": "north", "hold_days": 7}},
        ),
    ]


def test_a_wrong_value_is_another_enum_member_or_the_next_number(lendbench: Domain) -> None:
    assert made(lendbench, "0", 1, WRONG_VALUE) == [
        Action(
            name="place_hold",
            arguments={"member_id": "m-ann", "book_id": "b-dune", "pickup": {"branch": "south", "hold_days": 7}},
        ),
        Action(
            name="place_hold",
            arguments={"member_id": "m-ann", "book_id": "b-dune", "pickup": {"branch": "north", "hold_days": 8}},
        ),
    ]


def test_a_policy_violation_is_the_next_write_made_before_the_lookup(lendbench: Domain) -> None:
    task = lendbench.task("0")
    assert made(lendbench, "0", 0, POLICY_VIOLATION) == [task.actions[1]]
    assert made(lendbench, "0", 1, POLICY_VIOLATION) == []  # a write step: nothing earlier to skip
    assert made(lendbench, "1", 0, POLICY_VIOLATION) == []  # reporting a loss twice fails: not decisive


def test_every_derived_mistake_breaks_its_task(lendbench: Domain) -> None:
    rng = Random(0)
    found = set()
    for task in lendbench.tasks():
        for step in range(len(task.actions)):
            for category in (WRONG_ENTITY, WRONG_VALUE, POLICY_VIOLATION):
                wrong = lendbench.mistake(task, step, category, rng)
                if wrong is None:
                    continue
                found.add(category)
                db = lendbench.open_database()
                for action in [*task.actions[:step], wrong, *task.actions[step + 1 :]]:
                    lendbench.call(db, action)
                assert lendbench.score(task, db, task.outputs).reward == 0.0, (task.id, step, category)
    assert found == {WRONG_ENTITY, WRONG_VALUE, POLICY_VIOLATION}
