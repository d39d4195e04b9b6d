"""`faultline fork` and `faultline attribute`: counterfactual runs of a journaled episode."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import anyio
import msgspec
from rich.table import Table
from rich.text import Text

from faultline._errors import UsageError
from faultline.api import SIM_NOTE, attribute, failed_episodes, uses_sim
from faultline.cli import _jsonl
from faultline.cli._args import whole_number
from faultline.cli._filters import add_episode_filters, episode_filter, filtered_episodes, require_journal
from faultline.cli._models import add_model_flags, effective_config, serving_local_model
from faultline.cli._progress import progress_shown
from faultline.cli._text import clip, counted, table_console
from faultline.core import EpisodeCompleted, MessageBody
from faultline.replay import (
    DEFAULT_SAMPLES,
    FAULT_REPAIR,
    ORACLE_REPAIR,
    SAMPLED,
    Attribution,
    Change,
    Drop,
    ForkResult,
    Keep,
    Method,
    Probe,
    Replace,
    UndoFault,
    UndoRule,
    fork_episode,
    forks_path,
)
from faultline.runtime import agent_lookup, make_backend


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "fork",
        help="re-run an episode from a position with one message changed",
        description="History before POS is served from the journal (no model is called again); "
        "the message at POS is changed; the rest runs live as a new episode. The fork is written, "
        "all at once when it ends, to JOURNAL's forks file (JOURNAL with the suffix .forks.sqlite) "
        "or --out, never to JOURNAL unless --into-source; a fork already there is reported, not run again.",
    )
    p.add_argument("journal", type=Path, help="the journal file (or journal set) that holds the episode")
    p.add_argument(
        "--episode", "-e", required=True, help="the episode to fork (`faultline journal episodes` lists them)"
    )
    p.add_argument(
        "--at", type=whole_number(1), required=True, metavar="POS", help="journal position of the message to change"
    )
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--drop", action="store_true", help="the message never arrives")
    how.add_argument(
        "--replace", type=Path, metavar="FILE.json", help='deliver this body instead (JSON with its "kind")'
    )
    how.add_argument("--undo-fault", action="store_true", help="POS is a fault event: deliver the original message")
    how.add_argument(
        "--undo-rule",
        action="store_true",
        help="as --undo-fault, and no fault of that event's rule applies from there on (a rule that altered several"
        " messages, undone whole)",
    )
    how.add_argument("--keep", action="store_true", help="deliver the message as it was (re-run the rest live)")
    _add_destination(p, "the fork")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=JSON", help="override an episode setting in the fork"
    )
    p.add_argument("--json", action="store_true", help="JSON lines (docs/json.md)")
    add_model_flags(p)
    p.set_defaults(handler=_fork)

    p = sub.add_parser(
        "attribute",
        help="find the agent and step that made a failed episode fail (by forks)",
        description="Each answer is backed by forks of the failed episode, from its exact history: "
        "fault-event repair undoes one journaled fault (or its rule, whole); oracle-guided repair gives one step's model call "
        "the task's gold action (the runtime injects it, any backend); sampled counterfactuals run "
        "--samples live continuations from before a step and estimate the chance of success with a "
        "Wilson interval. auto tries them in that order. Every agent's steps are candidates.",
    )
    p.add_argument("journal", type=Path, help="the journal file (or journal set) that holds the failed episodes")
    p.add_argument("--episode", "-e", action="append", default=[], help="episode to attribute (repeatable)")
    p.add_argument("--all-failed", action="store_true", help="every failed episode of the journal")
    p.add_argument("--method", choices=sorted(_METHODS), default="auto", help="default: auto")
    p.add_argument(
        "--samples",
        type=whole_number(1),
        default=DEFAULT_SAMPLES,
        help=f"continuations per step, sampled (default {DEFAULT_SAMPLES})",
    )
    p.add_argument(
        "--workers", type=whole_number(1), default=DEFAULT_SAMPLES, help="forks run side by side (default: --samples)"
    )
    _add_destination(p, "the forks", "--scratch")
    p.add_argument("--json", action="store_true", help="one JSON line per episode, then a summary line")
    add_model_flags(p)
    add_episode_filters(p, "the failed episodes that match, or narrow --episode/--all-failed down")
    p.set_defaults(handler=_attribute)


_METHODS: dict[str, Method] = {"auto": "auto", "fault": FAULT_REPAIR, "oracle": ORACLE_REPAIR, "sampled": SAMPLED}


def _add_destination(parser: argparse.ArgumentParser, what: str, *aliases: str) -> None:
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--out",
        *aliases,
        type=Path,
        metavar="FILE",
        help=f"journal to write {what} to (default: JOURNAL with the suffix .forks.sqlite, beside it)",
    )
    where.add_argument(
        "--into-source",
        action="store_true",
        help=f"append {what} to JOURNAL itself (one transaction per fork; a fork already there is reported, "
        "not written again)",
    )


def _destination(args: argparse.Namespace) -> Path:
    if args.into_source:
        return Path(args.journal)
    return args.out or forks_path(args.journal)


def _change(args: argparse.Namespace) -> Change:
    if args.drop:
        return Drop()
    if args.undo_fault:
        return UndoFault()
    if args.undo_rule:
        return UndoRule()
    if args.keep:
        return Keep()
    try:
        return Replace(body=msgspec.json.decode(args.replace.read_bytes(), type=MessageBody))
    except FileNotFoundError:
        raise UsageError(f"--replace {args.replace}: no such file") from None
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        why = str(exc).replace("`", "")
        raise UsageError(
            f'--replace {args.replace}: not a message body ({why}); write the "body" of the row at --at, changed,'
            f" from `faultline journal show {args.journal} --episode {args.episode} --json`"
        ) from None


def _settings(items: list[str]) -> dict[str, Any]:
    settings = {}
    for item in items:
        key, _, value = item.partition("=")
        try:
            settings[key] = json.loads(value)
        except json.JSONDecodeError:
            raise UsageError(f"--set {item!r}: the value must be JSON (quote strings)") from None
    return settings


def _fork(args: argparse.Namespace) -> int:
    require_journal(args.journal)
    return _fork_with(args)


@serving_local_model
def _fork_with(args: argparse.Namespace) -> int:
    config = effective_config(args)
    result = anyio.run(
        lambda: fork_episode(
            args.journal,
            args.episode,
            args.at,
            _change(args),
            lookup=agent_lookup(config),
            backends=lambda role: make_backend(config, role),
            out=_destination(args),
            settings=_settings(args.set) or None,
            handler_timeout_s=config.handler_timeout_s,
            system=config.system.class_,
        )
    )
    if args.json:
        _jsonl.row("fork", result)
        _jsonl.summary({"forks": 1, "run": 0 if result.existing else 1, "journal": result.journal})
        return 0
    console = table_console()
    console.print(_fork_table(result))
    if result.existing:
        again = (
            "; it ended in error: to run it again (a model back, a bug fixed), fork into another file with --out"
            if result.outcome.outcome == "error"
            else ""
        )
        console.print(
            f"{result.journal} holds this fork already ({result.rows} rows): nothing run or written{again}",
            soft_wrap=True,
        )
    else:
        console.print(f"{result.rows} rows written to {result.journal}", soft_wrap=True)
    return 0


def _fork_table(result: ForkResult) -> Table:
    table = Table(title=f"fork of {result.forked_from} at position {result.at} ({result.change})")
    table.add_column("")
    table.add_column("original")
    table.add_column("fork")
    original = result.original or EpisodeCompleted(outcome="failure", cause="(not completed)")
    table.add_row("episode", result.forked_from, result.episode)
    table.add_row("outcome", original.outcome, result.outcome.outcome)
    table.add_row("reward", f"{original.reward:g}", f"{result.outcome.reward:g}")
    table.add_row("cause", original.cause or "-", result.outcome.cause or "-")
    if not result.existing:
        table.add_row("live messages", "", str(result.live_messages))
        table.add_row("seconds", "", f"{result.seconds:.3f}")
    return table


def _attribute(args: argparse.Namespace) -> int:
    require_journal(args.journal)
    return _attribute_with(args)


@serving_local_model
def _attribute_with(args: argparse.Namespace) -> int:
    episodes = list(args.episode)
    if args.all_failed or (not episodes and episode_filter(args) is not None):
        episodes += failed_episodes(args.journal)
        if not episodes:  # nothing to do, as `fama analyze` of a journal with no failure, not a mistake
            if args.json:
                print(json.dumps(attribution_summary([])))
            else:
                print(f"{args.journal}: no failed episode, nothing to attribute")
            return 0
    if not episodes:
        raise UsageError("name an episode with --episode E, pass --all-failed, or filter episodes (--status ...)")
    episodes = filtered_episodes(args.journal, args, episodes) or episodes
    scratch = _destination(args)
    config = effective_config(args)
    with progress_shown("attributing", "episodes attributed", quiet=args.json) as progress:
        results = attribute(
            args.journal,
            episodes,
            config=config,
            method=_METHODS[args.method],
            samples=args.samples,
            workers=args.workers,
            scratch=scratch,
            progress=progress,
        )
    summary = attribution_summary(results, SIM_NOTE if uses_sim(config) else "")
    if args.json:
        for result in results:
            print(msgspec.json.encode(result).decode())
        print(json.dumps(summary))
        return 0
    console = table_console()
    console.print(attribution_table(results, scratch))
    console.print(
        f"decided {summary['decided']}/{summary['episodes']}, flip rate {summary['flip_rate']:.0%}, "
        f"{counted(summary['forks'], 'fork')}, {counted(summary['model_calls'], 'model call')},"
        f" {summary['seconds']:.1f}s",
        soft_wrap=True,
    )
    if summary["note"]:
        console.print(Text(f"note: {summary['note']}", style="dim"), soft_wrap=True)
    return 0


def attribution_table(results: list[Attribution], scratch: Path | str) -> Table:
    """One row per episode that reads at 80 columns: ids whole, the rest wrapped at word boundaries."""
    table = Table(
        title=f"attribution of {counted(len(results), 'failed episode')} (forks in {scratch})", show_lines=True
    )
    table.add_column("episode", no_wrap=True, min_width=max((len(r.episode) for r in results), default=7))
    table.add_column("decisive step, and the forks that show it", ratio=1, overflow="fold")
    table.add_column("what went wrong", ratio=1, overflow="fold")
    for r in results:
        table.add_row(r.episode, f"{_decisive(r)}\n{_evidence(r)}", _wrong(r))
    return table


def _decisive(r: Attribution) -> str:
    if r.agent is None or r.step is None:
        return "none found"
    where = f"{r.agent}, step {r.step} of {r.steps}, at position {r.position}"
    return where if r.decided else f"{where} (undecided)"


def _evidence(r: Attribution) -> str:
    """The method, and the forks behind the answer: an interval only where more than one fork gave it."""
    lines = []
    if r.method == SAMPLED:
        after = _probe(r, (r.step or 0) + 1) if r.p_after is not None else None
        compared = (f"{r.method}: ", _probe(r, r.step)), ("the step after: ", after)
    else:  # a repair, and its control: the step kept, the rest drawn again
        controls = ("keep", "recorded")
        compared = (f"{r.method}: ", _probe(r, r.step, not_of=controls)), ("its control: ", _probe(r, r.step, controls))
    for label, probe in compared:
        if probe is not None:
            lines.append(label + _rate(probe))
    return "\n".join(lines) or f"{r.method}: {counted(r.forks, 'fork')}"


def _probe(r: Attribution, step: int | None, of: tuple[str, ...] = (), not_of: tuple[str, ...] = ()) -> Probe | None:
    """The last probe of `step` (with a change in `of`, if given, and none in `not_of`)."""
    if step is None:
        return None
    found = [
        p
        for p in r.evidence
        if p.step == step and p.change != "replay" and (not of or p.change in of) and p.change not in not_of
    ]
    return found[-1] if found else None


def _rate(probe: Probe) -> str:
    if probe.samples == 1:
        return f"its fork {'succeeded' if probe.successes else 'failed'}"
    return f"p {probe.p:.2f} [{probe.low:.2f}, {probe.high:.2f}], {probe.successes} of {probe.samples} forks"


def _wrong(r: Attribution) -> str:
    if not r.decided and r.agent is None:
        return r.search
    lines = []
    if r.fault and any(p.change == "undo_rule" and p.position == r.position for p in r.evidence):
        lines.append(f"the fault {r.fault} on its outputs; its rule undone whole, the episode succeeds")
    elif r.fault:
        lines.append(f"the fault {r.fault} on its output; undone, the episode succeeds")
    if r.wrong is not None:
        lines.append(f"did: {_action_text(r.wrong)}")
    if r.right is not None:
        lines.append(f"should: {_action_text(r.right)}")
    if r.category:
        lines.append(f"category: {r.category}")
    return "\n".join(lines) or "-"


def _action_text(action: dict[str, Any]) -> str:
    """An action as a person reads it: a call with its arguments, a reply or a note with its text."""
    name = str(action.get("name", "?"))
    if "arguments" in action:
        detail = json.dumps(action["arguments"], ensure_ascii=False, separators=(", ", ": "))
    elif "text" in action:
        detail = repr(str(action["text"]))
    elif "output" in action:
        detail = json.dumps(action["output"], ensure_ascii=False)
    else:
        return name
    return f"{name} {clip(detail, 120)}"


def attribution_summary(results: list[Attribution], note: str = "") -> dict[str, Any]:
    """The summary row of `faultline attribute --json`; `note` says what the numbers measure where the forks ran
    on the offline simulator."""
    n = len(results)
    return {
        "type": "summary",
        "episodes": n,
        "decided": sum(r.decided for r in results),
        "flipped": sum(r.flipped for r in results),
        "flip_rate": sum(r.flipped for r in results) / n if n else 0.0,
        "forks": sum(r.forks for r in results),
        "model_calls": sum(r.model_calls for r in results),
        "seconds": sum(r.seconds for r in results),
        "methods": {m: sum(r.method == m for r in results) for m in sorted({r.method for r in results})},
        "note": note,
    }
