"""`faultline run` end to end: real nats-server, journal service and worker processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faultline.bus import EpisodeCompleted
from faultline.envs import ERROR_CATEGORIES
from faultline.journal import JournalReader, verify
from faultline.runtime.cli import main
from tests.openai_server import OpenAIServer

pytestmark = pytest.mark.slow


def run(capsys: pytest.CaptureFixture[str], *args: str) -> dict:  # type: ignore[type-arg]
    code = main(["run", "--json", *args])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out)  # type: ignore[no-any-return]


def completions(path: Path) -> list[EpisodeCompleted]:
    with JournalReader(path) as reader:
        return [r.envelope().body for r in reader.rows() if r.kind == "episode_completed"]  # type: ignore[misc]


@pytest.mark.parametrize("domain", ["retail", "phone"])
def test_with_no_mistakes_every_task_passes(domain: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    journal = tmp_path / "j.sqlite"
    summary = run(capsys, "--domain", domain, "--tasks", "1000", "--journal", str(journal), "--concurrency", "16")
    assert summary["episodes"] >= (60 if domain == "retail" else 20)
    assert summary["pass_k"] == {"1": 1.0}
    assert summary["outcomes"] == {"success": summary["episodes"]}
    assert summary["avg_tokens"] > 0 and summary["avg_turns"] > 0
    assert verify(journal).ok
    assert main(["replay", str(journal)]) == 0


def test_mistakes_lower_pass_k_and_failures_name_their_category(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "j.sqlite"
    summary = run(
        capsys, "--tasks", "20", "--trials", "3", "--error-rates", "0.08", "--journal", str(journal), "--seed", "3"
    )
    assert summary["pass_k"]["1"] < 1.0
    assert summary["pass_k"]["3"] <= summary["pass_k"]["2"] <= summary["pass_k"]["1"]
    failures = [c for c in completions(journal) if c.outcome != "success"]
    assert failures
    for failure in failures:
        categories = {m["category"] for m in failure.details["mistakes"]}
        assert categories and categories <= set(ERROR_CATEGORIES), failure
    assert main(["replay", str(journal)]) == 0


def test_a_third_party_domain_runs_by_import_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    summary = run(
        capsys,
        "--domain",
        "tests.runtime.counter_domain:Counter",
        "--tasks",
        "2",
        "--journal",
        str(tmp_path / "j.sqlite"),
    )
    assert summary["episodes"] == 2 and summary["pass_k"] == {"1": 1.0}


def test_the_openai_backend_runs_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    journal = tmp_path / "j.sqlite"
    with OpenAIServer() as server:
        summary = run(
            capsys,
            "--model",
            "openai",
            "--base-url",
            server.url,
            "--model-name",
            "scripted",
            "--tasks",
            "2",
            "--max-turns",
            "2",
            "--journal",
            str(journal),
        )
        assert len(server.chat_requests) >= 2 * 4
    assert summary["episodes"] == 2
    causes = {c.cause for c in completions(journal)}
    assert causes == {"turn limit reached (2 user turns)"}
    assert main(["replay", str(journal)]) == 0


def test_bad_arguments_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--domain", "nowhere", "--journal", str(tmp_path / "j")]) == 1
    assert main(["run", "--error-rate", "typo=0.1"]) == 2
    assert main(["run", "--tasks", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("faultline: ") for line in err)


def test_two_workers_per_agent_share_episodes_and_keep_their_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "j.sqlite"
    summary = run(capsys, "--tasks", "12", "--workers", "2", "--journal", str(journal), "--concurrency", "12")
    assert summary["pass_k"] == {"1": 1.0}
    assert main(["replay", str(journal)]) == 0


def test_an_episode_past_its_time_limit_completes_as_timeout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "j.sqlite"
    summary = run(capsys, "--tasks", "3", "--episode-timeout", "0.001", "--journal", str(journal))
    assert summary["outcomes"] == {"timeout": 3}
    causes = [c.cause for c in completions(journal) if c.outcome == "timeout"]
    assert causes == ["no completion within 0.001s"] * 3
