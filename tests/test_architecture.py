"""The shape of the package: layers (checked by `lint-imports` in `make lint`), no reaching into
another package's private modules, and replay that never loads NATS."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp

SHARED = {"faultline._errors", "faultline._logging"}
"""Top-level modules every package may import: the error tree and the logging set-up."""


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _private(module: str) -> bool:
    return any(part.startswith("_") for part in module.split(".")[2:])


def test_no_package_imports_another_packages_private_modules() -> None:
    graph = grimp.build_graph("faultline")
    reaching = sorted(
        f"{importer} -> {imported}"
        for importer in graph.modules
        for imported in graph.find_modules_directly_imported_by(importer)
        if imported not in SHARED and _private(imported) and _package(imported) != _package(importer)
    )
    assert reaching == []


def test_replay_runs_without_loading_nats(tmp_path: Path) -> None:
    journal = shutil.copy(Path(__file__).parent / "replay" / "golden" / "runs.db", tmp_path / "runs.db")
    script = f"""
import sys
from faultline.agents import EnvironmentHost, ToolAgent, UserSimulator
from faultline.replay import Replayer
classes = {{c.name: c for c in (EnvironmentHost, ToolAgent, UserSimulator)}}
report = Replayer(classes.get, reexecute_tools=True).replay({str(journal)!r})
assert report.identical and report.messages > 0, report
loaded = sorted(m for m in sys.modules if m == "nats" or m.startswith(("nats.", "faultline.bus", "faultline.runtime")))
print(loaded)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_run_without_memory_loads_no_vector_search(tmp_path: Path) -> None:
    """`faultline run` starts in well under a second of imports: FAISS, numpy and sqlite-utils (which
    imports numpy) load only where memory is used or a journal file is created (the journal service)."""
    script = f"""
import sys
from faultline.cli import main
code = main(["run", "--tasks", "1", "--journal", {str(tmp_path / "run.sqlite")!r}, "--json"])
print(code, sorted(m for m in ("faiss", "numpy", "sqlite_utils") if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "0 []"
