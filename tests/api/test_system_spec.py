"""`RunSpec(system=...)` takes a system's class as readily as its path."""

from __future__ import annotations

from pathlib import Path

from faultline.api import RunSpec, with_system
from faultline.runtime import Config
from tests.replay.test_fork_topics import Gossip


def test_a_system_class_is_named_by_its_path_as_the_journal_and_the_workers_need_it(tmp_path: Path) -> None:
    """`RunSpec(system=Gossip)` ended in a traceback (`type object 'Gossip' has no attribute 'partition'`)."""
    inputs = tmp_path / "inputs.jsonl"
    inputs.write_text('{"id": "a", "secret": "42"}\n')
    config, records = with_system(Config(), RunSpec(system=Gossip, inputs=inputs))
    assert config.system.class_ == "tests.replay.test_fork_topics:Gossip"
    assert records is not None and [record.id for record in records] == ["a"]
    by_path, _ = with_system(Config(), RunSpec(system="tests.replay.test_fork_topics:Gossip", inputs=inputs))
    assert by_path.system == config.system
