"""Reading the structured reflection form: any turn (`parse_turn`) and the verifier's verdicts."""

from __future__ import annotations

import pytest

from faultline import AnswerFormatError
from faultline.core import RECHECK, Turn, parse_turn, parse_verdict


def test_a_turn_gathers_the_calls_of_every_block() -> None:
    turn = parse_turn(
        "<reflect> wrong id </reflect>\n"
        '<call>[{"name": "a", "arguments": {"x": 1}}, {"name": "b"}]</call>\n'
        '<call>{"name": "c", "arguments": {}}</call>\n<final> done </final>'
    )
    assert turn == Turn(
        reflection="wrong id",
        calls=[{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}}, {"name": "c", "arguments": {}}],
        final="done",
    )


def test_an_unreadable_block_adds_no_call_and_says_why() -> None:
    turn = parse_turn('<call>[{"name": "a"}]</call><call>[{"tool": "b"}]</call><call>{oops</call>')
    assert turn.calls == [{"name": "a", "arguments": {}}]
    assert len(turn.unreadable) == 2
    assert turn.unreadable[0].startswith("<call> must hold")
    assert turn.unreadable[1].startswith("<call> is not JSON")
    assert parse_turn("plain text") == Turn()


def test_a_recheck_holds_exactly_one_call() -> None:
    verdict = parse_verdict('<reflect>RECHECK: wrong id</reflect><call>[{"name": "a", "arguments": {"x": 2}}]</call>')
    assert (verdict.verdict, verdict.call) == (RECHECK, {"name": "a", "arguments": {"x": 2}})
    with pytest.raises(AnswerFormatError, match="must hold one"):
        parse_verdict('<reflect>RECHECK: two</reflect><call>[{"name": "a"}, {"name": "b"}]</call>')
