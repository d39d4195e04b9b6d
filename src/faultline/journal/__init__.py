"""The journal: an append-only SQLite copy of the stream, hash-chained, for replay and analysis.

`Journal` appends (one writer per file), `JournalReader` reads (any number, read-only),
`verify` recomputes the chain, `export_jsonl` / `import_jsonl` move a journal as text,
`diff_episodes` aligns two episodes and finds where they part ways, `elapsed` times an
episode's rows (a fork's live part without the time since its source ran), `write_view` writes the
HTML viewer. A journal set (`create_set`) is one journal written as a file per shard; every
reader here takes it wherever it takes a file."""

from typing import TYPE_CHECKING

from faultline._lazy import lazy_exports

if TYPE_CHECKING:
    from faultline.journal._describe import DESCRIBE_WIDTH, describe_body
    from faultline.journal._diff import EpisodeDiff, Step, diff_episodes, forked_from
    from faultline.journal._export import ExportedRow, export_jsonl, export_row, import_jsonl
    from faultline.journal._reader import AgentCost, EpisodeFilter, EpisodeSummary, JournalReader, check_journal_target
    from faultline.journal._rows import GENESIS, Incoming, JournalRow
    from faultline.journal._schema import SCHEMA_VERSION, JournalSettings, is_sqlite_file
    from faultline.journal._set import (
        MAX_SHARDS,
        absent_journal,
        create_set,
        is_journal_set,
        journal_exists,
        journal_files,
        read_manifest,
        shard_path,
    )
    from faultline.journal._timing import elapsed
    from faultline.journal._verify import VerifyReport, verify
    from faultline.journal._view import ViewStats, attributed_steps, write_view
    from faultline.journal._view_server import ViewServer
    from faultline.journal._writer import Journal


__all__ = [
    "ViewServer",
    "attributed_steps",
    "absent_journal",
    "check_journal_target",
    "create_set",
    "is_journal_set",
    "journal_exists",
    "journal_files",
    "read_manifest",
    "shard_path",
    "DESCRIBE_WIDTH",
    "GENESIS",
    "MAX_SHARDS",
    "SCHEMA_VERSION",
    "AgentCost",
    "EpisodeDiff",
    "EpisodeFilter",
    "EpisodeSummary",
    "ExportedRow",
    "Incoming",
    "Journal",
    "JournalReader",
    "JournalRow",
    "JournalSettings",
    "Step",
    "VerifyReport",
    "ViewStats",
    "describe_body",
    "diff_episodes",
    "elapsed",
    "export_jsonl",
    "export_row",
    "forked_from",
    "import_jsonl",
    "is_sqlite_file",
    "verify",
    "write_view",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    globals(),
    {
        "faultline.journal._describe": ("DESCRIBE_WIDTH", "describe_body"),
        "faultline.journal._diff": ("EpisodeDiff", "Step", "diff_episodes", "forked_from"),
        "faultline.journal._export": ("ExportedRow", "export_jsonl", "export_row", "import_jsonl"),
        "faultline.journal._reader": (
            "AgentCost",
            "EpisodeFilter",
            "EpisodeSummary",
            "JournalReader",
            "check_journal_target",
        ),
        "faultline.journal._rows": ("GENESIS", "Incoming", "JournalRow"),
        "faultline.journal._schema": ("SCHEMA_VERSION", "JournalSettings", "is_sqlite_file"),
        "faultline.journal._set": (
            "MAX_SHARDS",
            "absent_journal",
            "create_set",
            "is_journal_set",
            "journal_exists",
            "journal_files",
            "read_manifest",
            "shard_path",
        ),
        "faultline.journal._timing": ("elapsed",),
        "faultline.journal._verify": ("VerifyReport", "verify"),
        "faultline.journal._view": ("ViewStats", "attributed_steps", "write_view"),
        "faultline.journal._view_server": ("ViewServer",),
        "faultline.journal._writer": ("Journal",),
    },
)
