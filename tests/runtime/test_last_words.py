"""What a timeout's cause quotes of its episode's last message, and how much of anything a runner's cause holds."""

from __future__ import annotations

import time

import pytest

from faultline.bus import Bus
from faultline.core import DefenseFired, Envelope, ErrorRaised, Note, error_completion, runner_completion
from faultline.core._runner import MAX_CAUSE_CHARS
from faultline.runtime import last_words


def test_a_cause_is_one_line_of_bounded_length_whatever_it_quotes() -> None:
    """An agent's error message of a megabyte, copied into the runner's completion, made a message past NATS's
    largest: the publish failed, and with it the whole run."""
    error = Envelope(
        id="e1",
        episode="ep",
        sender="planner",
        body=ErrorRaised(agent="planner", input_id="x", error_type="RuntimeError", message="B\n\x1b[2J" * 300_000),
    )
    cause = error_completion(error).body.cause  # type: ignore[union-attr]
    assert len(cause) == MAX_CAUSE_CHARS and "\n" not in cause and "\x1b" not in cause
    assert cause.startswith("RuntimeError in planner: B [2JB [2JB") and cause.endswith("…")
    assert runner_completion("ep", "timeout", "short\tand\nsweet").body.cause == "short and sweet"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("sender", "said"),
    [
        ("user", "the cycle defense dropped user's input m7 (it came back to user)"),
        ("planner", "defense_fired from planner"),  # another agent's worker cannot speak for user's defenses
    ],
)
async def test_the_last_message_is_quoted_and_a_defense_only_for_its_own_agent(
    bus: Bus, sender: str, said: str
) -> None:
    episode = f"quiet-{sender}"
    now = time.time()
    await bus.publish(Envelope(id=f"{episode}-1", episode=episode, sender="user", recipient="tool",
                               body=Note(text="hello"), ts=now - 9))  # fmt: skip
    fired = DefenseFired(defense="cycle", agent="user", message_id="m7", reason="it came back to user")
    await bus.publish(Envelope(id=f"{episode}-2", episode=episode, sender=sender, body=fired, ts=now - 3))
    words = await last_words(bus, episode)
    assert words.startswith("its last message, 3s before: ") and words.endswith(said), words


async def test_a_last_message_from_the_future_says_no_age(bus: Bus) -> None:
    await bus.publish(Envelope(id="f-1", episode="future", sender="user", recipient="tool", body=Note(), ts=1e300))
    assert await last_words(bus, "future") == "its last message, before: note from user to tool"


async def test_an_episode_the_stream_holds_nothing_of_has_no_last_words(bus: Bus) -> None:
    assert await last_words(bus, "never-was") == ""
