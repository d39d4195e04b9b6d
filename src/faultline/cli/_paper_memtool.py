"""MemToolAgent's ablation tables, laid out from run journals by the memory settings their episodes recorded.

Table 3: memory off against each setting with memory on, without the memory extractor (entries stored
with no reflection, `[memory] extractor = "off"`) and with it. Figure 5: fixed top-k, by k, against dynamic
top-n. Table 4: the settings with memory on by ranker and hard preference guiding. Every row is one
domain, tool-agent model and `[memory]` setting (`faultline.report.memory_ablation`), read from what the
episodes recorded, never from a file's name; a row's numbers pool its episodes over every journal given.
Each model's rows form a group, as the paper's tables compare settings per model.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

from faultline._errors import UsageError
from faultline.cli._paper import PaperReport, PaperTable, share
from faultline.report import SIM_NOTE, SettingRow, memory_ablation

ACCURACY = ["episodes", "pass rate", "Tool Acc.", "Param Acc."]
MEASURES = (
    "pass rate: episodes solved; Tool Acc.: episodes whose agent called exactly the tools the task's ground truth"
    " calls; Param Acc.: episodes where it made every ground-truth call with its arguments"
)


def _accuracy(r: SettingRow) -> list[str]:
    return [str(r.episodes), share(r.pass_rate), share(r.tool_accuracy), share(r.param_accuracy)]


def _grouped(rows: list[SettingRow], *, order: Callable[[SettingRow], tuple[object, ...]]) -> list[SettingRow]:
    """`rows` by domain, then model, then `order` within each model's group."""
    return sorted(rows, key=lambda r: (r.domain, r.model, *order(r)))


def _groups(ordered: list[SettingRow]) -> frozenset[int]:
    """The rows after which another domain's or model's group begins."""
    return frozenset(
        i
        for i, (r, after) in enumerate(itertools.pairwise(ordered))
        if (r.domain, r.model) != (after.domain, after.model)
    )


def _table(
    kind: str,
    title: str,
    *,
    head: list[str],
    ordered: list[SettingRow],
    cells: Callable[[SettingRow], list[str]],
    caption: str,
    rows: list[SettingRow],
) -> PaperTable:
    """A table of `ordered`, each row its model, its method and `cells`, in groups per domain and model."""
    return PaperTable(
        kind=kind,
        title=title,
        head=["Model", "Method", *head],
        rows=[[_model_label(r.model), _method(r, rows), *cells(r)] for r in ordered],
        records=ordered,
        caption=caption,
        sections=_groups(ordered),
        right=2,
    )


def _model_label(model: str) -> str:
    """`model` as a table shows it: llama.cpp's server names its model by the GGUF file's whole path."""
    return Path(model).name if model.endswith(".gguf") else model


def _method(r: SettingRow, rows: list[SettingRow]) -> str:
    """A memory-on row's retrieval and ranker, and whether its entries were stored without the extractor's
    reflections, after its domain when the rows are of several domains."""
    where = f"{r.domain}: " if len({row.domain for row in rows}) > 1 else ""
    if r.setting.mode == "off":
        return f"{where}w/o memory"
    ranker = "by rating" if r.setting.ranker == "rating" else "by similarity"
    extractor = ", w/o extractor" if r.setting.extractor == "off" else ""
    return f"{where}{r.setting.retrieval}, {ranker}{extractor}"


def _zeros(n: int) -> str:
    return f"{n} zero rating" + ("s" if n != 1 else "")


def _table3(rows: list[SettingRow]) -> PaperTable:
    return _table(
        "table3",
        "MemToolAgent Table 3: without memory, without the memory extractor, and with both",
        head=ACCURACY,
        ordered=_grouped(rows, order=lambda r: (r.setting.mode != "off", r.setting.extractor != "off")),
        cells=_accuracy,
        caption="w/o extractor: memory entries stored without the memory extractor's reflections on failures or"
        f' preference summaries (memory.extractor = "off" in the config). {MEASURES}',
        rows=rows,
    )


def _figure5(rows: list[SettingRow]) -> PaperTable:
    return _table(
        "figure5",
        "MemToolAgent Figure 5: fixed top-k against dynamic top-n",
        head=["mean retrieved", *ACCURACY],
        ordered=_grouped(
            [r for r in rows if r.setting.mode in ("topk", "dynamic")],
            order=lambda r: (r.setting.mode != "topk", r.setting.k, r.setting.peak),
        ),
        cells=lambda r: [share(r.retrieved), *_accuracy(r)],
        caption=f"mean retrieved: entries per answered memory request (an empty memory gives none); {MEASURES}",
        rows=rows,
    )


def _table4(rows: list[SettingRow]) -> PaperTable:
    return _table(
        "table4",
        "MemToolAgent Table 4: ranker and hard preference guiding",
        head=["hides a tool after", "episodes with tools hidden", *ACCURACY],
        ordered=_grouped([r for r in rows if r.setting.mode != "off"], order=lambda r: ()),
        cells=lambda r: [_zeros(r.setting.zero_ratings), str(r.hidden), *_accuracy(r)],
        caption="by similarity: the retrieved examples most similar first (the paper's Retrieval_v1); by rating:"
        " grouped by the user's rating (its simple ranker, Retrieval_v2). Hard preference guiding hides the tools"
        " a user rated 0 on preference tasks (after 1 rating: the paper's rule); episodes with tools hidden: where"
        f" it did. {MEASURES}",
        rows=rows,
    )


def memtool_report(journals: list[Path]) -> PaperReport:
    """Tables 3 and 4 and Figure 5 of the runs in `journals`, a row per domain, tool-agent model and memory setting
    their episodes recorded."""
    for path in journals:
        if path.is_dir():
            raise UsageError(f"report --paper memtool: {path} is a folder: give run journals (`run --journal FILE`)")
    ablation = memory_ablation(journals)
    summary = {"paper": "memtool", "inputs": ablation.journals, "models": ablation.models, "skipped": ablation.skipped}
    return PaperReport(
        tables=[_table3(ablation.rows), _figure5(ablation.rows), _table4(ablation.rows)],
        summary=summary,
        note=SIM_NOTE if "sim" in ablation.models else "",
    )
