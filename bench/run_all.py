"""Run every benchmark in this folder, one after another, and say which ones failed.

Benchmarks are the `bench/*.py` scripts other than this one and the helper
modules; each runs with its defaults, from the repository root, in this
interpreter. Name some to run only those (`python -m bench.run_all bus_throughput`).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
NOT_BENCHMARKS = {"run_all.py", "agents.py"}
TIMEOUT_S = 900.0


def benchmarks() -> list[Path]:
    return sorted(p for p in BENCH.glob("*.py") if p.name not in NOT_BENCHMARKS and not p.name.startswith("_"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="benchmarks to run (file names without .py); default all")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds before one benchmark is stopped")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = parser.parse_args()

    found = {p.stem: p for p in benchmarks()}
    if args.list:
        print("\n".join(found))
        return 0
    unknown = sorted(set(args.names) - found.keys())
    if unknown:
        parser.error(f"no benchmark named {', '.join(unknown)} (have: {', '.join(found)})")
    chosen = [found[name] for name in args.names] if args.names else list(found.values())

    outcomes: list[tuple[str, str, float]] = []
    for script in chosen:
        print(f"\n=== {script.stem} ===", flush=True)
        start = time.perf_counter()
        try:
            code = subprocess.run(
                [sys.executable, "-m", f"bench.{script.stem}"], cwd=BENCH.parent, timeout=args.timeout
            ).returncode
            outcome = "ok" if code == 0 else f"exit {code}"
        except subprocess.TimeoutExpired:
            outcome = f"stopped after {args.timeout:g}s"
        outcomes.append((script.stem, outcome, time.perf_counter() - start))

    print("\n=== summary ===")
    for name, outcome, seconds in outcomes:
        print(f"{name:<28} {outcome:<24} {seconds:6.1f}s")
    return 0 if all(outcome == "ok" for _, outcome, _ in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
