"""How the answers JetStream gives a publish are read: stored, refused for good, or worth sending again."""

from __future__ import annotations

import anyio
import msgspec
import pytest
from nats.aio.msg import Msg

from faultline.bus import Bus
from faultline.bus._acks import Confirmations, Publish, Round


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        ({"code": 409, "err_code": 10158, "description": "duplicate message id is in process"}, True),
        ({"code": 503, "err_code": 10008, "description": "JetStream system temporarily unavailable"}, True),
        ({"code": 400, "err_code": 10071, "description": "wrong last sequence: 5"}, False),
    ],
)
async def test_a_refusal_is_sent_again_only_when_it_may_pass(
    bus: Bus, error: dict[str, object], transient: bool
) -> None:
    async def answer(msg: Msg) -> None:
        await msg.respond(msgspec.json.encode({"error": error}))

    await bus.nc.subscribe("fake.stream", cb=answer)
    publish, round_ = Publish("fake.stream", b"x", "m1"), Round()
    await Confirmations(bus.nc, 10).send(publish, round_)
    round_.seal()
    with anyio.fail_after(10):
        await round_.done
    assert publish.answered
    assert publish.failure == f"{error['description']} (code {error['code']})"
    assert publish.transient is transient
