"""The user simulator under a message cycle: its own turn comes back, it answers, up to its turn limit."""

from __future__ import annotations

from faultline.agents import PROTOCOL, EpisodeSpec, UserSimulator
from faultline.core import AgentHarness, ConversationEnded, UserTurn
from faultline.envs import load_domain
from faultline.runtime.models import SimBackend


async def test_a_turn_echoed_back_is_answered_until_the_turn_limit() -> None:
    task = load_domain("retail").tasks()[0]
    user = AgentHarness(UserSimulator(), backend=SimBackend())
    [first] = await user.deliver(EpisodeSpec(domain="retail", task=task.id, max_turns=4, protocol=PROTOCOL).start())
    assert isinstance(first.body, UserTurn) and first.recipient == "tool"
    turns = [first.body]
    while True:
        out = await user.deliver(turns[-1], sender="user")  # the cycle: the user's turn comes back to it
        if len(out) != 1:
            break
        assert isinstance(out[0].body, UserTurn) and not out[0].body.done
        turns.append(out[0].body)
    assert len(turns) == 4
    assert "To repeat" in turns[1].text
    done, end = out
    assert isinstance(done.body, UserTurn) and done.body.done
    assert isinstance(end.body, ConversationEnded) and end.recipient == "env"
    assert end.body.cause == "turn limit reached (4 user turns)"
    assert end.body.told == []
