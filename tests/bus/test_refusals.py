"""Which request a refusal of the JetStream API is taken for: a refusal names a subject, never the request it answers."""

from __future__ import annotations

import nats.errors
import pytest

from faultline._errors import BusError, PublishRefusedError
from faultline.bus._refusals import Refusals

CONSUMER = "dUd8Uerwqrd0V8THmIkttH"


async def refuse(refusals: Refusals, subject: str) -> None:
    """What the client library hands on when the server refuses this connection a publish on `subject`."""
    await refusals.on_error(nats.errors.Error(f'nats: permissions violation for publish to "{subject.lower()}"'))


async def failed_while(refused: list[str], consumer: str = "") -> BusError:
    """The error a request (about `consumer`) that timed out raises, the server having refused `refused` meanwhile."""
    refusals = Refusals("worker-main-0")
    with pytest.raises(BusError) as caught, refusals.asking_jetstream("opening consumer of fl.ctl.faults", consumer):
        for subject in refused:
            await refuse(refusals, subject)
        raise nats.errors.TimeoutError
    return caught.value


@pytest.mark.parametrize(
    "refused",
    [
        "$JS.API.CONSUMER.INFO.FL_JOURNAL.anotherReader1234567890",
        "$JS.API.CONSUMER.CREATE.FL_JOURNAL",  # the nameless create asked of a server still being reconnected to
    ],
)
async def test_a_request_about_a_consumer_is_not_refused_by_another_requests_refusal(refused: str) -> None:
    failure = await failed_while([refused], CONSUMER)
    assert not isinstance(failure, PublishRefusedError)


async def test_a_refusal_naming_the_consumer_refuses_its_request() -> None:
    failure = await failed_while(
        ["$JS.API.CONSUMER.CREATE.FL_JOURNAL", f"$JS.API.CONSUMER.CREATE.FL_JOURNAL.{CONSUMER}.fl.ctl.faults"], CONSUMER
    )
    assert isinstance(failure, PublishRefusedError)
    assert "worker-main-0 opening consumer of fl.ctl.faults" in str(failure)


async def test_a_request_about_no_one_consumer_is_refused_by_any_refusal() -> None:
    assert isinstance(await failed_while(["$JS.API.STREAM.INFO.FL_JOURNAL"]), PublishRefusedError)


async def test_a_request_that_timed_out_with_nothing_refused_is_a_failure_to_ask_again() -> None:
    assert not isinstance(await failed_while([], CONSUMER), PublishRefusedError)
