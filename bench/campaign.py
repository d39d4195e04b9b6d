"""A sim fault campaign over every registered fault type: wall time per cell, and the report's time.

Runs `faultline campaign --model sim --faults all --tasks N` (default 20 retail tasks, one
trial) into a temporary folder; each cell starts a system of its own (nats-server, journal
service, workers) and runs the tasks with its fault applied once per episode. Then times
`faultline.report.campaign_report` on the campaign's journals (best of 3, in-process), which
reads every cell's journal, decodes the rows the detectors use and computes RS, O, L, S.
These numbers measure the runtime's mechanisms with a simulator; they say nothing about
any model.

    python -m bench.campaign [--tasks N] [--keep DIR] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from faultline.api import SIM_NOTE
from faultline.report import campaign_report, read_manifest

REPORT_ROUNDS = 3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--keep", type=Path, help="run the campaign in this folder and keep it")
    parser.add_argument("--json", type=Path, help="also write the numbers to this file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="faultline-bench-campaign-") as scratch:
        folder = args.keep or Path(scratch) / "campaign"
        command = [sys.executable, "-m", "faultline.cli", "campaign", "--model", "sim", "--faults", "all"]
        command += ["--tasks", str(args.tasks), "--out", str(folder)]
        started = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        campaign_s = time.perf_counter() - started
        manifest = read_manifest(folder)
        report_s = []
        for _ in range(REPORT_ROUNDS):
            began = time.perf_counter()
            report = campaign_report(folder)
            report_s.append(time.perf_counter() - began)
    cells = {cell.name: cell.seconds for cell in manifest.cells}
    table = Table(title=f"sim campaign, {args.tasks} retail tasks x 1 trial (measures the mechanism, not a model)")
    table.add_column("cell")
    table.add_column("wall time", justify="right")
    table.add_column("RS_f", justify="right")
    rs = {row.fault: row.rs for row in report.faults}
    for name, seconds in cells.items():
        value = rs.get(name)
        table.add_row(name, f"{seconds:.1f} s", "" if name not in rs else "-" if value is None else f"{value:.2f}")
    table.caption = (
        f"campaign {campaign_s:.1f} s for {len(cells)} cells; report {min(report_s) * 1000:.0f} ms"
        f" over {report.summary.episodes} episodes (best of {REPORT_ROUNDS})"
    )
    Console().print(table)
    if args.json:
        numbers = {
            "cells_s": cells,
            "campaign_s": campaign_s,
            "report_s": min(report_s),
            "episodes": report.summary.episodes,
            "note": SIM_NOTE,
        }
        args.json.write_text(json.dumps(numbers, indent=2))


if __name__ == "__main__":
    main()
