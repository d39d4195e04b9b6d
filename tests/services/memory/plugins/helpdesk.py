"""A preference domain for the memory's tests: two trackers that do the same thing, and users who care which.

Loaded by `faultline run --plugin-path` in the workers, so it lives outside the test package.
"""

from __future__ import annotations

import sqlite3

from faultline.agent import Action, Domain, Task, tool
from faultline.envs import WRONG_ENTITY

TITLE = ("string", "what the ticket is about")


def _ticket(task_id: str, user: str, title: str) -> Task:
    """A request the user wants in Jira; opening it in Zendesk serves it too, but not the way they like."""
    return Task(
        id=task_id,
        instruction=f"Open a ticket: {title}.",
        actions=[Action(name="create_jira_issue", arguments={"title": title})],
        tags=["preference"],
        extra={"user_id": user},
    )


class Helpdesk(Domain):
    name = "helpdesk"
    policy = "Open tickets for the user. Both trackers are available; use the one the user prefers."

    def seed_database(self, db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE tickets (id INTEGER PRIMARY KEY, tracker TEXT NOT NULL, title TEXT NOT NULL)")

    @tool("Open a ticket in Zendesk.", writes=True, title=TITLE)
    def create_zendesk_ticket(self, db: sqlite3.Connection, title: str) -> str:
        db.execute("INSERT INTO tickets (tracker, title) VALUES ('zendesk', ?)", (title,))
        return "opened"

    @tool("Open an issue in Jira.", writes=True, title=TITLE)
    def create_jira_issue(self, db: sqlite3.Connection, title: str) -> str:
        db.execute("INSERT INTO tickets (tracker, title) VALUES ('jira', ?)", (title,))
        return "opened"

    def tasks(self) -> list[Task]:
        return [
            _ticket("ann-0", "ann", "the login page is down"),
            _ticket("ann-1", "ann", "the login page is slow"),
            _ticket("ben-0", "ben", "the login page is blank"),
        ]

    def mistake_candidates(self, task: Task, step: int, category: str) -> list[Action]:
        """The other tracker: the wrong choice for this user."""
        if category != WRONG_ENTITY or step >= len(task.actions):
            return []
        return [Action(name="create_zendesk_ticket", arguments=dict(task.actions[step].arguments))]
