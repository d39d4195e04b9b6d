"""An episode's database is borrowed and comes back rolled back to the seeded data, or is not reused."""

from __future__ import annotations

import sqlite3

import pytest

from faultline.envs import borrow_database, load_domain, return_database


def test_a_returned_database_is_reused_holding_the_seeded_data_again() -> None:
    retail = load_domain("retail")
    task = next(t for t in retail.tasks() if len(t.actions) >= 2)
    seeded = retail.state_hash(retail.open_database())
    db = borrow_database(retail)
    for action in task.actions:
        assert retail.call(db, action).ok
    assert retail.state_hash(db) == retail.expected_hash(task) != seeded
    return_database(retail, db)
    again = borrow_database(retail)
    assert again is db
    assert retail.state_hash(again) == seeded
    return_database(retail, again)


def test_databases_borrowed_at_once_are_independent() -> None:
    retail = load_domain("retail")
    task = next(t for t in retail.tasks() if t.actions)
    first, second = borrow_database(retail), borrow_database(retail)
    assert first is not second
    assert retail.call(first, task.actions[0]).ok
    assert retail.state_hash(second) == retail.state_hash(retail.open_database())
    return_database(retail, first)
    return_database(retail, second)


def test_a_database_whose_episode_committed_is_closed_not_reused() -> None:
    retail = load_domain("retail")
    db = borrow_database(retail)
    db.execute("COMMIT")
    return_database(retail, db)
    again = borrow_database(retail)
    assert again is not db
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        db.execute("SELECT 1")
    return_database(retail, again)
