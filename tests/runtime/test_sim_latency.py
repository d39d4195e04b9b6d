"""The `sim` backend's emulated latency: drawn deterministically, recorded like any model call, never
waited for in replay. Latencies here are a few milliseconds; no test reads the clock."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from faultline._errors import ConfigError
from faultline.bus import EmbeddedServer
from faultline.core import (
    Agent,
    ChatMessage,
    Context,
    Envelope,
    Grade,
    InputRecord,
    LlmRequest,
    ModelCall,
    Start,
    System,
)
from faultline.runtime import ModelConfig, make_backend, parse_config
from faultline.runtime.models import SimBackend, SimLatency
from faultline.testing import run_system

CALLS = 3


def ask(n: int) -> LlmRequest:
    return LlmRequest(role="asker", messages=[ChatMessage(role="user", content=f"question {n}")])


class Asker(Agent):
    """Asks the model CALLS times, then finishes with the answers."""

    name = "asker"

    async def on_message(self, msg: Envelope, ctx: Context) -> None:
        assert isinstance(msg.body, Start)
        ctx.finish([(await ctx.llm(ask(n))).content for n in range(CALLS)])


class Asking(System):
    name = "asking"
    agents = (Asker,)
    entry = Asker.name
    finishers = (Asker.name,)

    def score(self, record: InputRecord, output: Any) -> Grade:
        return Grade(1.0)


UNIFORM = SimLatency(distribution="uniform", low_s=0.001, high_s=0.005, tokens_per_s=10_000.0, seed=7)


def test_a_draw_depends_on_the_request_episode_agent_and_seed_only() -> None:
    draw = UNIFORM.draw(ask(0), 10, episode="e1", agent="asker")
    assert draw == UNIFORM.draw(ask(0), 10, episode="e1", agent="asker")
    others = {
        UNIFORM.draw(ask(1), 10, episode="e1", agent="asker"),
        UNIFORM.draw(ask(0), 10, episode="e2", agent="asker"),
        UNIFORM.draw(ask(0), 10, episode="e1", agent="other"),
        SimLatency(distribution="uniform", low_s=0.001, high_s=0.005, tokens_per_s=10_000.0, seed=8).draw(
            ask(0), 10, episode="e1", agent="asker"
        ),
    }
    assert draw not in others and len(others) == 4
    assert 0.001 + 10 / 10_000 <= draw <= 0.005 + 10 / 10_000


def test_fixed_and_per_token_latency_add_up() -> None:
    assert SimLatency(distribution="fixed", seconds=2.0, tokens_per_s=50.0).draw(ask(0), 100) == 4.0
    assert SimLatency(tokens_per_s=20.0).draw(ask(0), 10) == 0.5
    assert SimLatency().draw(ask(0), 10) == 0.0 and not SimLatency().emulated


def test_lognormal_draws_centre_on_their_median() -> None:
    latency = SimLatency(distribution="lognormal", seconds=2.0, sigma=0.5)
    draws = sorted(latency.draw(ask(n), 0, episode="e") for n in range(401))
    assert 1.8 < draws[200] < 2.2
    assert all(draw > 0 for draw in draws)


async def test_the_backend_records_the_latency_it_waited_and_the_same_reply() -> None:
    settings = ModelConfig(latency=UNIFORM)
    backend = SimBackend(settings)
    response = await backend.complete_call(ask(0), ModelCall(episode="e1", agent="asker", role="asker"))
    at_once = SimBackend().respond(ask(0))
    assert response.content == at_once.content and response.usage == at_once.usage
    assert response.latency_s == UNIFORM.draw(ask(0), at_once.usage.completion_tokens, episode="e1", agent="asker")
    assert at_once.latency_s == 0.0


def test_the_config_gives_each_role_its_latency() -> None:
    config = parse_config(
        {
            "models": {
                "default": {"latency": {"distribution": "fixed", "seconds": 2.0}},
                "user": {"latency": {"distribution": "lognormal", "seconds": 1.5, "sigma": 0.3, "tokens_per_s": 40}},
            }
        }
    )
    assert config.model("tool").latency == SimLatency(distribution="fixed", seconds=2.0)
    assert config.model("user").latency == SimLatency(distribution="lognormal", seconds=1.5, sigma=0.3, tokens_per_s=40)
    backend = make_backend(config, "user")
    assert isinstance(backend, SimBackend) and backend.latency == config.model("user").latency


@pytest.mark.parametrize(
    ("latency", "message"),
    [
        (
            {"distribution": "uniform", "low_s": 3, "high_s": 2},
            r"low_s 3 is above high_s 2 - at \$\.models\.tool\.latency$",
        ),
        (
            {"distribution": "lognormal"},
            r"lognormal latency needs its median: seconds > 0 - at \$\.models\.tool\.latency$",
        ),
        ({"distribution": "normal"}, r"Invalid enum value 'normal' - at \$\.models\.tool\.latency\.distribution$"),
        ({"seconds": 2}, r"need a distribution .* - at \$\.models\.tool\.latency$"),
        ({"tokens_per_s": -1}, r"Expected float >= 0.0 - at \$\.models\.tool\.latency\.tokens_per_s$"),
        ({"second": 2}, r"unknown field second \(did you mean seconds\?\) - at \$\.models\.tool\.latency$"),
    ],
)
def test_a_bad_latency_is_one_line_naming_the_key(latency: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        parse_config({"models": {"tool": {"latency": latency}}})
    assert "\n" not in str(caught.value)


def test_a_latency_on_a_real_backend_is_refused() -> None:
    with pytest.raises(ConfigError, match=r'for backend = "sim" only.* - at \$\.models\.tool\.latency$'):
        parse_config(
            {
                "models": {
                    "tool": {"backend": "openai", "model": "m", "latency": {"distribution": "fixed", "seconds": 1}}
                }
            }
        )


async def test_live_calls_record_their_latency_and_replay_serves_it_without_waiting(
    nats_server: EmbeddedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = SimBackend(ModelConfig(latency=UNIFORM))
    run = await run_system(
        Asking, [{"id": "a"}, {"id": "b"}], nats_url=nats_server.url, journal=tmp_path / "j.sqlite", models=backend
    )
    assert {c.outcome for c in run.completed.values()} == {"success"}
    with sqlite3.connect(run.journal) as db:
        rows = db.execute("SELECT episode, call_index, completion_tokens, latency_s FROM model_calls").fetchall()
    assert len(rows) == 2 * CALLS
    for episode, index, tokens, latency in rows:
        expected = UNIFORM.draw(ask(index), tokens, episode=episode, agent=Asker.name)
        assert latency == expected and tokens > 0

    async def no_waiting(_seconds: float) -> None:
        raise AssertionError("replay waited on the emulated model")

    monkeypatch.setattr("faultline.runtime.models._sim.anyio.sleep", no_waiting)
    report = run.replay()
    assert report.identical, report
