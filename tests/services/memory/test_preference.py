"""Hard preference guiding: a tool the user rated 0 leaves the tool list (the paper's rule), or, with
`min_zero_ratings=2` (Faultline's option), a tool the user rated 0 twice."""

from __future__ import annotations

from faultline.services.memory import (
    MIN_ZERO_RATINGS,
    MemoryEntry,
    ToolCallRecord,
    filter_tools,
    hidden_tools,
    tool_name,
    tool_ratings,
)


def rated(i: int, tool: str, rating: int) -> MemoryEntry:
    return MemoryEntry(
        id=f"e{i}",
        episode=f"ep{i}",
        domain="shopping",
        query=f"instruction {i}",
        feedback=rating,  # type: ignore[arg-type]
        calls=[ToolCallRecord(name=tool, arguments={"q": i})],
        user="u1",
    )


SCHEMAS = [
    {"type": "function", "function": {"name": "search_a", "parameters": {}}},
    {"type": "function", "function": {"name": "search_b", "parameters": {}}},
    {"name": "search_c", "parameters": {}},
]


def test_one_zero_rating_hides_a_tool_by_default() -> None:
    history = [rated(1, "search_a", 1), rated(2, "search_b", 0), rated(3, "search_c", 1)]
    assert MIN_ZERO_RATINGS == 1
    assert hidden_tools(history) == {"search_b"}
    assert [tool_name(t) for t in filter_tools(SCHEMAS, history)] == ["search_a", "search_c"]


def test_the_recurring_option_waits_for_a_second_zero() -> None:
    history = [rated(1, "search_a", 0), rated(2, "search_a", 0), rated(3, "search_b", 0), rated(4, "search_c", 1)]
    assert hidden_tools(history, min_zero_ratings=2) == {"search_a"}
    kept = filter_tools(SCHEMAS, history, min_zero_ratings=2)
    assert [tool_name(t) for t in kept] == ["search_b", "search_c"]


def test_positive_ratings_do_not_cancel_a_zero() -> None:
    history = [rated(1, "search_a", 1), rated(2, "search_a", 0), rated(3, "search_a", 1)]
    assert hidden_tools(history) == {"search_a"}
    history = [*history, rated(4, "search_a", 0)]
    assert hidden_tools(history, min_zero_ratings=2) == {"search_a"}


def test_explicit_ratings_win_over_feedback() -> None:
    entry = MemoryEntry(
        id="e9",
        episode="ep9",
        domain="shopping",
        query="find shoes and pay",
        feedback=0,
        calls=[ToolCallRecord(name="search_a"), ToolCallRecord(name="pay")],
        tool_ratings={"search_a": 0, "pay": 1},
    )
    assert tool_ratings(entry) == {"search_a": 0, "pay": 1}
    assert hidden_tools([entry]) == {"search_a"}


def test_a_failed_run_with_several_tools_rates_none() -> None:
    entry = MemoryEntry(
        id="e8",
        episode="ep8",
        domain="shopping",
        query="find shoes and pay",
        feedback=0,
        calls=[ToolCallRecord(name="search_a"), ToolCallRecord(name="pay"), ToolCallRecord(name="search_a")],
    )
    assert tool_ratings(entry) == {}
    assert hidden_tools([entry, entry]) == set()


def test_repeated_calls_of_one_tool_count_once_per_entry() -> None:
    entry = MemoryEntry(
        id="e7",
        episode="ep7",
        domain="shopping",
        query="two searches",
        feedback=0,
        calls=[ToolCallRecord(name="search_b"), ToolCallRecord(name="search_b")],
    )
    assert tool_ratings(entry) == {"search_b": 0}
    assert hidden_tools([entry], min_zero_ratings=2) == set()
