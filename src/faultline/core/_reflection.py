"""A verdict in the structured reflection form: `<reflect>`, then `<call>` or `<final>`.

The verifier helper reads its model's answer with `parse_verdict`; the offline simulator
writes its answers with `render_verdict`, so both speak the one form.
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
    try:
        calls = json.loads(call.group(1))
    except ValueError as exc:
        raise AnswerFormatError(f"<call> is not JSON ({exc})") from None
    if isinstance(calls, dict):
        calls = [calls]
    if not (
        isinstance(calls, list)
        and len(calls) == 1
        and isinstance(calls[0], dict)
        and isinstance(calls[0].get("name"), str)
        and isinstance(calls[0].get("arguments", {}), dict)
    ):
        raise AnswerFormatError('<call> must hold one {"name": ..., "arguments": {...}}')
    return msgspec.structs.replace(verdict, call={"name": calls[0]["name"], "arguments": calls[0].get("arguments", {})})


def render_verdict(verdict: Verdict) -> str:
    """The answer in the structured form (what the simulated verifier says)."""
    text = f"<reflect>{verdict.verdict}: {verdict.reflection}</reflect>"
    if verdict.call:
        text += f"\n<call>{json.dumps([verdict.call], sort_keys=True)}</call>"
    elif verdict.final:
        text += f"\n<final>{verdict.final}</final>"
    return text
