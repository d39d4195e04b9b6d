"""Plugins: a package that registers entry points is found by name, as Faultline's own built-ins are;
anything named `package.module:attr` loads too; and every name that does not load is the same one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from faultline import PluginError
from faultline.core import PluginKind, load_agent_class, load_plugin, registered
from faultline.envs import load_domain
from faultline.runtime import Config, make_backend, parse_config
from faultline.runtime.models import SimBackend

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def installed(site: Path, name: str, entry_points: str) -> Path:
    """A distribution's metadata in `site`, as pip leaves it: what makes its entry points visible."""
    info = site / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)
    return site


def test_the_built_ins_are_registered_like_any_package() -> None:
    assert {"env", "tool", "user", "dce", "tsa", "tor", "planner", "user_context", "verifier", "fama", "scorer"} == set(
        registered("agent")
    )
    assert {"retail", "phone"} <= set(registered("domain"))
    assert {"sim", "openai", "scripted"} <= set(registered("model"))
    assert {"tool-use"} <= set(registered("system"))
    assert load_agent_class("tool").name == "tool"
    assert isinstance(make_backend(Config(), "tool"), SimBackend)


@pytest.mark.parametrize("kind", ["agent", "domain", "model", "system"])
@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("nope", "not a registered name (registered: "),
        ("no_such_package.module:Thing", "no module named 'no_such_package' (is it installed, or in a --plugin-path"),
        ("faultline.core:Nothing", "module 'faultline.core' has no attribute 'Nothing'"),
        ("faultline.core:", "not a registered name"),
        ("mypackage.desk.HelpDesk", "nor a package.module:Name path; did you mean 'mypackage.desk:HelpDesk'?"),
    ],
)
def test_a_name_that_does_not_load_is_one_line_that_says_which_and_why(kind: PluginKind, name: str, why: str) -> None:
    with pytest.raises(PluginError) as caught:
        load_plugin(kind, name)
    message = str(caught.value)
    assert message.startswith(f"cannot load {kind} {name!r}: ")
    assert why in message
    assert "\n" not in message


def test_a_module_that_fails_to_import_is_named_with_its_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "broken_plugin_module.py").write_text("import no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError, match="importing 'broken_plugin_module' failed: No module named 'no_such_dep"):
        load_plugin("agent", "broken_plugin_module:Agent")


def test_an_object_of_the_wrong_kind_is_refused_in_the_same_words() -> None:
    with pytest.raises(
        PluginError, match=r"^cannot load agent 'faultline.envs:Domain': class Domain is not a faultline"
    ):
        load_agent_class("faultline.envs:Domain")
    with pytest.raises(PluginError, match=r"^cannot load domain 'faultline.core:Agent': it is a type, not a Domain"):
        load_domain("faultline.core:Agent")
    config = parse_config({"models": {"tool": {"backend": "faultline.core:DEFAULT_PREFIX"}}})
    with pytest.raises(PluginError, match=r"^cannot load model 'faultline.core:DEFAULT_PREFIX': a str is not a"):
        make_backend(config, "tool")


@pytest.mark.slow
def test_a_domain_registered_by_an_installed_package_runs_by_its_name(tmp_path: Path) -> None:
    """lendbench's adapter, registered as `lendbench` by a package's metadata: `run` and its workers (separate
    processes) find it by that name alone, with no plugin path, and `replay` does too."""
    site = installed(
        tmp_path / "site", "lendbench-faultline", "[faultline.domains]\nlendbench = lendbench_faultline:LendBench\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(EXAMPLES)])}
    faultline = str(Path(sys.executable).parent / "faultline")
    journal = tmp_path / "run.sqlite"
    run = [faultline, "run", "--domain", "lendbench?split=test", "--tasks", "2", "--journal", str(journal), "--json"]
    done = subprocess.run(run, capture_output=True, text=True, env=env, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["episodes"] == 2
    replayed = subprocess.run([faultline, "replay", str(journal)], capture_output=True, text=True, env=env, check=False)
    assert replayed.returncode == 0, replayed.stderr
    assert "identical" in replayed.stdout
