"""FAMA's Table 2 and Figures 4 and 5, laid out from what `fama loop` folders recorded (`loop.json`).

Table 2, per domain: a row per (model, round), the tokens the tool agent and the helpers generated per
episode (min, max, median, mean), the tool agent's and the helpers' means, the overhead (the helpers'
share) and the latency per episode. Figure 4: per (model, round), how many analysed failures the
orchestrator named each main error category for. Figure 5: how many the mitigation agent recommended
each helper for. Round 0 runs without helpers (the paper's ReAct rows); the later rounds with the
helpers the analysis chose (its FAMA rows). Every number is a recorded one: nothing is analysed again.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import msgspec

from faultline.cli._fama_counts import SIM_JUDGE_NOTE
from faultline.cli._fama_loop import LoopRecord, Round, read_loop, rosters_text
from faultline.cli._paper import PaperReport, PaperTable
from faultline.core import HELPERS, helper_name, memory_turns
from faultline.report import SIM_NOTE
from faultline.services.fama import CATEGORIES, SHORT

HELPER_TITLES = {
    "dce": "DCE",
    "tsa": "TSA",
    "tor": "TOR",
    "planner": "Planner",
    "memory": "Memory",
    "verifier": "Verifier",
}
"""Figure 5's labels of the helpers."""

Loop = tuple[str, LoopRecord]
"""An input folder and its record."""


def _method(r: Round) -> str:
    """A round as a row of the paper's tables: round 0 is the baseline without helpers."""
    return f"round {r.round}: {rosters_text(r.roster, r.rosters)}"


def _rows(loops: list[Loop]) -> list[tuple[str, LoopRecord, Round]]:
    return [(folder, record, r) for folder, record in loops for r in record.rounds]


def _key(folder: str, record: LoopRecord, r: Round) -> dict[str, Any]:
    s = record.settings
    return {"input": folder, "domain": s.domain, "model": s.model, "round": r.round, "roster": r.roster}


def _table2(loops: list[Loop]) -> list[PaperTable]:
    by_domain: dict[str, list[tuple[str, LoopRecord, Round]]] = defaultdict(list)
    for folder, record, r in _rows(loops):
        by_domain[record.settings.domain].append((folder, record, r))
    tables = []
    for domain, rows in by_domain.items():
        grid = []
        for _, record, r in rows:
            o = r.overhead
            numbers = (
                [f"{o.min_tokens:.0f}", f"{o.max_tokens:.0f}", f"{o.median_tokens:.1f}", f"{o.mean_tokens:.1f}",
                 f"{o.assistant_tokens:.1f}", f"{o.helper_tokens:.1f}", f"{o.share:.1%}"]
                if o is not None else ["-"] * 7
            )  # fmt: skip
            grid.append([record.settings.model, _method(r), *numbers, f"{r.latency_s:.2f}"])
        tables.append(
            PaperTable(
                kind="table2",
                title=f"FAMA Table 2: token and latency cost, {domain}",
                head=[
                    "model",
                    "method",
                    "Min Tokens",
                    "Max Tokens",
                    "Median Tokens",
                    "Avg Tokens",
                    "Assistant Tokens",
                    "Overhead Tokens",
                    "Overhead (%)",
                    "Latency (seconds)",
                ],  # fmt: skip
                rows=grid,
                records=[
                    {**_key(f, rec, r), "overhead": msgspec.to_builtins(r.overhead), "latency_s": r.latency_s}
                    for f, rec, r in rows
                ],
                caption="tokens: generated (completion) tokens per episode, the tool agent's and the helpers'"
                " together; Assistant, Overhead Tokens: the tool agent's and the helpers' means; Overhead: the"
                " helpers' share of the mean; Latency: per episode. Round 0 runs without helpers (the paper's"
                " ReAct rows), later rounds with the helpers the analysis chose (its FAMA rows)",
                right=2,
            )
        )
    return tables


def _figure4(loops: list[Loop]) -> PaperTable:
    rows = _rows(loops)
    return PaperTable(
        kind="figure4",
        title="FAMA Figure 4: main error categories the orchestrator named",
        head=["domain", "model", "method", *(SHORT[c.id] for c in CATEGORIES), "failures analysed"],
        rows=[
            [
                rec.settings.domain,
                rec.settings.model,
                _method(r),
                *(str(r.categories.get(c.id, 0)) for c in CATEGORIES),
                f"{r.analysed}/{r.failures}",
            ]
            for _, rec, r in rows
        ],  # fmt: skip
        records=[
            {**_key(f, rec, r), "categories": r.categories, "failures": r.failures, "analysed": r.analysed}
            for f, rec, r in rows
        ],
        caption="analysed failures naming each category among their main errors (a failure may name several): "
        + "; ".join(f"{SHORT[c.id]} {c.title}" for c in CATEGORIES),
        right=3,
    )


def _helper_counts(recommended: dict[str, int]) -> dict[str, str]:
    """Figure 5's cells: per helper, the failures it was recommended for, memory's with the K it was given."""
    counts: dict[str, int] = defaultdict(int)
    ks: dict[str, set[int]] = defaultdict(set)
    for entry, n in recommended.items():
        counts[helper_name(entry)] += n
        if helper_name(entry) == "memory":
            ks["memory"].add(memory_turns(entry))
    return {
        h: f"{counts[h]}" + (f" (K {','.join(map(str, sorted(ks[h])))})" if ks[h] else "") for h in HELPERS if counts[h]
    }


def _figure5(loops: list[Loop]) -> PaperTable:
    rows = _rows(loops)
    grid = []
    for _, rec, r in rows:
        cells = _helper_counts(r.recommended)
        grid.append([rec.settings.domain, rec.settings.model, _method(r), *(cells.get(h, "0") for h in HELPERS)])
    return PaperTable(
        kind="figure5",
        title="FAMA Figure 5: helpers the mitigation agent recommended",
        head=["domain", "model", "method", *(HELPER_TITLES[h] for h in HELPERS)],
        rows=grid,
        records=[{**_key(f, rec, r), "recommended": r.recommended, "analysed": r.analysed} for f, rec, r in rows],
        caption="analysed failures the mitigation agent recommended each helper for; Memory counts every K (the"
        " turns it keeps) it was given",
        right=3,
    )


def fama_report(folders: list[Path]) -> PaperReport:
    """Table 2 and Figures 4 and 5 of the `fama loop` folders, in the order given."""
    loops = [(str(folder), read_loop(folder)) for folder in folders]
    sim = any(rec.settings.model == "sim" for _, rec in loops)
    judged_by_sim = any(rec.settings.judge == "sim" for _, rec in loops)
    note = "; ".join(n for n, on in ((SIM_NOTE, sim), (SIM_JUDGE_NOTE, judged_by_sim)) if on)
    summary = {
        "paper": "fama",
        "inputs": [f for f, _ in loops],
        "loops": [msgspec.to_builtins(rec.settings) for _, rec in loops],
    }
    return PaperReport(tables=[*_table2(loops), _figure4(loops), _figure5(loops)], summary=summary, note=note)
