"""Embedders: the protocol the memory uses, and a local default that needs no download."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from itertools import pairwise
from typing import Protocol, runtime_checkable

import anyio
import msgspec
import numpy as np


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit vectors; cosine similarity is then an inner product.

    `embed` returns a float32 array of shape (len(texts), dim) whose rows have
    L2 norm 1 (a text with nothing to embed may give zeros). Any object with
    these two members works: the local `HashingEmbedder` or an
    OpenAI-compatible embeddings client. An optional `name` attribute (e.g.
    the model's name) is recorded in a store file, and the store then refuses
    to open with an embedder of another name or dim, whose vectors would not
    be comparable.
    """

    @property
    def dim(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> np.ndarray: ...


class HashingSettings(msgspec.Struct, frozen=True, kw_only=True):
    """How `HashingEmbedder` builds its features. Changing any field changes every vector."""

    dim: int = 384
    char_ngrams: tuple[int, ...] = (3, 4)
    word_weight: float = 1.0
    bigram_weight: float = 0.6
    char_weight: float = 0.8
    drop_stopwords: bool = True
    cache_size: int = 200_000
    inline_batch: int = 64


_STOPWORDS = frozenset(
    "a an and are as at be by can could do for from has have i in is it its me my "
    "of on or please so that the their them this to was were will with would you your".split()
)
_WORD = re.compile(r"\w+")


class HashingEmbedder:
    """Local, deterministic text embedder: signed feature hashing, no model, no network.

    Each text contributes three feature families, hashed into `dim` buckets
    with a sign bit (so collisions cancel on average instead of adding up):
    word unigrams (stop words dropped), word bigrams, and character 3- and
    4-grams of each word with boundary marks (which catch inflections such
    as "email"/"emails"). Counts are damped as 1 + ln(tf); each family is
    L2-normalised, weighted, summed, and the sum L2-normalised again.

    What it is good for: lexical similarity. Texts that share words or word
    stems score high; synonyms ("remove" vs "delete") count for nothing.
    Measured with `bench/memory_retrieval.py --quality`: on 24 hand-written
    request/paraphrase pairs that reuse some wording, each paraphrase is the
    nearest of the 24 candidates (top-1 1.00), with mean cosine 0.59 against
    0.04 for unrelated pairs; on 8 pairs that share almost no words, top-1
    falls to 0.25 (cosine 0.11 against 0.04). Use a semantic embedding model
    through the `Embedder` protocol when paraphrases matter. An empty text
    gives the zero vector, similar to nothing.
    """

    name = "hashing-v1"

    def __init__(self, settings: HashingSettings | None = None) -> None:
        self.settings = settings or HashingSettings()
        self._cache: dict[str, tuple[list[int], list[int]]] = {}
        self._bigram_cache: dict[str, int] = {}

    @property
    def dim(self) -> int:
        return self.settings.dim

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors for `texts`; large batches run in a worker thread so the event loop stays free."""
        if len(texts) > self.settings.inline_batch:
            return await anyio.to_thread.run_sync(self.embed_sync, texts)
        return self.embed_sync(texts)

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray:
        """The same vectors as `embed`, for callers outside an event loop."""
        s = self.settings
        n = len(texts)
        rows: list[int] = []
        features: list[int] = []
        for row, text in enumerate(texts):
            words = _WORD.findall(text.lower())
            for word in words:
                unigram, grams = self._word_features(word)
                features.extend(unigram)
                features.extend(grams)
                rows.extend([row] * len(unigram))
                rows.extend([row + 2 * n] * len(grams))
            features.extend(self._bigram_feature(a, b) for a, b in pairwise(words))
            rows.extend([row + n] * max(len(words) - 1, 0))
        families = _normalised(_hashed_counts(rows, features, 3 * n, s.dim)).reshape(3, n, s.dim)
        weights = np.array([s.word_weight, s.bigram_weight, s.char_weight], dtype=np.float32)
        return _normalised(np.tensordot(weights, families, axes=1))

    def _word_features(self, word: str) -> tuple[list[int], list[int]]:
        cached = self._cache.get(word)
        if cached is not None:
            return cached
        unigram = [] if self.settings.drop_stopwords and word in _STOPWORDS else [_feature_id("w:" + word)]
        marked = f"<{word}>"
        grams = [
            _feature_id(f"c{n}:" + marked[i : i + n])
            for n in self.settings.char_ngrams
            for i in range(len(marked) - n + 1)
        ]
        if len(self._cache) >= self.settings.cache_size:
            self._cache.clear()
        self._cache[word] = (unigram, grams)
        return unigram, grams

    def _bigram_feature(self, first: str, second: str) -> int:
        key = f"{first} {second}"
        cached = self._bigram_cache.get(key)
        if cached is None:
            if len(self._bigram_cache) >= self.settings.cache_size:
                self._bigram_cache.clear()
            cached = self._bigram_cache[key] = _feature_id("b:" + key)
        return cached


def _feature_id(feature: str) -> int:
    """A stable 63-bit id; Python's own `hash` is salted per process."""
    return int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "little") >> 1


def _hashed_counts(rows: list[int], features: list[int], n: int, dim: int) -> np.ndarray:
    """Rows of signed, sublinear (1 + ln tf) feature counts folded into `dim` buckets."""
    if not features:
        return np.zeros((n, dim), dtype=np.float32)
    row = np.asarray(rows, dtype=np.int64)
    fid = np.asarray(features, dtype=np.int64)
    order = np.lexsort((fid, row))
    row, fid = row[order], fid[order]
    starts = np.flatnonzero(np.concatenate(([True], (row[1:] != row[:-1]) | (fid[1:] != fid[:-1]))))
    tf = np.diff(np.append(starts, len(fid)))
    row, fid = row[starts], fid[starts]
    sign = np.where((fid >> 62) & 1, 1.0, -1.0)
    values = sign * (1.0 + np.log(tf))
    return np.bincount(row * dim + fid % dim, weights=values, minlength=n * dim).reshape(n, dim).astype(np.float32)


def _normalised(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.where(norms == 0.0, 1.0, norms)).astype(np.float32, copy=False)
