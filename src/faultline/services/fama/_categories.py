"""FAMA's four error categories with their causes, the helpers' functional definitions, and which
helper answers which category.

The category ids are the domains' own (`faultline.envs.ERROR_CATEGORIES`), so that the controller,
attribution and the simulator speak of the same four things. Definitions and causes are written for
this project after the FAMA paper's Appendix E.
"""

from __future__ import annotations

from typing import Final

import msgspec

from faultline.core import memory_turns
from faultline.envs import EARLY_STOP, POLICY_VIOLATION, WRONG_ENTITY, WRONG_VALUE


class Category(msgspec.Struct, frozen=True, kw_only=True):
    """One error category as an analyst is told about it; causes are numbered from 1 in verdicts."""

    id: str
    title: str
    definition: str
    causes: tuple[str, ...]


CATEGORIES: Final[tuple[Category, ...]] = (
    Category(
        id=POLICY_VIOLATION,
        title="domain policy violation",
        definition="The agent took an action, or made a tool call, that the domain's written policy does not "
        "allow in the state it was in: it ignored, misread or misapplied a rule, and the environment's final "
        "state is wrong even where the agent's intent matched the user's goal.",
        causes=(
            "made a change the policy forbids",
            "left out a step the policy requires (a lookup, a check, a confirmation) before acting",
            "acted before the conditions the policy sets were met",
            "promised the user something the policy rules out",
            "used arguments that neither the user nor any tool output supplied",
        ),
    ),
    Category(
        id=WRONG_VALUE,
        title="incorrect retrieval from complex tool outputs",
        definition="The information the agent needed was in an earlier tool output, but it took the wrong "
        "piece of it: a value, id, count or item read wrongly from a long or nested output, so later calls "
        "or answers rest on a misreading.",
        causes=(
            "told the user something the tool output does not say",
            "counted or summed items of a tool output wrongly",
            "picked the wrong item among the options a tool output listed",
            "overlooked data in a tool output that should have changed the next action",
            "gave data of one entity to another one listed in the same output",
            "used a wrong value (id, price, date, option) copied from a tool output",
        ),
    ),
    Category(
        id=WRONG_ENTITY,
        title="contextual misinterpretation and hallucination",
        definition="The agent misunderstood what the user meant: it took the words literally and missed the "
        "intent, confused which order, item or account was meant, or invented a task the user did not ask "
        "for, and so chose a tool or a target the user did not want.",
        causes=(
            "understood the words but not the intent",
            "confused which entity (user, order, item, contact) the user meant",
            "applied the user's criteria or constraints wrongly",
            "took an action that is not what the user asked for",
        ),
    ),
    Category(
        id=EARLY_STOP,
        title="incomplete fulfilment or early stopping",
        definition="The user's request had several parts, and the agent ended, or stopped making progress, "
        "before all of them were done: it lost track of pending goals or closed the conversation early.",
        causes=(
            "did only some parts of a request with several",
            "gave up after a difficulty without trying another way",
            "got the user's go-ahead but never made the change",
            "ended the conversation with work still to do",
        ),
    ),
)
"""The four categories, in the order analysts run and tables list them."""

CATEGORY_IDS: Final[tuple[str, ...]] = tuple(c.id for c in CATEGORIES)
SHORT: Final[dict[str, str]] = {POLICY_VIOLATION: "DPV", WRONG_VALUE: "IR", WRONG_ENTITY: "CM", EARLY_STOP: "IFU"}
"""Column labels for tables and plots, as the paper abbreviates them."""

MAX_MEMORY_TURNS: Final = 10
"""The largest K the mitigation agent may give memory (`memory:K`, K from 1). The paper found the best K
depends on the domain (2 for airline, 6 for retail), so K is the mitigation agent's choice, within bounds."""

HELPER_FUNCTIONS: Final[dict[str, str]] = {
    "dce": "Domain Constraints Extractor: before each decision, lists the policy rules that bear on the next step.",
    "tsa": "Tool Suggestion: names the tool(s) that fit the next step and the argument values already known.",
    "tor": "Tool Output Reformulator: restates a long tool output as the few exact facts the next step needs.",
    "planner": "Planner: keeps a short plan of the steps still to do for the whole request.",
    "memory": "Memory (User Context Manager, memory:K): repeats the user's last K turns verbatim before each decision;"
    f" K from 1 to {MAX_MEMORY_TURNS}, more for long conversations (memory alone keeps {memory_turns('memory')}).",
    "verifier": "Verifier: reviews each proposed tool call and message to the user against policy and conversation,"
    " and sends wrong ones back.",
}
"""What each helper does, as the mitigation agent is told (docs/helpers.md has the details)."""

MITIGATION: Final[dict[str, tuple[str, ...]]] = {
    POLICY_VIOLATION: ("dce",),
    WRONG_VALUE: ("tor",),
    WRONG_ENTITY: ("memory:6",),
    EARLY_STOP: ("planner",),
}
"""The smallest helper set for each category, after the paper's pairings (DCE for policy, Memory for
misread intent, TOR for tool outputs, the Planner for unfinished multi-part requests); the offline
mitigation agent answers with it."""


def category(category_id: str) -> Category:
    """The category with this id; KeyError names an unknown one."""
    for found in CATEGORIES:
        if found.id == category_id:
            return found
    raise KeyError(category_id)
