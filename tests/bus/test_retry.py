"""Asking again: what the stream refuses for now is asked for again with backoff, a refused credential never."""

from __future__ import annotations

import anyio
import pytest

from faultline._errors import AccessError, BusError, JournalStorageError, PublishRefusedError
from faultline.bus import asked_again


class Asker:
    """Fails with each of `failures` in turn, then answers."""

    def __init__(self, *failures: Exception) -> None:
        self.failures = list(failures)
        self.asked = 0

    async def __call__(self) -> str:
        self.asked += 1
        if self.failures:
            raise self.failures.pop(0)
        return "answer"


async def test_a_refusal_for_now_is_asked_again_until_answered() -> None:
    ask = Asker(BusError("JetStream system temporarily unavailable"), BusError("no answer"))
    with anyio.fail_after(5):
        assert await asked_again(ask, first_s=0.01, max_s=0.02) == "answer"
    assert ask.asked == 3


@pytest.mark.parametrize("refusal", [PublishRefusedError("may not publish"), AccessError("wrong password")])
async def test_a_refused_credential_is_raised_at_once(refusal: BusError) -> None:
    ask = Asker(refusal)
    with anyio.fail_after(5), pytest.raises(type(refusal)):
        await asked_again(ask, first_s=0.01)
    assert ask.asked == 1


async def test_only_the_errors_it_retries_are_asked_again_and_each_failure_is_told() -> None:
    told: list[str] = []

    async def failed(exc: Exception) -> None:
        told.append(str(exc))

    ask = Asker(JournalStorageError("disk full"))
    with anyio.fail_after(5):
        assert await asked_again(ask, first_s=0.01, retried=JournalStorageError, failed=failed) == "answer"
    assert told == ["disk full"]
    with pytest.raises(BusError):
        await asked_again(Asker(BusError("not retried here")), first_s=0.01, retried=JournalStorageError)
