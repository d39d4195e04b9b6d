"""Tool-use domains: seeded data, tools with JSON schemas, a policy text, tasks with ground truth.

Built-ins: `retail` (orders, returns, exchanges) and `phone` (messages,
contacts, reminders on a device), registered under the `faultline.domains`
entry points. Third-party domains subclass `Domain` and are found by
`load_domain` under a name their package registers, or as
`"package.module:ClassName"` from folders named by `use_plugin_path`.
"""

from faultline.envs._catalog import DomainCatalog
from faultline.envs._databases import borrow_database, return_database
from faultline.envs._documents import Collection, Documents, document_tool, seed_documents
from faultline.envs._domain import Domain, tool
from faultline.envs._loader import known_domain, load_domain, use_plugin_path
from faultline.envs._schema import arguments_schema, check_arguments, schema_problem
from faultline.envs._types import (
    EARLY_STOP,
    ERROR_CATEGORIES,
    POLICY_VIOLATION,
    WRONG_ENTITY,
    WRONG_VALUE,
    Action,
    Budgets,
    Score,
    Task,
    ToolOutcome,
    ToolSpec,
)

__all__ = [
    "DomainCatalog",
    "EARLY_STOP",
    "ERROR_CATEGORIES",
    "POLICY_VIOLATION",
    "WRONG_ENTITY",
    "WRONG_VALUE",
    "Action",
    "Budgets",
    "Collection",
    "Documents",
    "Domain",
    "Score",
    "Task",
    "ToolOutcome",
    "ToolSpec",
    "arguments_schema",
    "borrow_database",
    "check_arguments",
    "document_tool",
    "known_domain",
    "load_domain",
    "return_database",
    "schema_problem",
    "seed_documents",
    "tool",
    "use_plugin_path",
]
