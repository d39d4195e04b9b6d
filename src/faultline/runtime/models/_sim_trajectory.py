"""The sim judge's analysts in the FAMA paper's mode: findings read off the trajectory alone.

A SIMULATION, never a result about models. A trajectory analyst is shown the numbered turns (user,
agent, call, result), the outcome (not the grader's cause, written against the ground truth), and who ended the
conversation. This stand-in reads only those, by a few fixed rules, and names the earliest turn
that shows its category:

    policy_violation  a tool refused a call by one of its rules (an error that says "only", "must",
                      "first", "before", "not allowed" or "policy"); recovered when the same tool
                      succeeded later
    wrong_value       a value in a call or an agent turn one character off a value the user or a tool
                      output gave earlier, that itself appears nowhere earlier
    wrong_entity      a call on an id a tool output listed, of the same shape as one the user named but
                      not one the user named; or the user saying the agent got them wrong
    early_stop        the same call failing again and again and never succeeding; a go-ahead from the
                      user that no call followed; the agent ending the conversation saying it could not
                      finish; a turn or time limit ending it

Many of the simulator's own mistakes leave no such trace (a wrong item the tool accepts, a write the
tool does not forbid), so this stand-in misses them: it shows what reading the trajectory by these
rules finds, nothing more.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

from faultline.envs import POLICY_VIOLATION, WRONG_ENTITY, WRONG_VALUE


class Finding(NamedTuple):
    """What one analyst found: the turn, the number of the cause, whether it was put right, and why."""

    turn: int
    cause: int
    recovered: bool
    rationale: str


_VALUE = re.compile(r"#?[\w@.-]*\d[\w@.-]*")
_RULE_WORDS = ("only ", "must ", "first", "before", "not allowed", "policy")
_COMPLAINTS = ("to repeat", "not what i", "i said", "i meant", "that's wrong", "that is wrong", "misunderstood")
_GO_AHEAD = ("go ahead", "please proceed", "i confirm")
_GIVING_UP = ("what i can", "unable", "cannot", "can't", "not able", "couldn't")


def read_trajectory(category: str, shown: dict[str, Any]) -> Finding | None:
    """The earliest sign of `category` (one of the four; early_stop last) in what a trajectory analyst is
    shown; None when there is none."""
    turns = [(str(t.get("role", "")), str(t.get("text", ""))) for t in shown.get("turns") or []]
    if category == POLICY_VIOLATION:
        found = _refused_by_rule(turns)
    elif category == WRONG_VALUE:
        found = _misread_value(turns)
    elif category == WRONG_ENTITY:
        found = _other_entity(turns)
    else:
        found = _stopped(turns, str(shown.get("ended_by", "")))
    return min(found, key=lambda f: f.turn) if found else None


def _values(text: str) -> set[str]:
    """The ids, numbers and codes in a text: tokens with a digit, three characters or more."""
    return {v for v in (m.strip(".-") for m in _VALUE.findall(text)) if len(v) >= 3}


def _one_off(value: str, known: set[str]) -> str | None:
    """A known value that differs from `value` in exactly one character (the first in sorted order)."""
    same_length = (k for k in sorted(known) if len(k) == len(value))
    return next((k for k in same_length if sum(a != b for a, b in zip(k, value, strict=True)) == 1), None)


def _shape(value: str) -> str:
    return re.sub(r"\d", "0", value)


def _tool(call: str) -> str:
    return call.split("(", 1)[0]


def _results(turns: list[tuple[str, str]]) -> list[tuple[int, int, str]]:
    """(call turn, result turn, result text) for each result, paired with the earliest call still open."""
    open_calls: list[int] = []
    paired = []
    for i, (role, text) in enumerate(turns):
        if role == "call":
            open_calls.append(i)
        elif role == "result" and open_calls:
            paired.append((open_calls.pop(0), i, text))
    return paired


def _refused_by_rule(turns: list[tuple[str, str]]) -> list[Finding]:
    paired = _results(turns)
    found = []
    for call, _, text in paired:
        error = text.removeprefix("Error: ")
        if error != text and any(word in error.casefold() for word in _RULE_WORDS):
            tool = _tool(turns[call][1])
            later = any(c > call and _tool(turns[c][1]) == tool and not t.startswith("Error: ") for c, _, t in paired)
            found.append(Finding(call, 3, later, f"the tool refused {turns[call][1]}: {error}"))
    return found


def _misread_value(turns: list[tuple[str, str]]) -> list[Finding]:
    given: set[str] = set()  # what the user and the tools said
    seen: set[str] = set()  # every value so far
    found = []
    for i, (role, text) in enumerate(turns):
        values = _values(text)
        if role in ("call", "agent"):
            for value in sorted(values - seen):
                near = _one_off(value, given)
                if near is not None:
                    cause, where = (6, "a call uses") if role == "call" else (1, "the agent says")
                    found.append(Finding(i, cause, False, f"{where} {value} where the conversation had {near}"))
        else:
            given |= values
        seen |= values
    return found


def _other_entity(turns: list[tuple[str, str]]) -> list[Finding]:
    named: set[str] = set()  # the user's
    listed: set[str] = set()  # the tools'
    found = []
    for i, (role, text) in enumerate(turns):
        lowered = text.casefold()
        if role == "user" and any(c in lowered for c in _COMPLAINTS):
            before = next((j for j in range(i - 1, -1, -1) if turns[j][0] != "user"), i)
            found.append(Finding(before, 1, False, f"the user answered: {text[:120]}"))
        if role == "user":
            named |= _values(text)
        elif role == "result":
            listed |= _values(text)
        elif role == "call":
            shapes = {_shape(n): n for n in sorted(named, reverse=True)}  # the first of a shape wins
            for value in sorted(_values(text) & (listed - named)):
                if _shape(value) in shapes and _one_off(value, named) is None:
                    found.append(
                        Finding(i, 2, False, f"the user named {shapes[_shape(value)]}; the call acts on {value}")
                    )
    return found


def _stopped(turns: list[tuple[str, str]], ended_by: str) -> list[Finding]:
    found = []
    tries: dict[str, list[tuple[int, bool]]] = {}
    for call, _, text in _results(turns):
        tries.setdefault(turns[call][1], []).append((call, text.startswith("Error: ")))
    for same, made in tries.items():
        if len(made) >= 2 and all(failed for _, failed in made):
            found.append(Finding(made[-1][0], 2, False, f"{same} failed {len(made)} times; no other way was tried"))
    last_call = max((i for i, (role, _) in enumerate(turns) if role == "call"), default=-1)
    for i, (role, text) in enumerate(turns):
        lowered = text.casefold()
        go_ahead = lowered.startswith("yes") or any(g in lowered for g in _GO_AHEAD)
        if role == "user" and go_ahead and i > last_call:
            found.append(Finding(i, 3, False, "the user said go ahead and no call followed"))
    last = next((i for i in range(len(turns) - 1, -1, -1) if turns[i][0] == "agent"), None)
    if ended_by == "agent" and last is not None and any(g in turns[last][1].casefold() for g in _GIVING_UP):
        found.append(Finding(last, 4, False, f"the agent closed the conversation unfinished: {turns[last][1][:120]}"))
    if ended_by == "limit" and turns:
        found.append(Finding(len(turns) - 1, 1, False, "a turn or time limit ended the conversation unfinished"))
    return found
