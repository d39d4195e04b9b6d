"""The structured-reflection reward against hand-computed turns.

Defaults throughout: w = alpha = (0.1, 0.7, 0.2) for (reflection, call, final), l_extra 0.8,
l_cnt 0.6, l_scale 0.8, rho 0.3 for exactly equal calls, backoff 0.15 * sim below 1e-6.
"""

from __future__ import annotations

import json

import pytest

from faultline import ConfigError
from faultline.core import Turn, parse_turn
from faultline.report import PartWeights, RewardSettings, reward_stats, text_similarity, turn_reward

REFLECT = "the order id was wrong"
CALL = {"name": "cancel_order", "arguments": {"order_id": "#W1"}}
WRONG = {"name": "cancel_order", "arguments": {"order_id": "#W2"}}
READ = {"name": "get_order_details", "arguments": {"order_id": "#W1"}}
FINAL = "your order is cancelled"
NEAR_FINAL = "your order is now cancelled"
# sim(NEAR_FINAL, FINAL): words 4 shared of 5 -> 0.8; word pairs ("your order", "order is") 2 of 5
# -> 0.4; lengths 23 and 27 characters; 0.6 * 0.8 + 0.3 * 0.4 + 0.1 * 23 / 27 = 0.6851851851...
NEAR_SIM = 0.6 * 0.8 + 0.3 * 0.4 + 0.1 * 23 / 27


def text(reflect: str = "", calls: list[dict[str, object]] | None = None, final: str = "") -> str:
    parts = [f"<reflect>{reflect}</reflect>"] if reflect else []
    parts += [f"<call>{json.dumps(calls)}</call>"] if calls else []
    parts += [f"<final>{final}</final>"] if final else []
    return "\n".join(parts)


def test_text_similarity_of_the_worked_example() -> None:
    assert text_similarity(NEAR_FINAL, FINAL) == pytest.approx(NEAR_SIM)
    assert NEAR_SIM == pytest.approx(0.6851851851851852)
    assert text_similarity("Your  order IS cancelled", FINAL) == 1.0
    assert text_similarity("", FINAL) == 0.0


def test_a_perfect_turn_scores_1() -> None:
    # every part equal: s = (1, 1, 1), S = 1; nothing missing or extra, one call each: P = 0, F = 1
    turn = parse_turn(text(REFLECT, [CALL], FINAL))
    reward = turn_reward(turn, turn)
    assert (reward.reflection, reward.call, reward.final) == (1.0, 1.0, 1.0)
    assert (reward.structure, reward.format, reward.total, reward.backoff) == (1.0, 1.0, 1.0, False)


def test_a_wrong_call_loses_the_call_weight() -> None:
    # s = (1, 0, 1): S = 0.1 + 0.2 = 0.3; every part there, one call each: P = 0, F = 1; total 0.3
    reference = parse_turn(text(REFLECT, [CALL], FINAL))
    reward = turn_reward(parse_turn(text(REFLECT, [WRONG], FINAL)), reference)
    assert reward.call == 0.0
    assert reward.format == 1.0
    assert reward.total == pytest.approx(0.3)


def test_a_reference_without_reflection_renormalises_over_call_and_final() -> None:
    # mask (0, 1, 1): S = (0.7 * 1 + 0.2 * 0.685185) / (0.7 + 0.2) = 0.837037 / 0.9 = 0.9300412;
    # F = 1; without the renormalisation it would be 0.837
    reference = parse_turn(text(calls=[CALL], final=FINAL))
    reward = turn_reward(parse_turn(text(calls=[CALL], final=NEAR_FINAL)), reference)
    assert reward.reflection is None
    assert reward.final == pytest.approx(NEAR_SIM)
    assert reward.total == pytest.approx(0.9300411522633745)


def test_a_turn_missing_the_reflection_is_penalised_lightly_when_its_call_is_exact() -> None:
    # s = (0, 1): S = 0.7 / 0.8 = 0.875; P_miss = alpha_r = 0.1, rho = 0.3 (calls equal):
    # F = 1 - 0.8 * 0.1 * 0.3 = 0.976; total = 0.875 * 0.976 = 0.854
    reference = parse_turn(text(REFLECT, [CALL]))
    reward = turn_reward(parse_turn(text(calls=[CALL])), reference)
    assert reward.reflection == 0.0
    assert reward.structure == pytest.approx(0.875)
    assert reward.format == pytest.approx(0.976)
    assert reward.total == pytest.approx(0.854)


def test_a_malformed_call_reads_as_a_missing_one() -> None:
    # the <call> is not JSON, so no call: s = (1, 0), S = 0.1 / 0.8 = 0.125; P_miss = alpha_c = 0.7,
    # rho = 1: F = 1 - 0.8 * 0.7 = 0.44; total = 0.125 * 0.44 = 0.055
    completion = parse_turn(f"<reflect>{REFLECT}</reflect><call>cancel_order(order_id=#W1)</call>")
    assert completion.calls == [] and completion.unreadable[0].startswith("<call> is not JSON")
    reward = turn_reward(completion, parse_turn(text(REFLECT, [CALL])))
    assert reward.format == pytest.approx(0.44)
    assert reward.total == pytest.approx(0.055)


def test_an_extra_part_and_an_extra_call_cost_their_share() -> None:
    # s = (1, 0): S = 0.125; P_extra = alpha_f = 0.2, P_cnt = alpha_c * |2 - 1| / 2 = 0.35:
    # P = 0.8 * 0.2 + 0.6 * 0.35 = 0.37, F = 1 - 0.8 * 0.37 = 0.704; total = 0.125 * 0.704 = 0.088
    reward = turn_reward(parse_turn(text(REFLECT, [CALL, READ], FINAL)), parse_turn(text(REFLECT, [CALL])))
    assert reward.format == pytest.approx(0.704)
    assert reward.total == pytest.approx(0.088)


def test_a_zero_core_reward_falls_back_on_the_similarity_of_the_whole_turns() -> None:
    # S = 0, F = 1: core 0 < 1e-6. Linearised, the calls are 5 words each, 4 shared -> 4/6; 2 of
    # 4 word pairs shared -> 2/6; same length -> 1: sim = 0.4 + 0.1 + 0.1 = 0.6; total 0.15 * 0.6
    reward = turn_reward(Turn(calls=[WRONG]), Turn(calls=[CALL]))
    assert reward.core == 0.0 and reward.backoff
    assert reward.total == pytest.approx(0.09)


def test_an_empty_reference_asks_for_nothing_and_charges_extra_parts() -> None:
    # S = 1 by choice; P_extra = alpha_f = 0.2: F = 1 - 0.8 * 0.8 * 0.2 = 0.872
    assert turn_reward(Turn(final=FINAL), Turn()).total == pytest.approx(0.872)


def test_weights_and_similarity_are_parameters() -> None:
    # w = (1, 1, 0) normalised to (0.5, 0.5, 0): the wrong call of above scores 0.5 * 1 = 0.5
    reference = parse_turn(text(REFLECT, [CALL], FINAL))
    settings = RewardSettings(weights=PartWeights(reflection=1.0, call=1.0, final=0.0))
    assert turn_reward(parse_turn(text(REFLECT, [WRONG], FINAL)), reference, settings).total == pytest.approx(0.5)
    # sim fixed at 0.5: S = (0.7 + 0.2 * 0.5) / 0.9 = 0.8888...
    half = turn_reward(
        Turn(calls=[CALL], final=NEAR_FINAL), Turn(calls=[CALL], final=FINAL), similarity=lambda a, b: 0.5
    )
    assert half.total == pytest.approx(0.8 / 0.9)
    with pytest.raises(ConfigError):
        PartWeights(reflection=0.0, call=0.0, final=0.0)


def test_stats_count_only_the_turns_whose_reference_has_the_part() -> None:
    rewards = [
        turn_reward(parse_turn(text(REFLECT, [CALL])), parse_turn(text(REFLECT, [CALL]))),  # total 1
        turn_reward(Turn(calls=[WRONG]), Turn(calls=[CALL])),  # total 0.09, no reflection in its reference
        turn_reward(parse_turn(text(calls=[CALL])), parse_turn(text(REFLECT, [CALL]))),  # total 0.854
    ]
    stats = {s.component: s for s in reward_stats(rewards)}
    assert (stats["reflection"].n, stats["reflection"].mean) == (2, 0.5)
    assert stats["final"].n == 0 and stats["final"].mean is None
    total = stats["total"]
    assert (total.n, total.min, total.median, total.max) == (3, pytest.approx(0.09), pytest.approx(0.854), 1.0)
    assert total.mean == pytest.approx((1 + 0.09 + 0.854) / 3)
