"""lendbench as a Faultline domain, with lendbench itself unchanged.

    faultline run --plugin-path docs/examples --domain "lendbench_faultline:LendBench?split=test" --tasks 4

Each class attribute and method below answers one question the benchmark
answers its own way; docs/domains.md walks through them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from typing import Any

from lendbench.data import load_data
from lendbench.tasks import POLICY, SPLITS, USER_PROMPT
from lendbench.tools import ALL_TOOLS

from faultline.agent import Action, Budgets, Domain, Task, ToolSpec, document_tool, seed_documents

WRITES = {"place_hold", "renew_loans", "report_lost"}
"""lendbench does not say which tools change data; the adapter does."""
TERMINAL = {"transfer_to_librarian"}


class LendBench(Domain):
    name = "lendbench"
    policy = POLICY
    policy_is_system_prompt = True  # the benchmark's reference agent sees the policy and nothing else
    failing_gold_steps = "ignore"  # gold step 0 of task 2 fails on purpose (a misremembered id)
    rollback_on_error = False  # lendbench keeps whatever a tool wrote before it answered "Error"
    hidden_instructions = True  # "You are Ann..." is for the user simulator, never for the agent
    budgets = Budgets(agent_steps=30)

    def __init__(self, split: str = "test") -> None:
        if split not in SPLITS:
            raise ValueError(f"lendbench has no split {split!r}; it has {', '.join(SPLITS)}")
        self.split = split

    def seed_database(self, db: sqlite3.Connection) -> None:
        seed_documents(db, load_data())

    def registered_tools(self) -> Iterable[tuple[ToolSpec, Callable[..., Any]]]:
        for cls in ALL_TOOLS:
            info = cls.get_info()
            name = info["function"]["name"]
            spec = ToolSpec.from_openai(info, writes=name in WRITES, terminal=name in TERMINAL)
            yield spec, document_tool(cls.invoke)

    def tasks(self) -> list[Task]:
        return [
            Task(
                id=str(index),
                instruction=task["instruction"],
                user_facts={"member id": task["user_id"]},
                actions=[Action(name=a["name"], arguments=a["kwargs"]) for a in task["actions"]],
                outputs=task["outputs"],
                extra={"user_id": task["user_id"], "annotator": task["annotator"]},
            )
            for index, task in enumerate(SPLITS[self.split])
        ]

    def output_error(self, output: Any) -> str:
        """lendbench's tools return "Error: <reason>"; the reason alone, since the agent shows it as `Error: ...`."""
        return output.removeprefix("Error:").strip() if isinstance(output, str) and output.startswith("Error:") else ""

    def output_told(self, output: str, told: str) -> bool:
        """lendbench's matcher: case and thousands separators do not count."""
        return output.replace(",", "").casefold() in told.replace(",", "").casefold()

    def user_prompt(self, task: Task) -> str:
        return USER_PROMPT.format(instruction=task.instruction)
