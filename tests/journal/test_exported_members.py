"""The public surface of `faultline.journal` is pinned: adding or dropping a name is deliberate."""

from __future__ import annotations

import faultline.journal as journal


def test_the_public_names_are_exactly_these() -> None:
    assert sorted(journal.__all__) == sorted(
        [
            "DESCRIBE_WIDTH",
            "GENESIS",
            "MAX_SHARDS",
            "SCHEMA_VERSION",
            "EpisodeDiff",
            "EpisodeFilter",
            "AgentCost",
            "EpisodeSummary",
            "ExportedRow",
            "Incoming",
            "Journal",
            "JournalReader",
            "JournalRow",
            "JournalSettings",
            "Step",
            "VerifyReport",
            "ViewServer",
            "ViewStats",
            "absent_journal",
            "attributed_steps",
            "check_journal_target",
            "create_set",
            "is_journal_set",
            "journal_exists",
            "journal_files",
            "read_manifest",
            "shard_path",
            "describe_body",
            "diff_episodes",
            "elapsed",
            "export_jsonl",
            "export_row",
            "forked_from",
            "is_sqlite_file",
            "import_jsonl",
            "verify",
            "write_view",
        ]
    )


def test_every_public_name_is_defined_and_owned_by_the_package() -> None:
    for name in journal.__all__:
        value = getattr(journal, name)
        module = getattr(value, "__module__", "faultline.journal")
        assert module.startswith("faultline.journal"), name
