"""The public surface of `faultline.envs` and its built-in domains is pinned."""

from __future__ import annotations

import faultline.envs as envs
import faultline.envs.phone as phone
import faultline.envs.retail as retail


def test_the_public_names_are_exactly_these() -> None:
    assert sorted(envs.__all__) == sorted(
        [
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
            "DomainCatalog",
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
    )
    assert sorted(retail.__all__) == ["CANCEL_REASONS", "POLICY", "Retail"]
    assert sorted(phone.__all__) == ["CAPACITY", "POLICY", "Phone"]


def test_every_public_name_is_defined_and_owned_by_the_package() -> None:
    for package in (envs, retail, phone):
        for name in package.__all__:
            value = getattr(package, name)
            module = getattr(value, "__module__", package.__name__)
            assert module.startswith("faultline.envs"), name
