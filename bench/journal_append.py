"""Throughput of `Journal.append` on batches shaped like the journal service's.

Appends `--batches` batches of `--batch-size` rows whose bodies encode to about
`--body-bytes` bytes, spread over `--episodes` episodes, into a fresh file; prints
rows/s for sealing alone (encoding, digests, chain), for whole appends, and for a
redelivered batch (every row skipped). Not a test: run it by hand.

    python -m bench.journal_append --batches 20 --batch-size 10000
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from faultline.core import AssistantTurn, Envelope, Subjects, derive_id, encode
from faultline.journal import GENESIS, Incoming, Journal
from faultline.journal._rows import seal

STREAM = "FL_JOURNAL@bench"


def make_batch(first_seq: int, size: int, body_bytes: int, episodes: int) -> list[Incoming]:
    subjects = Subjects()
    overhead = len(encode(AssistantTurn(text="")))
    text = "x" * max(body_bytes - overhead - 2, 0)
    batch = []
    for seq in range(first_seq, first_seq + size):
        episode = f"ep-{seq % episodes:05d}"
        env = Envelope(
            id=derive_id(episode, seq),
            episode=episode,
            sender="tool_agent",
            recipient="user",
            body=AssistantTurn(text=text),
            causation=derive_id(episode, seq - 1),
            hops=3,
            ts=1_767_225_600.0 + seq / 1000,
        )
        batch.append(Incoming(STREAM, seq, subjects.for_envelope(env), env))
    return batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=10_000)
    parser.add_argument("--body-bytes", type=int, default=200)
    parser.add_argument("--episodes", type=int, default=500)
    parser.add_argument("--path", type=Path, help="journal file to create (default: a temporary directory)")
    args = parser.parse_args()

    batches = [
        make_batch(1 + i * args.batch_size, args.batch_size, args.body_bytes, args.episodes)
        for i in range(args.batches)
    ]
    print(
        f"body: {len(encode(batches[0][0].envelope.body))} bytes encoded; {args.batches} batches of {args.batch_size} rows"
    )

    seal_s = min(_timed(lambda: seal(batches[0], 0, GENESIS)) for _ in range(5))
    print(f"seal only      : {args.batch_size / seal_s:>10,.0f} rows/s")

    with tempfile.TemporaryDirectory() as scratch:
        path = args.path or Path(scratch) / "bench.db"
        with Journal.open(path) as journal:
            times = [_timed(partial(journal.append, batch)) for batch in batches]
            total_rows = args.batches * args.batch_size
            assert journal.last_pos == total_rows
            redelivered = _timed(lambda: journal.append(batches[-1]))
            assert journal.last_pos == total_rows
        size_mib = path.stat().st_size / 2**20
    rates = [args.batch_size / t for t in times]
    overall = total_rows / sum(times)
    print(f"append         : {overall:>10,.0f} rows/s overall, median batch {statistics.median(rates):,.0f} rows/s")
    print(f"redelivered    : {args.batch_size / redelivered:>10,.0f} rows/s (all skipped)")
    print(f"file           : {size_mib:.1f} MiB, {size_mib * 2**20 / total_rows:.0f} bytes/row")


def _timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
