"""`faultline report`: RS, O, L and S per fault type of a campaign folder, the behaviours behind them;
with `--reflection JOURNAL`, the structured-reflection reward of a journal's turns instead (`_reflection`).

Tables on stdout by default; `--json` prints one JSON object per row (each with a `type`)
and a `summary` last; `--html` writes one self-contained page; `--plot` a heatmap of
(O, L, S) by tier (MAS-FIRE Figure 4's shape). `--rs` picks how RS_f counts the units
solved under a fault: as equation 1 does (default), or only those the baseline solved.
`--behaviours` picks where the behaviours come from: the rule detectors (default), or a
model judge (role judge) that labels each faulted episode (`faultline.report.annotate_episodes`),
its answers recorded in the campaign folder so a rerun gives the same report.
`--paper NAME INPUT...` prints a source paper's tables in the paper's own shape instead (`_paper`).
"""

from __future__ import annotations

import argparse
import html
import math
import sys
from pathlib import Path

import anyio
import msgspec
from rich.table import Table

from faultline._errors import UsageError
from faultline.cli._models import add_model_flags, effective_config, serving_local_model
from faultline.cli._paper import PAPERS, papers_help, print_report
from faultline.cli._paper_fama import fama_report
from faultline.cli._paper_masfire import masfire_report, tier_marks
from faultline.cli._paper_memtool import memtool_report
from faultline.cli._plots import png
from faultline.cli._reflection import HELP as REFLECTION_HELP
from faultline.cli._reflection import report_reflection
from faultline.cli._text import table_console
from faultline.report import (
    BEHAVIOUR_SOURCES,
    DETECTORS,
    RS_VARIANTS,
    SIM_JUDGE_NOTE,
    TIERS,
    Annotation,
    CampaignReport,
    FaultRow,
    TierRow,
    annotate_episodes,
    campaign_report,
    episode_cases,
)
from faultline.runtime import make_backend

JUDGE_ROLE = "judge"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "report",
        help="a campaign's robustness report: RS, O, L, S per fault type and the behaviours behind them",
        description="Read a campaign folder (see `faultline campaign`) and report MAS-FIRE's RS_f (equation 1)"
        " and O_f, L_f, S_f (equation 2) per fault type with their counts, the fault-tolerant behaviours found"
        " in the journals by tier, and what each defense changes in RS_f.",
    )
    p.add_argument(
        "inputs",
        type=Path,
        nargs="*",
        metavar="INPUT",
        help="the campaign folder (CAMPAIGN_DIR); with --paper, what that paper's tables read",
    )
    p.add_argument(
        "--paper",
        choices=list(PAPERS),
        help="print a source paper's tables in the paper's own shape (its rows and columns) with Faultline's numbers,"
        f" from its inputs: {papers_help()}",
    )
    p.add_argument("--reflection", type=Path, metavar="JOURNAL", help=REFLECTION_HELP)
    p.add_argument("--json", action="store_true", help="one JSON object per row, each with a type, then a summary")
    p.add_argument("--html", type=Path, metavar="FILE", help="also write the report as one self-contained HTML page")
    p.add_argument("--plot", type=Path, metavar="FILE", help="also write a heatmap of (O, L, S) by tier as a PNG")
    p.add_argument(
        "--rs",
        choices=list(RS_VARIANTS),
        default="paper",
        help="how RS_f counts N_f,success: every unit solved under the fault, as equation 1 (paper, the default),"
        " or only the units the baseline solved too (baseline-solved: the share of its successes that survived)",
    )
    p.add_argument(
        "--behaviours",
        choices=list(BEHAVIOUR_SOURCES),
        default="rules",
        help="where the fault-tolerant behaviours behind O, L and S come from: Faultline's rule detectors (rules,"
        " the default), or a model judge, model role judge, that labels each faulted episode with behaviours,"
        " several tiers each, succeeded or failed, as MAS-FIRE's annotator does (judged; its answers are recorded"
        " in CAMPAIGN_DIR/annotations.jsonl and served again on a rerun)",
    )
    add_model_flags(p)
    p.set_defaults(handler=_report)


def _report(args: argparse.Namespace) -> int:
    if args.reflection is not None:
        if args.inputs or args.html is not None or args.plot is not None or args.paper is not None:
            raise UsageError("report --reflection JOURNAL takes no CAMPAIGN_DIR, --paper, --html or --plot")
        return report_reflection(args.reflection, args.json)
    if args.paper is not None:
        return _paper(args)
    if len(args.inputs) != 1:
        raise UsageError("report needs one CAMPAIGN_DIR, or --reflection JOURNAL")
    (folder,) = args.inputs
    if args.html is not None and not args.html.parent.is_dir():
        raise UsageError(f"--html {args.html}: folder {args.html.parent} does not exist")
    report = _campaign_report(args, folder)
    if args.plot is not None:
        _heatmap(report, args.plot)
    if args.html is not None:
        args.html.write_text(_html(report, str(folder)), encoding="utf-8")
        print(f"report written to {args.html}", file=sys.stderr)
    if args.json:
        for line in report.lines():
            print(msgspec.json.encode(line).decode())
        return 0
    console = table_console()
    for table in _tables(report, str(folder)):
        console.print(table)
    return 0


def _paper(args: argparse.Namespace) -> int:
    """A paper's tables from its inputs (`--paper`); the campaign report's own outputs are not for it."""
    if args.html is not None or args.plot is not None:
        raise UsageError(f"report --paper {args.paper} takes no --html or --plot")
    if not args.inputs:
        raise UsageError(f"report --paper {args.paper} needs {PAPERS[args.paper][1]}")
    if args.paper == "fama":
        paper = fama_report(args.inputs)
    elif args.paper == "memtool":
        paper = memtool_report(args.inputs)
    else:
        if len(args.inputs) != 1:
            raise UsageError("report --paper masfire reads one CAMPAIGN_DIR")
        report = _campaign_report(args, args.inputs[0])
        paper = masfire_report(report, str(args.inputs[0]), _source(report, judge_note=False))
    print_report(paper, json=args.json)
    return 0


def _campaign_report(args: argparse.Namespace, folder: Path) -> CampaignReport:
    return _judged_report(args) if args.behaviours == "judged" else campaign_report(folder, rs=args.rs)


@serving_local_model
def _judged_report(args: argparse.Namespace) -> CampaignReport:
    (folder,) = args.inputs
    config = effective_config(args)
    settings = config.model(JUDGE_ROLE)
    judge = f"{settings.backend}:{settings.model}" if settings.model else settings.backend
    cases = episode_cases(folder)

    async def annotate() -> tuple[dict[str, Annotation | str], int]:
        backend = make_backend(config, JUDGE_ROLE)
        try:
            return await annotate_episodes(cases, backend, judge=judge, role=JUDGE_ROLE, folder=folder)
        finally:
            await backend.aclose()

    judged, recorded = anyio.run(annotate)
    return campaign_report(folder, rs=args.rs, judged=judged, judge=judge, recorded=recorded)


def _share(value: float | None, num: int, den: int) -> str:
    return f"{'-' if value is None else f'{value:.2f}'} ({num}/{den})"


def _label(row: FaultRow | TierRow) -> str:
    return f"{row.fault}+{row.defense}" if row.defense else row.fault


Grid = list[list[str]]


ALL_SKIPPED = "- (all skipped)"
"""O_f, L_f and S_f of a cell where every injection was skipped: over no faulted unit, and not for want of one."""


def _metric_grid(report: CampaignReport) -> tuple[list[str], Grid]:
    head = ["fault", "defense", "RS_f", "O_f", "L_f", "S_f", "no effect", "skipped"]
    rows = [
        [
            r.fault,
            r.defense or "-",
            _share(r.rs, r.solved, r.base_solved),
            *(
                [ALL_SKIPPED] * 3
                if r.all_skipped
                else [
                    _share(r.o, r.triggered, r.injected),
                    _share(r.l, r.fixed, r.triggered),
                    _share(r.s, r.final_success, r.triggered),
                ]
            ),
            _no_effect(r),
            _skips(r),
        ]  # fmt: skip
        for r in report.faults
    ]
    return head, rows


def _no_effect(row: FaultRow) -> str:
    """The no-effect count and how many of those units a defense cancelled the fault in; when every faulted unit
    is of no effect and no defense met the fault, that there was nothing to tolerate."""
    count = f"{row.no_effect}/{row.injected}"
    if row.cancelled == row.injected > 0:
        return f"{count} (all: cancelled by a defense)"
    if row.cancelled:
        return f"{count} ({row.cancelled} cancelled by a defense)"
    return count + (" (all: nothing to tolerate)" if row.injected and row.no_effect == row.injected else "")


def _skips(row: FaultRow) -> str:
    """How many injections were skipped, in how many units the fault was never applied, and the commonest reasons."""
    if not row.skipped:
        return "0"
    if row.all_skipped:
        count = f"all {row.skipped}, no unit faulted"
    elif row.skipped_units:
        count = f"{row.skipped}, {row.skipped_units} unit{'s' if row.skipped_units > 1 else ''} never faulted"
    else:
        count = str(row.skipped)
    reasons = [f"{r.reason} (×{r.count})" for r in row.skip_reasons]
    if others := row.skipped - sum(r.count for r in row.skip_reasons):
        reasons.append(f"{others} for other reasons")
    return f"{count}: " + "; ".join(reasons)


def _behaviour_grid(report: CampaignReport) -> tuple[list[str], Grid]:
    """Table 2's shape: a row per (fault, behaviour), a column per tier it counts in, marked ✓ (succeeded: units)
    and ✗ (activated, failed: units)."""
    head = ["fault", "defense", "behaviour", *TIERS, "solved"]
    rows = [
        [
            b.fault,
            b.defense or "-",
            b.behaviour,
            *(tier_marks(b.by_tier.get(tier)) for tier in TIERS),
            f"{b.solved}/{b.units}",
        ]  # fmt: skip
        for b in report.behaviours
    ]
    return head, rows


def _not_annotated_grid(report: CampaignReport) -> tuple[list[str], Grid]:
    head = ["fault", "defense", "episode", "why not annotated"]
    return head, [[n.fault, n.defense or "-", n.episode, n.reason] for n in report.not_annotated]


def _source(report: CampaignReport, *, judge_note: bool = True) -> str:
    """Where the behaviours came from, said on every behaviour table (`judge_note`: with what a sim judge's labels
    measure, for a table that does not say it anyway)."""
    s = report.summary
    if s.behaviour_source == "rules":
        return "detectors: " + ", ".join(
            f"{d.name} ({', '.join(d.all_tiers)}): {d.summary}" for d in DETECTORS.values()
        )
    text = (
        f"judged behaviours: {BEHAVIOUR_SOURCES['judged']}; judge {s.judge}, {s.annotated} episodes annotated"
        f" ({s.recorded} from recorded answers), {s.not_annotated} not"
    )
    return f"{text}; {SIM_JUDGE_NOTE}" if judge_note and s.judge.startswith("sim") else text


def _effect_grid(report: CampaignReport) -> tuple[list[str], Grid]:
    head = ["fault", "defense", "RS_f without", "RS_f with", "change"]

    def number(value: float | None, sign: bool = False) -> str:
        return "-" if value is None else f"{value:+.2f}" if sign else f"{value:.2f}"

    rows = [[e.fault, e.defense, number(e.rs_off), number(e.rs_on), number(e.delta, True)] for e in report.effects]
    return head, rows


def _caption(report: CampaignReport) -> str:
    s = report.summary
    text = (
        f"{s.domain}, {s.tasks} tasks x {s.trials} trials, {s.model}; {s.cells_done} of {s.cells} cells finished,"
        f" {s.episodes} episodes, {s.behaviours} sightings of a behaviour (each time a detector saw one; the"
        " behaviours table counts units)"
    )
    return f"{text}; {s.note}" if s.note else text


def _tables(report: CampaignReport, name: str) -> list[Table]:
    grids = [
        (f"robustness of {name}", _metric_grid(report)),
        ("fault-tolerant behaviours by fault type and tier", _behaviour_grid(report)),
    ]
    if report.effects:
        grids.append(("what each defense changes in RS_f", _effect_grid(report)))
    if report.not_annotated:
        grids.append(("faulted episodes the judge did not annotate (left out of O, L, S)", _not_annotated_grid(report)))
    tables = []
    for title, (head, rows) in grids:
        table = Table(title=title)
        for column in head:
            table.add_column(column)
        for row in rows:
            table.add_row(*row)
        tables.append(table)
    definitions = "; ".join(f"{name}: {text}" for name, text in report.definitions().items())
    tables[0].caption = f"{_caption(report)}\n{definitions}"
    tables[1].caption = _source(report)
    return tables


def _heat_rows(report: CampaignReport) -> tuple[list[str], list[str], list[list[float]]]:
    """Rows (fault+defense), columns (tier O/L/S) and values (NaN where a ratio is over nothing)."""
    columns = [f"{tier} {m}" for tier in TIERS for m in ("O", "L", "S")]
    labels = list(dict.fromkeys(_label(t) for t in report.tiers))
    cells = {(_label(t), t.tier): t for t in report.tiers}
    values = [
        [
            math.nan if v is None else v
            for tier in TIERS
            for v in (cells[(label, tier)].o, cells[(label, tier)].l, cells[(label, tier)].s)
        ]
        for label in labels
    ]
    return labels, columns, values


def _heatmap(report: CampaignReport, path: Path) -> None:
    labels, columns, values = _heat_rows(report)
    if not labels:
        raise UsageError(f"--plot {path}: the campaign has no finished fault cell to plot")
    import numpy as np

    note = f"note: {report.summary.note}" if report.summary.note else ""
    with png(path, width=10.0, height=1.5 + 0.4 * len(labels), note=note) as figure:
        axes = figure.subplots()
        grid = np.ma.masked_invalid(np.array(values, dtype=float))
        image = axes.imshow(grid, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        axes.set_xticks(range(len(columns)), columns, rotation=45, ha="right")
        axes.set_yticks(range(len(labels)), labels)
        for i, row in enumerate(values):
            for j, value in enumerate(row):
                if not math.isnan(value):
                    ink = "black" if value > 0.6 else "white"  # readable on viridis' light and dark ends
                    axes.text(j, i, f"{value:.2f}", ha="center", va="center", color=ink, fontsize=7)
        axes.set_title("(O, L, S) by fault-tolerance tier; blank: no behaviour of that tier")
        figure.colorbar(image, ax=axes)


def _html(report: CampaignReport, name: str) -> str:
    """One page, no script, no stylesheet from elsewhere: the three tables and the heat grid."""

    def table(title: str, head: list[str], rows: Grid) -> str:
        header = "".join(f"<th>{html.escape(h)}</th>" for h in head)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
        return f"<h2>{html.escape(title)}</h2><table><tr>{header}</tr>{body}</table>"

    labels, columns, values = _heat_rows(report)
    heat_rows = "".join(
        f"<tr><th>{html.escape(label)}</th>"
        + "".join(
            '<td class="none"></td>'
            if math.isnan(v)
            else f'<td style="background:hsl(210,70%,{95 - 50 * v:.0f}%)">{v:.2f}</td>'
            for v in row
        )
        + "</tr>"
        for label, row in zip(labels, values, strict=True)
    )
    heat_head = "<tr><th></th>" + "".join(f"<th>{html.escape(c)}</th>" for c in columns) + "</tr>"
    parts = [
        table(f"robustness of {name}", *_metric_grid(report)),
        table("fault-tolerant behaviours by fault type and tier", *_behaviour_grid(report)),
        f"<h2>(O, L, S) by tier</h2><table>{heat_head}{heat_rows}</table>",
    ]
    if report.effects:
        parts.append(table("what each defense changes in RS_f", *_effect_grid(report)))
    if report.not_annotated:
        parts.append(table("faulted episodes the judge did not annotate", *_not_annotated_grid(report)))
    detectors = f"<li>{html.escape(_source(report))}</li>"
    definitions = "".join(
        f"<dt>{html.escape(n)}</dt><dd>{html.escape(t)}</dd>" for n, t in report.definitions().items()
    )
    style = (
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:1em}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}td.none{background:#eee}"
    )
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>faultline report {html.escape(name)}</title>'
        f"<style>{style}</style></head><body><h1>faultline report {html.escape(name)}</h1>"
        f"<p>{html.escape(_caption(report))}</p>{''.join(parts)}<h2>what the columns mean</h2><dl>{definitions}</dl>"
        f"<h2>behaviours</h2><ul>{detectors}</ul></body></html>"
    )
