"""What scoring an episode costs a domain: the incremental state digest against a full recount.

For each domain, one episode's environment work is timed in-process: open a
fresh database, run the task's ground-truth calls, score (state digest and
output matching). The same final state is then digested in full, as a domain
that hashed its state its own way would at every score. Domains: the
built-in retail store (SQL tables) and a benchmark-style document domain of
about 2 MB (dict data written back by `document_tool`).

Target: scoring stays within a few milliseconds, whatever the size of the data.

    python -m bench.domain_digest [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from faultline.envs import Action, Domain, Task, ToolSpec, document_tool, load_domain, seed_documents

TARGET_MS = 5.0
REPEATS = 20


def add_item(data: dict[str, Any], order: str) -> str:
    data["orders"][order]["items"].append({"sku": "extra", "qty": 1})
    return "ok"


class Orders(Domain):
    """5,000 orders as JSON documents, about 2 MB; a task changes two of them."""

    name = "orders"

    def seed_database(self, db: sqlite3.Connection) -> None:
        items = [{"sku": f"s{j}", "qty": j} for j in range(8)]
        orders = {f"o{i:05d}": {"status": "open", "items": items, "note": "n" * 120} for i in range(5000)}
        seed_documents(db, {"orders": orders})

    def tasks(self) -> list[Task]:
        actions = [Action(name="add_item", arguments={"order": o}) for o in ("o00042", "o04242")]
        return [Task(id="two-orders", instruction="Add an item to two orders.", actions=actions)]

    def registered_tools(self) -> Iterable[tuple[ToolSpec, Callable[..., Any]]]:
        spec = ToolSpec(name="add_item", description="Add an item.", parameters={"type": "object"}, writes=True)
        yield spec, document_tool(add_item)


def episode_ms(domain: Domain, tasks: list[Task]) -> tuple[float, float]:
    """Median ms per task of (open + gold calls + score) and of a full digest of the final state."""
    for task in tasks:
        domain.expected_hash(task)
    episode, full = [], []
    for _ in range(REPEATS):
        for task in tasks:
            started = time.perf_counter()
            db = domain.open_database()
            for action in task.actions:
                domain.call(db, action)
            assert domain.score(task, db, list(task.outputs)).reward == 1.0, task.id
            episode.append(time.perf_counter() - started)
            untracked = sqlite3.connect(":memory:")
            db.backup(untracked)
            shadows = "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE '\\_fl\\_%' ESCAPE '\\'"
            for (name,) in untracked.execute(shadows).fetchall():
                untracked.execute(f'DROP TABLE "{name}"')
            started = time.perf_counter()
            assert domain.state_hash(untracked) == domain.expected_hash(task)
            full.append(time.perf_counter() - started)
    return statistics.median(episode) * 1000, statistics.median(full) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rows = []
    for label, domain in (("retail (SQL tables)", load_domain("retail")), ("orders (2 MB of documents)", Orders())):
        episode, full = episode_ms(domain, domain.tasks())
        rows.append({"domain": label, "episode_ms": episode, "full_digest_ms": full})
    table = Table(title="one episode's environment work, in-process (no model, no bus)")
    for column in ("domain", "open + calls + score", "full recount instead", f"target < {TARGET_MS:g} ms"):
        table.add_column(column)
    for row in rows:
        verdict = "PASS" if row["episode_ms"] < TARGET_MS else "MISS"
        table.add_row(row["domain"], f"{row['episode_ms']:.2f} ms", f"{row['full_digest_ms']:.1f} ms", verdict)
    Console().print(table)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
