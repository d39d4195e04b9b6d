"""Seeded databases reused across episodes: an episode borrows one and it comes back rolled back.

Copying a domain's seeded data into a fresh connection costs about 1.3 ms for
retail, once per episode; for replay with `--reexecute-tools` that was a fifth of
the time. A borrowed connection runs the whole episode inside one transaction
(each tool call a savepoint within it), so rolling it back restores the seeded
data exactly. A connection comes back to the pool only if it is still in that
transaction and its state hash is the seeded one; anything else is closed.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Hashable

from faultline.envs._domain import Domain

KEEP = 64
"""Connections kept per domain: about the episodes one worker runs at once."""

_lock = threading.Lock()
_pools: dict[Hashable, list[sqlite3.Connection]] = {}
_seeded: dict[Hashable, str] = {}


def _key(domain: Domain) -> Hashable:
    return (type(domain), domain.data_key)


def borrow_database(domain: Domain) -> sqlite3.Connection:
    """A connection holding the domain's seeded data, in a transaction; give it back with `return_database`."""
    key = _key(domain)
    with _lock:
        pool = _pools.get(key)
        db = pool.pop() if pool else None
    if db is None:
        db = domain.open_database()
        with _lock:
            if key not in _seeded:
                _seeded[key] = domain.state_hash(db)
    db.execute("BEGIN")
    return db


def return_database(domain: Domain, db: sqlite3.Connection) -> None:
    """Roll the episode back and keep the connection for the next one, or close it if it cannot be trusted."""
    key = _key(domain)
    try:
        if not db.in_transaction:  # something committed: the seeded data is gone
            db.close()
            return
        db.execute("ROLLBACK")
        clean = domain.state_hash(db) == _seeded.get(key)
    except sqlite3.Error:
        db.close()
        return
    with _lock:
        pool = _pools.setdefault(key, [])
        if clean and len(pool) < KEEP:
            pool.append(db)
            return
    db.close()
