"""The structured reflection form: `<reflect>`, then `<call>` or `<final>`.

`parse_turn` splits any answer in that form into its three parts (what the reward in
`faultline.report` scores); a verdict is the verifier helper's use of the form. The verifier
reads its model's answer with `parse_verdict`; the offline simulator writes its answers with
`render_verdict`, so both speak the one form.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

import msgspec

from faultline._errors import AnswerFormatError

PASS: Literal["PASS"] = "PASS"
RECHECK: Literal["RECHECK"] = "RECHECK"

_PART = {tag: re.compile(rf"<{tag}>(.*?)</{tag}>", re.DOTALL) for tag in ("reflect", "call", "final")}


class Turn(msgspec.Struct, frozen=True, kw_only=True):
    """One answer split into its parts, each possibly empty: the first `<reflect>` and `<final>`
    (stripped), and the calls of every `<call>` block. A block that cannot be read adds no call;
    `unreadable` says why, so a malformed call reads as a missing one."""

    reflection: str = ""
    calls: list[dict[str, Any]] = []
    final: str = ""
    unreadable: list[str] = []


class Verdict(msgspec.Struct, frozen=True, kw_only=True):
    """PASS, or RECHECK with the corrected call (`{"name", "arguments"}`) or the message to send instead."""

    verdict: Literal["PASS", "RECHECK"]
    reflection: str
    call: dict[str, Any] = {}
    final: str = ""

    def fix(self) -> str:
        """The correction in words, for the tool agent's notes."""
        if self.call:
            return f"call {self.call['name']}({json.dumps(self.call.get('arguments', {}), sort_keys=True)})"
        return f"tell the user: {self.final}" if self.final else ""


def parse_turn(text: str) -> Turn:
    """Read any answer in the form; it never fails, an unreadable `<call>` is noted in `unreadable`."""
    reflect, final = _PART["reflect"].search(text), _PART["final"].search(text)
    calls: list[dict[str, Any]] = []
    unreadable: list[str] = []
    for block in _PART["call"].finditer(text):
        try:
            calls.extend(_calls(block.group(1)))
        except AnswerFormatError as exc:
            unreadable.append(str(exc))
    return Turn(
        reflection=reflect.group(1).strip() if reflect else "",
        calls=calls,
        final=final.group(1).strip() if final else "",
        unreadable=unreadable,
    )


def _calls(block: str) -> list[dict[str, Any]]:
    """The calls of one `<call>` block: a JSON object or a list of them, each a name and its arguments."""
    try:
        value = json.loads(block)
    except ValueError as exc:
        raise AnswerFormatError(f"<call> is not JSON ({exc})") from None
    items = [value] if isinstance(value, dict) else value
    if not isinstance(items, list) or not all(
        isinstance(item, dict) and isinstance(item.get("name"), str) and isinstance(item.get("arguments", {}), dict)
        for item in items
    ):
        raise AnswerFormatError('<call> must hold {"name": ..., "arguments": {...}} objects')
    return [{"name": item["name"], "arguments": item.get("arguments", {})} for item in items]


def parse_verdict(text: str) -> Verdict:
    """Read a verdict; AnswerFormatError names the first part that is missing or wrong."""
    reflect = _PART["reflect"].search(text)
    if reflect is None:
        raise AnswerFormatError("no <reflect>...</reflect>")
    head, _, reason = reflect.group(1).strip().partition(":")
    word = head.strip().strip("*").upper()
    if word not in (PASS, RECHECK):
        raise AnswerFormatError(f"<reflect> starts with {head.strip()[:20]!r}, not PASS: or RECHECK:")
    verdict = Verdict(verdict=word, reflection=reason.strip())
    if word == PASS:
        return verdict
    call, final = _PART["call"].search(text), _PART["final"].search(text)
    if final is not None and call is None:
        return msgspec.structs.replace(verdict, final=final.group(1).strip())
    if call is None:
        raise AnswerFormatError("RECHECK without a <call> or a <final>")
    calls = _calls(call.group(1))
    if len(calls) != 1:
        raise AnswerFormatError('<call> must hold one {"name": ..., "arguments": {...}}')
    return msgspec.structs.replace(verdict, call=calls[0])


def render_turn(reflection: str, call: dict[str, Any] | None = None, final: str = "") -> str:
    """An answer in the structured form: the reflection, then the call or else the final message, if any."""
    text = f"<reflect>{reflection}</reflect>"
    if call:
        text += f"\n<call>{json.dumps([call], sort_keys=True)}</call>"
    elif final:
        text += f"\n<final>{final}</final>"
    return text


def render_verdict(verdict: Verdict) -> str:
    """The answer in the structured form (what the simulated verifier says)."""
    return render_turn(f"{verdict.verdict}: {verdict.reflection}", verdict.call, verdict.final)
