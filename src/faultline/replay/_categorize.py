"""The FAMA category of a wrong action, judged from evidence against the gold action it replaced.

The evidence is what an analyst could check by hand: the two actions side by side (tool, the
arguments that differ, whether a differing argument picks the record the call acts on), the
task's ground truth and `forbidden` writes, and the domain's own reading of its policy
(`Domain.policy_breach`) and data (`Domain.names_record`). The lists the simulator draws its
mistakes from (`Domain.mistake_candidates`) are never read, so agreeing with the simulator's
labels is a measurement, not a consequence of the code.
"""

from __future__ import annotations

from typing import Any

from faultline.envs import EARLY_STOP, POLICY_VIOLATION, WRONG_ENTITY, WRONG_VALUE, Action, Domain, Task


def categorize(wrong: dict[str, Any], right: dict[str, Any] | None, task: Task | None, domain: Domain | None) -> str:
    """The FAMA category of `wrong` in place of the gold action `right` ("" with no gold to judge by).

    In order: ending the conversation before the gold says so is an early stop; a final answer
    other than the gold one states a wrong value; a call the task forbids, that breaks a rule of
    the domain's policy, or that makes a later write of the ground truth before the lookups put
    first (a required step skipped) is a policy violation; another tool is a wrong entity (the
    request misread); the same tool on another existing record is a wrong entity, and the same
    record with other values a wrong value. It never reads `Domain.mistake_candidates`.
    """
    if right is None:
        return ""
    wrong_reply, right_reply = wrong.get("name") == "reply", right.get("name") == "reply"
    if wrong_reply and wrong.get("done") and not (right_reply and right.get("done")):
        return EARLY_STOP
    if wrong_reply and right_reply:
        return WRONG_VALUE  # the final answer stated something other than the facts
    action = _as_action(wrong)
    if action is not None and not wrong_reply and task is not None:
        if action in task.forbidden:
            return POLICY_VIOLATION
        if domain is not None and (domain.policy_breach(task, action) or _skipped_ahead(action, right, task, domain)):
            return POLICY_VIOLATION
    if wrong.get("name") != right.get("name"):
        return WRONG_ENTITY
    wrong_args, right_args = _arguments(wrong), _arguments(right)
    subject = _subject(str(right.get("name")), right_args, wrong_args, domain)
    if subject is not None and wrong_args.get(subject) != right_args.get(subject):
        moved = domain is None or domain.names_record(wrong_args.get(subject))
        return WRONG_ENTITY if moved else WRONG_VALUE  # another record, or a misread key that names none
    return WRONG_VALUE


def _arguments(action: dict[str, Any]) -> dict[str, Any]:
    arguments = action.get("arguments")
    return arguments if isinstance(arguments, dict) else {}


def _as_action(action: dict[str, Any]) -> Action | None:
    name = action.get("name")
    return Action(name=name, arguments=_arguments(action)) if isinstance(name, str) else None


def _skipped_ahead(action: Action, right: dict[str, Any], task: Task, domain: Domain) -> bool:
    """Whether `action` is a write the ground truth makes after `right`, a lookup, made in its place."""
    writes = {spec.name for spec in domain.tools() if spec.writes}
    if action.name not in writes or right.get("name") in writes:
        return False
    gold = [a.as_dict() for a in task.actions]
    at = next((i for i, a in enumerate(gold) if a == {"name": right.get("name"), "arguments": _arguments(right)}), None)
    return at is not None and action in task.actions[at + 1 :]


def _subject(tool: str, right: dict[str, Any], wrong: dict[str, Any], domain: Domain | None) -> str | None:
    """The argument that picks the record the call acts on: the first, in the tool's schema order,
    whose gold or wrong value names a record of the domain's data. Without a domain, the first
    argument named like an id."""
    if domain is None:
        return next((name for name in right if name == "id" or name.endswith("_id")), None)
    spec = next((s for s in domain.tools() if s.name == tool), None)
    declared = list(spec.parameters.get("properties", {})) if spec else []
    names = [*declared, *(n for n in right if n not in declared), *(n for n in wrong if n not in declared)]
    return next((n for n in names if domain.names_record(right.get(n)) or domain.names_record(wrong.get(n))), None)
