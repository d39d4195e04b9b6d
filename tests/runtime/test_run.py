"""`faultline run` end to end: real nats-server, journal service and worker processes."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import anyio
import pytest

from faultline.api import _run as api_run
from faultline.bus import Bus, EmbeddedServer, free_port
from faultline.cli import _run as cli_run
from faultline.cli import main
from faultline.core import EpisodeCompleted, episode_shard
from faultline.envs import ERROR_CATEGORIES
from faultline.journal import JournalReader, shard_path, verify
from faultline.runtime import hold_directories, parse_config, system_access
from tests.openai_server import OpenAIServer, Status
from tests.runtime.test_processes import faultline, finish, wait_until_up

pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[2] / "faultline.example.toml"


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
    assert summary["note"] == api_run.SIM_NOTE, "a sim run's numbers say what they measure"
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
    for failure in failures:  # a check of the simulator itself: each failure carries its own label of a mistake
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


def test_insecure_runs_without_credentials_and_says_so_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", "--insecure", "--tasks", "1", "--json", "--journal", str(tmp_path / "j.sqlite")])
    captured = capsys.readouterr()
    assert code == 0 and json.loads(captured.out)["outcomes"] == {"success": 1}
    assert captured.err.startswith("warning: --insecure: NATS on its local port takes no credentials"), captured.err
    assert main(["run", "--insecure", "--nats", "nats://127.0.0.1:4222"]) == 2
    assert "--insecure sets up the system `run` starts" in capsys.readouterr().err


def test_tls_runs_every_process_over_tls_with_certificates_made_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    journal = tmp_path / "j.sqlite"
    cas = []
    for _ in range(2):
        assert main(["run", "--tls", "--tasks", "1", "--json", "--journal", str(journal)]) == 0
        captured = capsys.readouterr()
        assert json.loads(captured.out)["outcomes"] == {"success": 1}
        assert "warning" not in captured.err.lower()  # a slow machine may add progress lines, never a warning
        cas.append((tmp_path / ".faultline" / "tls" / "ca.pem").read_bytes())
    assert cas[0] == cas[1] and b"BEGIN CERTIFICATE" in cas[0]
    assert main(["run", "--tls", "--nats", "nats://127.0.0.1:4222"]) == 2
    assert "--tls sets up the system `run` starts" in capsys.readouterr().err


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
    said = "no completion within 0.001s; no model call was in flight when last asked; its last message, "
    assert len(causes) == 3 and all(cause.startswith(said) for cause in causes), causes


def test_the_example_configuration_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    journal = tmp_path / "j.sqlite"
    with OpenAIServer() as server:
        summary = run(
            capsys, "--config", str(EXAMPLE), "--base-url", server.url, "--tasks", "2", "--max-turns", "2",
            "--journal", str(journal),
        )  # fmt: skip
        models = {request["model"] for request in server.chat_requests}
    assert summary["episodes"] == 2 and summary["outcomes"] == {"failure": 2}
    assert models == {"qwen2.5-7b-instruct"}, "the tool agent's role asks the endpoint; the user simulator is sim"
    logs = {path.name for path in (tmp_path / ".faultline" / "logs").iterdir()}
    assert {"worker-tool-0.log", "worker-tool-1.log", "worker-rest-0.log"} <= logs
    assert verify(journal).ok
    assert main(["replay", str(journal)]) == 0


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--workers", "0"], "run: argument --workers: must be at least 1, got 0"),
        (["--max-turns", "0"], "run: argument --max-turns: must be at least 1, got 0"),
        (["--concurrency", "-2"], "run: argument --concurrency: must be at least 1, got -2"),
        (["--trials", "two"], "run: argument --trials: expected a whole number, got 'two'"),
        (
            ["--episode-timeout", "-1"],
            "run: argument --episode-timeout: must be a number of seconds above 0 and at most 2.592e+06, got -1",
        ),
        (
            ["--episode-timeout", "inf"],
            "run: argument --episode-timeout: must be a number of seconds above 0 and at most 2.592e+06, got inf",
        ),
        (["--error-rates", "1.5"], "run: argument --error-rates: must be at most 1, got 1.5"),
        (
            ["--error-rates", "1.0"],
            "--error-rates, --error-rate: rates add up to 4, more than 1; a decision makes at most one mistake,"
            " so --error-rates is at most 0.25",
        ),
        (
            ["--error-rate", "wrong_value=0.7", "--error-rate", "early_stop=0.4"],
            "--error-rates, --error-rate: rates add up to 1.1, more than 1; a decision makes at most one mistake,"
            " so --error-rates is at most 0.25",
        ),
        (
            ["--error-rate", "early_stop=-0.1"],
            "--error-rate 'early_stop=-0.1': the rate must be at least 0, got -0.1",
        ),
        (
            ["--error-rates", "0.1", "--model", "openai", "--model-name", "m"],
            "--error-rates and --error-rate set the sim model's mistakes, but the tool agent's model role 'tool'"
            " uses openai",
        ),
        (
            ["--model", "sim", "--base-url", "http://127.0.0.1:1/v1"],
            "--base-url and --model-name set the openai endpoint; with --model sim no role uses one",
        ),
        (
            ["--model-name", "m"],
            "--base-url and --model-name set the openai endpoint, but no model role uses openai: add --model openai",
        ),
    ],
)
def test_flags_out_of_range_are_one_line_before_anything_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    assert main(["run", *flags, "--journal", str(tmp_path / "j.sqlite")]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"faultline: usage error: {message}\n"
    assert not (tmp_path / ".faultline").exists()


def test_the_highest_error_rate_runs_and_fails_episodes_without_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = run(capsys, "--tasks", "6", "--error-rates", "0.25", "--journal", str(tmp_path / "j.sqlite"))
    assert summary["outcomes"]["failure"] >= 3 and "error" not in summary["outcomes"]
    assert summary["errors"] == {}


def run_failing(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[dict, str]:  # type: ignore[type-arg]
    """A run expected to exit 1: its JSON summary and its one error line on stderr.

    A run slower than PROGRESS_LINE_S (a loaded machine) also prints what it waits for;
    those lines are progress, not errors.
    """
    code = main(["run", "--json", "--model", "openai", "--model-name", "m", "--tasks", "2", *args])
    out, err = capsys.readouterr()
    assert code == 1, err
    [line] = [line for line in err.splitlines() if line.startswith("faultline:")]
    return json.loads(out), line


def test_a_run_with_no_model_server_exits_1_and_says_why_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{free_port('127.0.0.1')}/v1"
    summary, line = run_failing(capsys, "--base-url", url, "--journal", str(tmp_path / "j.sqlite"))
    assert summary["outcomes"] == {"error": 2}
    assert line.startswith("faultline: error: all 2 episodes ended in error: ModelError in user: ")
    assert f"openai endpoint {url} (model m): gave up after 4 attempts, last error: cannot connect" in line
    assert line.count(url) == 1


def test_a_run_the_model_server_refuses_exits_1_with_status_and_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with OpenAIServer() as server:
        server.reply(*[Status(404, "The model `m` does not exist")] * 20)
        summary, line = run_failing(capsys, "--base-url", server.url, "--journal", str(tmp_path / "j.sqlite"))
        assert len(server.chat_requests) == 2, "a 404 is not retried"
        assert line == (
            f"faultline: error: all 2 episodes ended in error: ModelError in user: openai endpoint {server.url}"
            " (model m): HTTP 404 (The model `m` does not exist)"
        )
    assert summary["outcomes"] == {"error": 2}


def test_a_run_of_one_episode_that_ended_in_error_says_so_in_the_singular(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with OpenAIServer() as server:
        server.reply(*[Status(404, "The model `m` does not exist")] * 5)
        summary, line = run_failing(
            capsys, "--tasks", "1", "--base-url", server.url, "--journal", str(tmp_path / "j.sqlite")
        )
    assert summary["outcomes"] == {"error": 1}
    assert line.startswith("faultline: error: the 1 episode ended in error: ModelError in user: "), line


def test_a_slow_run_says_what_it_is_waiting_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api_run, "PROGRESS_TICK_S", 0.1)
    monkeypatch.setattr(cli_run, "PROGRESS_LINE_S", 0.5)
    code = main(["run", "--json", "--fault", "cycle", "--tasks", "2", "--episode-timeout", "3",
                 "--journal", str(tmp_path / "j.sqlite")])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["outcomes"] == {"timeout": 2}
    waiting = [line for line in err.splitlines() if "running episodes" in line]
    assert len(waiting) >= 3, err
    pattern = (
        r"0 of 2 episodes done; waiting for 2 running episodes, the oldest for (\d+)s; each still running at 3s ends as"
        r" timeout, or as stalled once nothing of it is in flight for 10s"
    )
    ages = [int(re.fullmatch(pattern, line).group(1)) for line in waiting]  # type: ignore[union-attr]
    assert ages == sorted(ages) and ages[-1] >= 2


def test_a_second_run_in_the_same_journal_folder_names_the_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / ".faultline"
    with hold_directories([state], "run"):
        assert main(["run", "--tasks", "1", "--journal", str(tmp_path / "j.sqlite")]) == 1
    pid = os.getpid()
    assert capsys.readouterr().err == (
        f"faultline: error: {state} is in use by `faultline run` (pid {pid}): stop it first (kill -TERM {pid})"
        " or use another directory\n"
    )
    assert not (tmp_path / "j.sqlite").exists()


def test_journal_shards_each_write_their_episodes_and_the_set_reads_as_one_journal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "journal"
    config = tmp_path / "faultline.toml"
    config.write_text(f'[journal]\npath = "{folder}"\nshards = 2\n')
    summary = run(capsys, "--config", str(config), "--tasks", "10", "--workers", "2", "--concurrency", "10")
    assert summary["outcomes"] == {"success": 10}
    for shard in range(2):
        with JournalReader(shard_path(folder, shard)) as reader:
            episodes = {e.episode for e in reader.episodes()}
        assert episodes and all(episode_shard(e, 2) == shard for e in episodes)
    report = verify(folder)
    assert report.ok and report.shards == 2
    assert main(["replay", str(folder), "--jobs", "2"]) == 0
    capsys.readouterr()
    assert main(["journal", "episodes", str(folder), "--json"]) == 0
    assert len([line for line in capsys.readouterr().out.splitlines() if '"type":"episode"' in line]) == 10


def test_each_journal_shard_has_an_identity_that_owns_only_its_consumer(tmp_path: Path) -> None:
    """Shard 0, which trims the dead letters any shard may hold, may also ask how far the others' consumers are."""
    config = parse_config({"journal": {"shards": 3}})
    access = system_access(tmp_path / "credentials", config, {"main": ("tool",)}, "fl")
    journals = {i.name: i for i in access.identities if i.name.startswith("journal")}
    assert sorted(journals) == ["journal-0", "journal-1", "journal-2"]
    for k, identity in enumerate(journals.values()):
        owned = [p for p in identity.publish if ".CONSUMER." in p and "journal-" in p]
        others = [p for p in owned if f"journal-{k}of3" not in p]
        assert owned and others == (
            [f"$JS.API.CONSUMER.INFO.FL_JOURNAL.journal-{j}of3" for j in (1, 2)] if k == 0 else []
        )


async def test_a_run_on_a_running_system_returns_once_its_journal_holds_the_whole_run(tmp_path: Path) -> None:
    """The journal gathers its batches for a moment while nobody waits: `run --nats` waits, so that whatever reads
    the journal right after the run (a report, a replay) finds every episode of it ended. (The system goes on
    publishing: the tool agent's marker that its last input left no output is held a moment, and may be stored
    after the run's wait.)"""
    journal = tmp_path / "up.sqlite"
    config = tmp_path / "faultline.toml"
    config.write_text(f'[journal]\npath = "{journal}"\n[nats]\nstore_dir = "{tmp_path / "nats"}"\n')
    process = faultline("up", "--config", str(config), cwd=tmp_path)
    try:
        up = await wait_until_up(tmp_path, process, timeout=90)
        with (tmp_path / "run.out").open("wb") as out:
            run = faultline(
                "run", "--nats", up.url, "--tasks", "3", "--run-id", "held", "--json", cwd=tmp_path, stdout=out
            )
            err = await finish(run)
        assert run.returncode == 0, err[-2000:]
        summary = json.loads((tmp_path / "run.out").read_text().splitlines()[-1])
        assert summary["journal"] == str(journal.resolve())  # as the system's journal service names it
        with JournalReader(journal) as reader:
            outcomes = {e.episode: e.outcome for e in reader.episodes() if e.episode.startswith("held-")}
        assert len(outcomes) == 3 and all(outcomes.values()), outcomes
        # Its id again: the starts would be dropped as copies of these, and these runs' completions reported. The
        # system's journal, on this host, says so; the stream would where it had not copied them yet.
        again = faultline("run", "--nats", up.url, "--tasks", "3", "--run-id", "held", cwd=tmp_path)
        err = await finish(again)
        assert again.returncode == 1, err[-2000:]
        assert err.strip().splitlines()[-1] == (
            f"faultline: error: run 'held' ran already ({journal.resolve()} holds its episode 'held-cancel-00-t0'):"
            " give another run id, or none for a fresh one; to run what it left undone, resume it (--resume,"
            " RunSpec.resume)"
        ), err[-2000:]
    finally:
        process.terminate()
        await finish(process)


async def test_a_run_on_a_system_whose_journal_does_not_answer_says_so_in_one_line_after_its_results(
    nats_server: EmbeddedServer, tmp_path: Path
) -> None:
    """Workers alone on a server of their own: the episodes run (a journal that does not answer is no reason to
    refuse them), and the run then says, in one line and with a failing status, that nothing journaled them."""
    config = tmp_path / "faultline.toml"
    config.write_text("")
    worker = faultline(
        "worker", "--agents", "env,tool,user", "--nats", nats_server.url, "--config", str(config), cwd=tmp_path
    )
    try:
        bus = await Bus.connect(nats_server.url)
        try:  # a worker reads what is published once its consumers exist: the run's start must come after
            with anyio.fail_after(60):
                for agent in ("env", "tool", "user"):
                    while await bus.unacknowledged(f"agent-{agent}-0of1") is None:
                        assert worker.poll() is None, "the worker exited"
                        await anyio.sleep(0.05)
        finally:
            await bus.close()
        run = faultline(
            "run",
            "--nats",
            nats_server.url,
            "--config",
            str(config),
            "--tasks",
            "1",
            "--json",
            cwd=tmp_path,
            stdout=subprocess.PIPE,
        )
        out, err = (part.decode() for part in await anyio.to_thread.run_sync(lambda: run.communicate(timeout=90)))
    finally:
        worker.terminate()
        said = await finish(worker)
    assert f" serves env, tool, user on {nats_server.url}; Ctrl-C drains it and stops" in said  # started by hand
    assert run.returncode == 1
    assert json.loads(out.splitlines()[-1])["outcomes"] == {"success": 1}
    assert err.splitlines()[-1] == (
        "faultline: error: the run ended, but the journal did not catch up: no journal service answers on"
        " fl.svc.journal: start it (`faultline up`, or `faultline journal serve` on its host), or give it more"
        " time; the stream keeps the run's messages for it"
    )


async def test_a_worker_started_by_hand_names_its_shard_once_it_serves(
    nats_server: EmbeddedServer, tmp_path: Path
) -> None:
    """Workers of one agent on several hosts differ only by their shard: the line each says when it serves names
    it, as the journal service's does."""
    config = tmp_path / "faultline.toml"
    config.write_text("")
    worker = faultline(
        "worker", "--agents", "env", "--shard", "1/2", "--name", "w", "--nats", nats_server.url, "--config",
        str(config), cwd=tmp_path,
    )  # fmt: skip
    try:
        bus = await Bus.connect(nats_server.url)
        try:
            with anyio.fail_after(60):
                while await bus.unacknowledged("agent-env-1of2") is None:
                    assert worker.poll() is None, "the worker exited"
                    await anyio.sleep(0.05)
        finally:
            await bus.close()
    finally:
        worker.terminate()
        said = await finish(worker)
    assert f"worker w serves env (shard 1 of 2) on {nats_server.url}; Ctrl-C drains it and stops" in said
