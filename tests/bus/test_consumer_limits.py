"""A worker's consumers hand out at most `max_ack_pending` unacknowledged inputs: the setting reaches them."""

from __future__ import annotations

from pathlib import Path

from faultline.bus import Bus, BusSettings, EmbeddedServer
from faultline.bus._access import ConsumerSpec
from faultline.runtime import bus_settings, load_config


async def _limit(bus: Bus, name: str) -> int:
    info = await bus.js.consumer_info(bus.subjects.stream, name)
    return int(info.config.max_ack_pending or 0)


async def test_the_operator_makes_and_updates_consumers_with_the_configured_limit(nats_server: EmbeddedServer) -> None:
    spec = ConsumerSpec(name="agent-limited-0of1", filters=("fl.ep.*.limited",), owner="worker-a", ack_wait_s=30.0)
    for limit in (12_000, 30_000):  # the second start finds the consumer and brings its limit up to date
        bus = await Bus.connect(nats_server.url, settings=BusSettings(max_ack_pending=limit))
        try:
            await bus.ensure_stream()
            await bus.ensure_consumers([spec])
            assert await _limit(bus, spec.name) == limit
        finally:
            await bus.close()


async def test_a_worker_alone_on_an_open_server_brings_its_consumers_limit_up_to_date(
    nats_server: EmbeddedServer,
) -> None:
    for limit in (12_000, 30_000):
        bus = await Bus.connect(nats_server.url, settings=BusSettings(max_ack_pending=limit))
        try:
            await bus.ensure_stream()
            consumer, _ = await bus.own_consumer("agent-alone-0of1", ["fl.ep.*.alone"])
            await consumer.close()
            assert await _limit(bus, "agent-alone-0of1") == limit
        finally:
            await bus.close()


def test_the_limit_and_the_start_rate_are_settings_of_the_config(tmp_path: Path) -> None:
    path = tmp_path / "faultline.toml"
    path.write_text("[nats]\nmax_ack_pending = 40000\n\n[run]\nstart_rate = 40.0\n")
    config = load_config(path)
    assert bus_settings(config).max_ack_pending == 40_000
    assert config.run.start_rate == 40.0
    assert load_config(None).run.start_rate == 250.0
