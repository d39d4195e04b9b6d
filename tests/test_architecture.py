"""The shape of the package: layers (checked by `lint-imports` in `make lint`), no reaching into
another package's private modules, and replay that never loads NATS."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

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


@pytest.mark.parametrize(
    ("command", "ran"),
    [
        (["replay", "JOURNAL", "--json"], "faultline.replay._replay"),
        (["journal", "verify", "JOURNAL"], "faultline.journal._verify"),
    ],
)
def test_the_replay_and_verify_commands_load_no_nats(tmp_path: Path, command: list[str], ran: str) -> None:
    """`faultline replay` and `faultline journal verify`, run as a user runs them, import neither NATS
    nor the bus: only what they use, so that their start-up stays short."""
    journal = shutil.copy(Path(__file__).parent / "replay" / "golden" / "runs.db", tmp_path / "runs.db")
    args = [str(journal) if arg == "JOURNAL" else arg for arg in command]
    script = f"""
import sys
from faultline.cli import main
code = main({args!r})
print(code, sorted(m for m in sys.modules if m in ({ran!r}, "nats") or m.startswith(("nats.", "faultline.bus"))))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == f"0 [{ran!r}]"


@pytest.mark.slow
@pytest.mark.parametrize("options", [["--memory", "topk"], ["--helpers", "dce,tsa,tor,planner,verifier,memory:3"]])
def test_replay_of_a_journal_recorded_with_memory_or_helpers_loads_no_nats(tmp_path: Path, options: list[str]) -> None:
    """The tool agent asks the memory service and the helpers over the bus live; replaying what it
    recorded needs only the agents' code and the journal file."""
    journal = tmp_path / "run.sqlite"
    faultline = Path(sys.executable).parent / "faultline"
    run = [str(faultline), "run", "--tasks", "2", "--journal", str(journal), "--json", *options]
    subprocess.run(run, capture_output=True, text=True, check=True, cwd=tmp_path)
    script = f"""
import sys
import msgspec
from faultline.agents import EnvironmentHost, ToolAgent, UserSimulator
from faultline.agents.helpers import HELPER_CLASSES
from faultline.journal import JournalReader
from faultline.replay import Replayer
classes = {{c.name: c for c in (EnvironmentHost, ToolAgent, UserSimulator, *HELPER_CLASSES)}}
report = Replayer(classes.get, reexecute_tools=True).replay({str(journal)!r})
assert report.identical and report.messages > 0 and not report.skipped_agents, report
loaded = sorted(m for m in sys.modules if m == "nats" or m.startswith(("nats.", "faultline.bus", "faultline.runtime")))
recordings = [msgspec.msgpack.decode(row.body) for row in JournalReader({str(journal)!r}).rows() if row.kind == "recording"]
asked = any(r["call"] == "request" and r["request"]["service"] == "memory" for r in recordings)
print(report.agents, asked, loaded)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    agents, asked, loaded = out.strip().split(" ", 2)
    assert loaded == "[]"
    assert asked == str("--memory" in options)  # the memory run replayed the service's recorded answers
    assert int(agents) >= (2 * 3 if "--memory" in options else 2 * 8)  # per episode: the triad, plus five helpers


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


def test_a_run_and_a_campaign_report_say_one_sim_caveat_and_the_run_loads_no_report() -> None:
    """The caveat under numbers made with sim had a definition in the run API and another, worded otherwise, in the
    campaign report (which the run path must not load): a run and a campaign of the same model said different
    things. It is defined once, below both."""
    script = """
import sys
import faultline.api._run
from faultline import api
loaded = sorted(m for m in sys.modules if m.startswith("faultline.report"))
from faultline import core, report
notes = [api.SIM_NOTE is report.SIM_NOTE is core.SIM_NOTE]
notes.append(api.SIM_SYSTEM_NOTE is report.SIM_SYSTEM_NOTE is core.SIM_SYSTEM_NOTE)
print(loaded, notes)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[] [True, True]"


def test_no_modules_import_each_other() -> None:
    """A circle of imports is one idea split in two, or a shared piece in the wrong module: the piece
    moves to a module both import (an import inside a function only hides the circle, and grimp sees it)."""
    graph = grimp.build_graph("faultline")
    imports = {module: graph.find_modules_directly_imported_by(module) for module in graph.modules}
    pairs = sorted(f"{a} <-> {b}" for a in imports for b in imports[a] if a < b and a in imports[b])
    assert pairs == []
    cycles = sorted(
        " -> ".join((a, *chain)) for a in imports for b in imports[a] if (chain := graph.find_shortest_chain(b, a))
    )
    assert cycles == []


def test_the_author_module_loads_no_nats_and_no_runtime() -> None:
    """`faultline.agent` is what an agent's own package imports; it must not drag in the live system."""
    script = """
import sys
import faultline.agent
print(sorted(m for m in sys.modules if m == "nats" or m.startswith(("nats.", "faultline.bus", "faultline.runtime"))))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
