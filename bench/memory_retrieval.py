"""Latency, recall and insertion rate of the memory store, on synthetic tool-use requests.

For each size (default 10k and 100k entries) two stores are filled with the
same entries, one kept exact (`IndexFlatIP`) and one on HNSW; then every query
is retrieved from both, with top-10 and with dynamic n (paper defaults). Reported:

- insertion rate (entries/s), including embedding, SQLite and index build;
- retrieval latency p50/p99, excluding the query's embedding (FAISS search,
  dynamic n, reading the chosen entries from SQLite) and including it;
- HNSW recall@10 against exact search on the same queries, strict (same ids)
  and tie-aware (an HNSW hit scoring at least the exact 10th score counts);
- how often dynamic n found a peak, and the mean n.

Targets at 100k: p99 below 5 ms excluding the embedding, recall@10 >= 0.95.
Entries and queries come from a seeded vocabulary of invented words and
request templates, so the run needs no data and repeats exactly. `--quality`
also prints how the local embedder scores hand-written paraphrase pairs.

    python -m bench.memory_retrieval --json memory_bench.json
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import time
from pathlib import Path
from typing import Any

import anyio
import faiss
import msgspec
import numpy as np

from faultline.services.memory import (
    Dynamic,
    HashingEmbedder,
    IndexSettings,
    MemoryEntry,
    MemorySettings,
    MemoryStore,
    RetrievalMode,
    ToolCallRecord,
    TopK,
)

P99_TARGET_MS = 5.0
RECALL_TARGET = 0.95

_SYLLABLES = "ka lo mi ren sa tor vi ne pa dur el ix mon qua ber sta fi gor hu jen".split()
_FILLERS = "the a for with from to and my of on".split()


class Corpus:
    """Requests built from templates: fixed words that make a family, slots that vary per request."""

    def __init__(self, seed: int, templates: int = 120) -> None:
        self.rng = random.Random(seed)
        self.verbs = self._words(80, 2)
        self.nouns = self._words(600, 3)
        self.names = [w.capitalize() for w in self._words(400, 2)]
        self.templates = [self._template() for _ in range(templates)]

    def _words(self, count: int, syllables: int) -> list[str]:
        words: set[str] = set()
        while len(words) < count:
            words.add("".join(self.rng.choice(_SYLLABLES) for _ in range(self.rng.randint(2, syllables))))
        return sorted(words)

    def _template(self) -> tuple[list[str], str]:
        fixed = [self.rng.choice(self.verbs)] + self.rng.sample(self.nouns, self.rng.randint(2, 4))
        slots = ["{name}", "{noun}", "{number}"] + self.rng.sample(["{noun}", "{name}", "{number}"], 1)
        parts = fixed + slots + self.rng.sample(_FILLERS, 3)
        self.rng.shuffle(parts)
        return parts, self.rng.choice(self.verbs) + "_" + self.rng.choice(self.nouns)

    def request(self) -> tuple[str, str]:
        parts, tool = self.rng.choice(self.templates)
        words = [
            self.rng.choice(self.names)
            if p == "{name}"
            else self.rng.choice(self.nouns)
            if p == "{noun}"
            else str(self.rng.randint(1, 99_999))
            if p == "{number}"
            else p
            for p in parts
        ]
        return " ".join(words), tool

    def entries(self, count: int) -> list[MemoryEntry]:
        out = []
        for i in range(count):
            query, tool = self.request()
            failed = self.rng.random() < 0.3
            out.append(
                MemoryEntry(
                    id=f"e{i}",
                    episode=f"ep{i}",
                    domain="bench",
                    query=query,
                    feedback=0 if failed else 1,
                    calls=[ToolCallRecord(name=tool, arguments={"id": i})],
                    reflection="The agent passed the wrong id in the first call." if failed else "",
                )
            )
        return out


def percentile_ms(samples: list[float], q: float) -> float:
    return float(np.percentile(samples, q) * 1000.0)


async def fill(store: MemoryStore, entries: list[MemoryEntry]) -> float:
    start = time.perf_counter()
    await store.add_many(entries)
    return len(entries) / (time.perf_counter() - start)


async def latency(store: MemoryStore, queries: list[str], mode: RetrievalMode) -> dict[str, Any]:
    """Per-query latency excluding and including the embedding, plus what dynamic n chose."""
    embedder = store.embedder
    assert isinstance(embedder, HashingEmbedder)
    without, including, ns, peaks = [], [], [], 0
    for query in queries[:20]:
        await store.retrieve(query, mode)
    for query in queries:
        start = time.perf_counter()
        vector = (await embedder.embed([query]))[0]
        embedded = time.perf_counter()
        result = store.retrieve_vector(query, vector, mode)
        done = time.perf_counter()
        without.append(done - embedded)
        including.append(done - start)
        ns.append(result.n)
        peaks += result.reason == "peak"
    return {
        "p50_ms": percentile_ms(without, 50),
        "p99_ms": percentile_ms(without, 99),
        "p50_ms_with_embedding": percentile_ms(including, 50),
        "p99_ms_with_embedding": percentile_ms(including, 99),
        "mean_n": float(np.mean(ns)),
        "peak_rate": peaks / len(queries),
    }


def recall_at_10(exact: MemoryStore, graph: MemoryStore, vectors: np.ndarray) -> tuple[float, float]:
    strict, tie_aware = [], []
    for vector in vectors:
        exact_scores, exact_ids = exact.nearest(vector, 10)
        graph_scores, graph_ids = graph.nearest(vector, 10)
        strict.append(len(set(exact_ids.tolist()) & set(graph_ids.tolist())) / 10)
        tie_aware.append(float(np.sum(graph_scores >= exact_scores[-1] - 1e-6)) / 10)
    return float(np.mean(strict)), float(np.mean(tie_aware))


async def run_size(size: int, queries: int, seed: int, index: IndexSettings) -> dict[str, Any]:
    corpus = Corpus(seed)
    entries = corpus.entries(size)
    texts = [corpus.request()[0] for _ in range(queries)]
    embedder = HashingEmbedder()
    query_vectors = embedder.embed_sync(texts)
    result: dict[str, Any] = {"entries": size, "queries": queries}
    stores = {}
    for kind, threshold in (("exact", 10**12), ("hnsw", 0)):
        settings = MemorySettings(index=IndexSettings(**{**_fields(index), "hnsw_threshold": threshold}))
        store = MemoryStore(":memory:", HashingEmbedder(), settings)
        rate = await fill(store, entries)
        assert store.stats().partitions[0].index == ("flat" if kind == "exact" else "hnsw")
        stores[kind] = store
        result[kind] = {
            "insert_per_s": rate,
            "top10": await latency(store, texts, TopK(k=10)),
            "dynamic": await latency(store, texts, Dynamic()),
        }
    strict, tie_aware = recall_at_10(stores["exact"], stores["hnsw"], query_vectors)
    result["hnsw"]["recall_at_10"] = strict
    result["hnsw"]["recall_at_10_tie_aware"] = tie_aware
    for store in stores.values():
        store.close()
    return result


def _fields(settings: msgspec.Struct) -> dict[str, Any]:
    return {name: getattr(settings, name) for name in settings.__struct_fields__}


# -- embedder quality ----------------------------------------------------------------------

SHARED_WORDS = [
    (
        "Cancel my order 4021 and refund it to the original card",
        "Please cancel order 4021 and put the refund back on my original card",
    ),
    (
        "Book a flight from Boston to Denver next Friday morning",
        "I need a morning flight next Friday, Boston to Denver",
    ),
    (
        "Change the shipping address of my latest order to 12 Elm Street",
        "Update the delivery address on my most recent order to 12 Elm Street",
    ),
    ("Delete all emails from Nadia sent last week", "Remove the emails Nadia sent me during the last week"),
    (
        "Schedule a 30 minute meeting with Raj tomorrow at the first free slot",
        "Set up a half-hour meeting with Raj tomorrow whenever I am first free",
    ),
    ("How many visitors did the website have in October", "What was the total number of website visits in October"),
    (
        "Exchange the blue shirt in order 77 for a red one in the same size",
        "For order 77 swap the blue shirt for a red shirt of the same size",
    ),
    ("Upgrade my reservation ABC123 to business class", "Move reservation ABC123 up to business class please"),
    (
        "Forward the latest invoice email from Carlos to the finance team",
        "Send the finance team the most recent invoice Carlos emailed me",
    ),
    ("What is the balance of my checking account", "Tell me how much money is in my checking account"),
    ("Add two checked bags to my flight to Paris", "I want to add 2 checked bags on the Paris flight"),
    (
        "Reassign the customer Dakota Wilson to Raj in the CRM",
        "In the CRM move Dakota Wilson so that Raj is assigned to them",
    ),
    (
        "Plot total visits as a line chart if they exceeded 20 on any day this week",
        "If daily visits were above 20 at any point this week draw a line chart of total visits",
    ),
    (
        "Return the headphones from order 5512 because they are broken",
        "The headphones in order 5512 are broken, I want to return them",
    ),
    (
        "Find the cheapest hotel in Rome for three nights from June 3",
        "Search hotels in Rome for 3 nights starting June 3 and show the cheapest",
    ),
    (
        "Reset the password for the account linked to jane@example.com",
        "The account with email jane@example.com needs a password reset",
    ),
    (
        "Cancel the dentist appointment on Thursday afternoon",
        "Please drop my Thursday afternoon appointment with the dentist",
    ),
    ("Transfer 200 dollars from savings to checking", "Move $200 from my savings account into checking"),
    (
        "List all open support tickets assigned to Mei",
        "Show me every support ticket still open that Mei is assigned to",
    ),
    (
        "Rename the project folder Q3 reports to Q3 archive",
        "Change the name of the Q3 reports project folder to Q3 archive",
    ),
    (
        "Which of my flights next month have a layover in Chicago",
        "Show my flights next month that stop over in Chicago",
    ),
    ("Set the thermostat in the living room to 21 degrees", "Put the living room thermostat at 21 degrees"),
    ("Subscribe me to the weekly product newsletter", "Sign me up for the product newsletter that comes every week"),
    ("Split the bill of 90 euros equally among three friends", "Divide a 90 euro bill evenly between 3 friends"),
]
FEW_SHARED_WORDS = [
    ("Delete my last email from Nadia", "Get rid of the newest message Nadia sent me"),
    ("Book a table for four tonight", "Reserve dinner seating for 4 people this evening"),
    ("Cancel my subscription", "I no longer want to be billed every month, stop it"),
    ("What time does my train leave", "When is the departure of my rail trip"),
    ("Refund my purchase", "I want my money back for what I bought"),
    ("Show my upcoming meetings", "What is on my calendar next"),
    ("Increase the font size", "Make the text bigger"),
    ("Mute notifications until Monday", "Silence alerts for the rest of the week until Monday"),
]


def paraphrase_quality(pairs: list[tuple[str, str]]) -> dict[str, float]:
    """Top-1: how often a text's paraphrase is its nearest among all the paraphrases."""
    embedder = HashingEmbedder()
    left = embedder.embed_sync([a for a, _ in pairs])
    right = embedder.embed_sync([b for _, b in pairs])
    sims = left @ right.T
    off_diagonal = sims[~np.eye(len(pairs), dtype=bool)]
    return {
        "pairs": len(pairs),
        "top1": float(np.mean(sims.argmax(axis=1) == np.arange(len(pairs)))),
        "paraphrase_mean_cosine": float(np.mean(np.diag(sims))),
        "unrelated_mean_cosine": float(np.mean(off_diagonal)),
    }


# -- report --------------------------------------------------------------------------------


def print_table(results: list[dict[str, Any]]) -> None:
    header = (
        f"{'entries':>8} {'index':>6} {'mode':>8} {'p50 ms':>8} {'p99 ms':>8} {'p50+emb':>8} {'p99+emb':>8}"
        f" {'mean n':>7} {'peaks':>6} {'ins/s':>8}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        for kind in ("exact", "hnsw"):
            for mode in ("top10", "dynamic"):
                m = r[kind][mode]
                print(
                    f"{r['entries']:>8} {kind:>6} {mode:>8} {m['p50_ms']:>8.3f} {m['p99_ms']:>8.3f}"
                    f" {m['p50_ms_with_embedding']:>8.3f} {m['p99_ms_with_embedding']:>8.3f}"
                    f" {m['mean_n']:>7.1f} {m['peak_rate']:>6.2f} {r[kind]['insert_per_s']:>8.0f}"
                )
        print(
            f"{r['entries']:>8} hnsw recall@10 {r['hnsw']['recall_at_10']:.4f}"
            f" (tie-aware {r['hnsw']['recall_at_10_tie_aware']:.4f})"
        )


def verdict(results: list[dict[str, Any]]) -> dict[str, Any]:
    largest = max(results, key=lambda r: r["entries"])
    p99 = max(largest["hnsw"][mode]["p99_ms"] for mode in ("top10", "dynamic"))
    recall = largest["hnsw"]["recall_at_10"]
    return {
        "entries": largest["entries"],
        "hnsw_p99_ms": p99,
        "p99_target_ms": P99_TARGET_MS,
        "p99_met": p99 < P99_TARGET_MS,
        "recall_at_10": recall,
        "recall_target": RECALL_TARGET,
        "recall_met": recall >= RECALL_TARGET,
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    index = IndexSettings(hnsw_m=args.hnsw_m, hnsw_ef_construction=args.ef_construction, hnsw_ef_search=args.ef_search)
    results = []
    for size in args.sizes:
        result, seconds = await _timed_async(run_size(size, args.queries, args.seed, index))
        result["seconds"] = seconds
        results.append(result)
    report: dict[str, Any] = {
        "machine": {
            "python": platform.python_version(),
            "faiss": faiss.__version__,
            "threads": faiss.omp_get_max_threads(),
        },
        "settings": {
            "hnsw_m": index.hnsw_m,
            "ef_construction": index.hnsw_ef_construction,
            "ef_search": index.hnsw_ef_search,
            "dynamic": _fields(Dynamic()),
        },
        "results": results,
        "verdict": verdict(results),
    }
    if args.quality:
        report["embedder_quality"] = {
            "shared_words": paraphrase_quality(SHARED_WORDS),
            "few_shared_words": paraphrase_quality(FEW_SHARED_WORDS),
        }
    return report


async def _timed_async(awaitable: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    value = await awaitable
    return value, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--hnsw-m", type=int, default=IndexSettings().hnsw_m)
    parser.add_argument("--ef-construction", type=int, default=IndexSettings().hnsw_ef_construction)
    parser.add_argument("--ef-search", type=int, default=IndexSettings().hnsw_ef_search)
    parser.add_argument("--quality", action="store_true", help="also score the embedder on paraphrase pairs")
    parser.add_argument("--json", type=Path, help="write the full report to this file")
    args = parser.parse_args()

    report = anyio.run(main_async, args)
    print_table(report["results"])
    v = report["verdict"]
    print(
        f"\nat {v['entries']} entries: HNSW p99 {v['hnsw_p99_ms']:.3f} ms (target < {P99_TARGET_MS} ms:"
        f" {'met' if v['p99_met'] else 'MISSED'}), recall@10 {v['recall_at_10']:.4f}"
        f" (target >= {RECALL_TARGET}: {'met' if v['recall_met'] else 'MISSED'})"
    )
    for name, q in report.get("embedder_quality", {}).items():
        print(
            f"embedder, {name} ({q['pairs']} pairs): top-1 {q['top1']:.2f},"
            f" paraphrase cosine {q['paraphrase_mean_cosine']:.3f} vs unrelated {q['unrelated_mean_cosine']:.3f}"
        )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
