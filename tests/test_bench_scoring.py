"""How the attribution benchmark scores an answer: no answer is never right, whatever the label."""

from bench.attribution_accuracy import same


def test_a_missing_answer_never_matches_even_a_missing_label() -> None:
    assert same(3, 3) and same("tool", "tool")
    assert not same(None, None)
    assert not same(None, 3) and not same(4, 3)
