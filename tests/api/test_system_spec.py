"""`RunSpec(system=...)` takes a system's class as readily as its path."""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec
import pytest

from faultline._errors import ConfigError
from faultline.api import RunSpec, with_system
from faultline.core import BUILTIN_SYSTEM
from faultline.runtime import Config
from tests.replay.test_fork_topics import Gossip

GOSSIP = "tests.replay.test_fork_topics:Gossip"


def test_a_system_class_is_named_by_its_path_as_the_journal_and_the_workers_need_it(tmp_path: Path) -> None:
    """`RunSpec(system=Gossip)` ended in a traceback (`type object 'Gossip' has no attribute 'partition'`)."""
    inputs = tmp_path / "inputs.jsonl"
    inputs.write_text('{"id": "a", "secret": "42"}\n')
    config, records = with_system(Config(), RunSpec(system=Gossip, inputs=inputs))
    assert config.system.class_ == GOSSIP
    assert records is not None and [record.id for record in records] == ["a"]
    by_path, _ = with_system(Config(), RunSpec(system=GOSSIP, inputs=inputs))
    assert by_path.system == config.system


def test_a_system_class_of_a_script_is_refused_before_any_process_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A script's own class loaded here, then every worker failed to import `__main__:Script` and the run ended
    in a traceback saying a worker did not become ready."""
    script = type(Gossip)("Script", (Gossip,), {"__module__": "__main__"})
    monkeypatch.setattr(sys.modules["__main__"], "Script", script, raising=False)
    inputs = tmp_path / "inputs.jsonl"
    inputs.write_text('{"id": "a", "secret": "42"}\n')
    with pytest.raises(ConfigError, match="^system Script is defined in __main__, .*: move it into a module"):
        with_system(Config(), RunSpec(system=script, inputs=inputs))


def test_the_built_in_system_named_for_a_run_replaces_the_configured_one() -> None:
    """`run --system tool-use` in a folder whose faultline.toml names a system of its own left that system in the
    workers' configuration: they ran its agents, and every retail episode waited for its timeout."""
    config = Config()
    configured = msgspec.structs.replace(config, system=msgspec.structs.replace(config.system, class_=GOSSIP))
    chosen, records = with_system(configured, RunSpec(system=BUILTIN_SYSTEM, domain="retail"))
    assert records is None
    assert chosen.system.class_ == BUILTIN_SYSTEM
