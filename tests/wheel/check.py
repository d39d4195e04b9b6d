"""The package as a user gets it: build the sdist and the wheel, install the wheel away from the source tree, run it.

`make wheel` runs this, and `make test` runs `make wheel`. It copies the files a clone would hold (with
uncommitted changes) to a temporary directory, builds both archives there with uv, checks what each
holds (a package that the build backend did not find fails here, by name), installs the locked runtime
dependencies and then the wheel into a fresh virtual environment, and runs the installed `faultline`
from an empty directory, where the source tree cannot be imported. Standard library only, so that
nothing from the project's own environment leaks into what is checked.

    python tests/wheel/check.py --uv .uv/bin/uv --python python3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
STARTED = time.monotonic()
PACKAGE = "faultline"
NEVER_SHIPPED = {"tests", "test", "bench", "docs", "docker", "examples"}
"""Directories that sit beside src/ and must never turn up inside the package."""

BUILD_TIMEOUT_S = 300
INSTALL_TIMEOUT_S = 600
COMMAND_TIMEOUT_S = 300
"""Limits for one step: a build, an install, one run of the installed command (`faultline run` included)."""

LIST_HELP = """
import argparse, contextlib, io, json
from faultline.cli import build_parser, main

def walk(parser, path):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen = set()
            for name, sub in action.choices.items():
                if id(sub) not in seen:  # an alias names the same parser twice
                    seen.add(id(sub))
                    yield (*path, name)
                    yield from walk(sub, (*path, name))

failures = []
paths = list(walk(build_parser(), ()))
for path in paths:
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            main([*path, "--help"])
        code = "returned instead of exiting"
    except SystemExit as stop:
        code = stop.code
    usage = "usage: faultline " + " ".join(path)
    if code not in (0, None) or not out.getvalue().startswith(usage):
        failures.append(f"faultline {' '.join(path)} --help: exit {code}\\n{out.getvalue()[-2000:]}")
print(json.dumps({"commands": [" ".join(p) for p in paths], "failures": failures}))
"""
"""Runs in the fresh environment: every command and nested subcommand the parser knows, each through
`main([..., "--help"])` as the console script calls it, in one process (one process each would take a
minute of imports)."""


class CheckFailed(Exception):
    """One step of the check went wrong; the message says which and shows the output."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--uv", default=str(ROOT / ".uv" / "bin" / "uv"), help="the uv to build and install with")
    parser.add_argument("--python", default="python3", help="interpreter for the build and the fresh environment")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _stop)  # so that the temporary directory is removed on `kill` too
    scratch = Path(tempfile.mkdtemp(prefix="faultline-wheel-"))
    try:
        _check(Path(args.uv).resolve() if os.sep in args.uv else Path(args.uv), args.python, scratch)
    except CheckFailed as failure:
        print(f"wheel: FAILED: {failure}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    _step("ok")
    return 0


def _stop(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def _check(uv: Path, python: str, scratch: Path) -> None:
    tree, dist = scratch / "tree", scratch / "dist"
    _step("copying the sources a clone would hold")
    _copy_sources(tree)
    _step("building the sdist, then the wheel from it")
    _run([str(uv), "build", "--quiet", "--python", python, "--out-dir", str(dist)], cwd=tree, timeout=BUILD_TIMEOUT_S)
    sdist, wheel = _one(dist, "*.tar.gz"), _one(dist, "*.whl")
    _step(f"checking {sdist.name}")
    _check_sdist(sdist)
    _step(f"checking {wheel.name}")
    version = _check_wheel(wheel, tree / "src")
    _step("installing the locked runtime dependencies, then the wheel, into a fresh environment")
    venv = _install(uv, python, tree, wheel, scratch)
    _use(venv, version, tree, scratch)


def _install(uv: Path, python: str, tree: Path, wheel: Path, scratch: Path) -> Path:
    """A new virtual environment with the versions and hashes of uv.lock, then the wheel without resolving again."""
    venv, requirements = scratch / "venv", scratch / "requirements.txt"
    venv_python = str(venv / "bin" / "python")
    _run([str(uv), "venv", "--quiet", "--python", python, str(venv)], cwd=scratch, timeout=INSTALL_TIMEOUT_S)
    export = ["export", "--quiet", "--locked", "--no-dev", "--no-emit-project", "--format", "requirements-txt"]
    _run([str(uv), *export, "--output-file", str(requirements)], cwd=tree, timeout=INSTALL_TIMEOUT_S)
    pip = [str(uv), "pip", "install", "--quiet", "--python", venv_python]
    _run([*pip, "--require-hashes", "-r", str(requirements)], cwd=scratch, timeout=INSTALL_TIMEOUT_S)
    _run([*pip, "--no-deps", str(wheel)], cwd=scratch, timeout=INSTALL_TIMEOUT_S)
    # the wheel's own requirements are met by the locked versions just installed
    _run([str(uv), "pip", "check", "--quiet", "--python", venv_python], cwd=scratch, timeout=INSTALL_TIMEOUT_S)
    return venv


def _use(venv: Path, version: str, tree: Path, scratch: Path) -> None:
    """The installed package, run from an empty directory with a clean environment: nothing of the tree is importable."""
    work = scratch / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"

    def installed(*command: str) -> str:
        return _run([str(venv / "bin" / command[0]), *command[1:]], cwd=work, env=env, timeout=COMMAND_TIMEOUT_S)

    _step("importing faultline from the fresh environment")
    where = "import faultline, sysconfig; print(faultline.__file__); print(sysconfig.get_paths()['purelib'])"
    module, site_packages = (Path(line) for line in installed("python", "-c", where).splitlines()[-2:])
    if not module.is_relative_to(site_packages) or module.is_relative_to(ROOT):
        raise CheckFailed(f"faultline was imported from {module}, not from the environment's {site_packages}")

    _step("faultline --version, faultline --help")
    printed = installed("faultline", "--version").strip()
    if printed != f"{PACKAGE} {version}":
        raise CheckFailed(f"`faultline --version` printed {printed!r}, expected {PACKAGE + ' ' + version!r}")
    installed("faultline", "--help")

    _step("every command's and subcommand's --help")
    listed = _last_json(installed("python", "-c", LIST_HELP))
    if listed["failures"]:
        raise CheckFailed("--help failed:\n" + "\n".join(listed["failures"]))
    _step(f"  {len(listed['commands'])} of them")

    _step("faultline run --tasks 2, then replay and view of its journal")
    journal = "runs/wheel.sqlite"
    installed("faultline", "run", "--tasks", "2", "--journal", journal)
    replayed = _last_json(installed("faultline", "replay", journal, "--json"))
    if replayed.get("episodes") != 2 or replayed.get("identical") is not True:
        raise CheckFailed(f"`faultline replay {journal}` expected 2 identical episodes, got {replayed}")
    page = installed("faultline", "view", journal).strip().splitlines()[-1]
    html = work / "runs" / "wheel.html"
    if (work / page).resolve() != html.resolve() or not html.is_file() or html.stat().st_size == 0:
        raise CheckFailed(f"`faultline view {journal}` printed {page!r}; expected it to write {html}, non-empty")

    # The module for authors of agents and domains is checked once it exists in the tree.
    if (tree / "src" / PACKAGE / "agent.py").is_file() or (tree / "src" / PACKAGE / "agent").is_dir():
        _step("import faultline.agent")
        installed("python", "-c", "import faultline.agent")


def _copy_sources(target: Path) -> None:
    """The tracked and the not-ignored untracked files, as they are now. Build leftovers stay behind: an old
    *.egg-info/SOURCES.txt in the tree would put back into the archives a package the backend no longer finds."""
    listed = _run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, timeout=60)
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # a file deleted but not yet staged is still listed
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def _check_sdist(sdist: Path) -> None:
    """Under src/ only the package (and the build backend's egg-info), and nothing from beside src/ inside it."""
    with tarfile.open(sdist) as archive:
        names = [Path(name) for name in archive.getnames()]
    top = {name.parts[0] for name in names}
    if len(top) != 1:
        raise CheckFailed(f"{sdist.name}: expected one top directory, found {sorted(top)}")
    under_src = [name.parts[2:] for name in names if len(name.parts) > 2 and name.parts[1] == "src"]
    strays = sorted({parts[0] for parts in under_src} - {PACKAGE, f"{PACKAGE}.egg-info"})
    if strays:
        raise CheckFailed(f"{sdist.name}: src/ holds more than the package: {strays}")
    inside = ["/".join(parts) for parts in under_src if parts[0] == PACKAGE and NEVER_SHIPPED & set(parts[1:-1])]
    if inside:
        raise CheckFailed(f"{sdist.name}: the package holds {inside[:5]}, which belong beside src/")


def _check_wheel(wheel: Path, src: Path) -> str:
    """Only the package and its dist-info; py.typed; every module of every package under src/. Returns the version."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (metadata,) = [name for name in names if name.endswith(".dist-info/METADATA")]
        headers = archive.read(metadata).decode().split("\n\n", 1)[0].splitlines()
    version = next(line.split(":", 1)[1].strip() for line in headers if line.startswith("Version:"))
    allowed = {PACKAGE, f"{PACKAGE}-{version}.dist-info"}
    strays = sorted({name.split("/", 1)[0] for name in names} - allowed)
    if strays:
        raise CheckFailed(f"{wheel.name}: holds more than {sorted(allowed)}: {strays}")
    inside = sorted(name for name in names if NEVER_SHIPPED & set(name.split("/")[1:-1]))
    if inside:
        raise CheckFailed(f"{wheel.name}: the package holds {inside[:5]}, which belong beside src/")
    if f"{PACKAGE}/py.typed" not in names:
        raise CheckFailed(f"{wheel.name}: no {PACKAGE}/py.typed, so type checkers would ignore the package's hints")
    sources = {p.relative_to(src).as_posix() for p in (src / PACKAGE).rglob("*.py")}
    missing = sources - names
    if missing:
        packages = sorted({name.rsplit("/", 1)[0].replace("/", ".") for name in missing})
        raise CheckFailed(
            f"{wheel.name}: the build left out {len(missing)} modules of src/, in {', '.join(packages)}; "
            "is a package excluded in pyproject.toml's [tool.setuptools.packages.find]?"
        )
    return version


def _run(command: list[str], *, cwd: Path, timeout: float, env: dict[str, str] | None = None) -> str:
    """The command's stdout; its exit status other than 0, or the limit passed, fails with its output."""
    shown = " ".join(Path(command[0]).name if i == 0 else part for i, part in enumerate(command))
    try:
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CheckFailed(f"`{shown}` did not end within {timeout:.0f} s") from None
    except OSError as exc:
        raise CheckFailed(f"`{shown}` could not start: {exc}") from None
    if done.returncode != 0:
        output = (done.stdout + done.stderr).strip()[-4000:]
        raise CheckFailed(f"`{shown}` exited with {done.returncode} (in {cwd}):\n{output}")
    return done.stdout


def _one(folder: Path, pattern: str) -> Path:
    found = sorted(folder.glob(pattern))
    if len(found) != 1:
        raise CheckFailed(f"expected one {pattern} in {folder}, found {[p.name for p in found]}")
    return found[0]


def _last_json(text: str) -> dict[str, Any]:
    """The object on the output's last line (a --json summary)."""
    lines = text.strip().splitlines()
    try:
        value = json.loads(lines[-1])
    except (IndexError, ValueError):
        raise CheckFailed(f"expected a JSON object on the last line of:\n{text[-2000:]}") from None
    if not isinstance(value, dict):
        raise CheckFailed(f"expected a JSON object, got {lines[-1]!r}")
    return value


def _step(what: str) -> None:
    print(f"wheel: {time.monotonic() - STARTED:3.0f} s  {what}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
