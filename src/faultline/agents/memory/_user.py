"""Who a task's user is, and whether the task is about that user's tool preferences.

The memory keeps entries per user so that hard preference guiding can hide the
tools one user rated 0; these functions say how a domain's task names its user.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from faultline.envs import Task

PREFERENCE_TAG = "preference"
"""The task tag that marks personalised tool use: the user rates each tool the agent called."""

_ID_KEYS = ("user_id", "user")
_FACT_KEYS = ("user id", "email")
_NAME_KEYS = ("first name", "last name", "zip code")


def task_user(task: Task) -> str:
    """The user a task speaks for, "" when it names none.

    A benchmark's own id wins (`extra["user_id"]` or `extra["user"]`), then
    the facts the user identifies themselves with: a user id, an email, or
    first name, last name and zip code together.
    """
    for key in _ID_KEYS:
        value = task.extra.get(key)
        if isinstance(value, str | int) and str(value):
            return str(value)
    for key in _FACT_KEYS:
        if task.user_facts.get(key):
            return task.user_facts[key]
    if all(task.user_facts.get(key) for key in _NAME_KEYS):
        return " ".join(task.user_facts[key] for key in _NAME_KEYS)
    return ""


def is_preference_task(task: Task) -> bool:
    """Whether `task` is personalised tool use (tagged `PREFERENCE_TAG`)."""
    return PREFERENCE_TAG in task.tags


def preference_ratings(task: Task, called: Iterable[str]) -> dict[str, Literal[0, 1]]:
    """The user's rating of each tool the agent called: 1 for a tool the ground truth uses, else 0.

    As in PEToolBench, a rating says whether the user wanted that tool, not
    whether its arguments were right.
    """
    wanted = {action.name for action in task.actions}
    return {name: 1 if name in wanted else 0 for name in dict.fromkeys(called)}
