"""The library's data: members, books and loans, keyed by id."""

from __future__ import annotations

from typing import Any


def load_data() -> dict[str, dict[str, Any]]:
    """A fresh copy of the whole library (tools mutate it)."""
    return {
        "members": {
            "m-ann": {"name": "Ann Okafor", "email": "ann@example.org", "fines": 0.0, "holds": []},
            "m-bob": {"name": "Bob Lind", "email": "bob@example.org", "fines": 2.5, "holds": []},
            "m-cy": {"name": "Cy Park", "email": "cy@example.org", "fines": 40.0, "holds": []},
        },
        "books": {
            "b-dune": {"title": "Dune", "copies": 1, "cost": 18.0},
            "b-kells": {"title": "Book of Kells facsimile", "copies": 1, "cost": 1240.5},
            "b-emma": {"title": "Emma", "copies": 2, "cost": 12.0},
        },
        "loans": {
            "L1": {"member": "m-ann", "book": "b-emma", "due": "2024-06-01", "renewals": 0},
            "L2": {"member": "m-bob", "book": "b-kells", "due": "2024-05-20", "renewals": 1},
            "L7": {"member": "m-bob", "book": "b-dune", "due": "2024-06-03", "renewals": 0},
        },
    }
