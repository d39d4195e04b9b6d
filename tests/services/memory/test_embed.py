"""The local hashing embedder: deterministic, unit-length, lexically sensible."""

from __future__ import annotations

import numpy as np

from faultline.services.memory import Embedder, HashingEmbedder, HashingSettings

TEXT = "Cancel order 4021 and refund the card"


async def test_vectors_are_unit_float32_of_the_configured_dim() -> None:
    vectors = await HashingEmbedder().embed([TEXT, "book a flight", "x"])
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    small = await HashingEmbedder(HashingSettings(dim=64)).embed([TEXT])
    assert small.shape == (1, 64)


async def test_empty_input_and_empty_text() -> None:
    embedder = HashingEmbedder()
    assert (await embedder.embed([])).shape == (0, 384)
    assert not (await embedder.embed(["", "  !? "])).any()


async def test_same_text_same_vector_across_instances_batches_and_processes() -> None:
    first = HashingEmbedder()
    alone = (await first.embed([TEXT]))[0]
    in_batch = (await first.embed(["something else entirely", TEXT] * 40))[1]
    fresh = HashingEmbedder(HashingSettings(cache_size=1))
    uncached = (await fresh.embed([TEXT, TEXT]))[1]
    assert np.array_equal(alone, uncached)
    assert np.allclose(alone, in_batch, atol=1e-7)
    # Pinned values: a salted hash (Python's hash()) would change them in every process.
    nonzero = np.flatnonzero(alone)
    assert nonzero[:6].tolist() == [17, 28, 35, 58, 64, 65]
    assert len(nonzero) == 59
    assert np.allclose(alone[nonzero[:3]], [-0.078972, 0.078972, -0.078972], atol=1e-6)


async def test_similar_texts_score_higher_than_unrelated_ones() -> None:
    embedder = HashingEmbedder()
    anchor, paraphrase, inflected, unrelated = await embedder.embed(
        [
            "Delete all emails from Nadia sent last week",
            "Remove the emails Nadia sent me during the last week",
            "deleting every email Nadia sent",
            "Book a window seat on the morning flight to Denver",
        ]
    )
    assert anchor @ paraphrase > 0.4
    assert anchor @ inflected > 0.3
    assert abs(float(anchor @ unrelated)) < 0.15
    assert anchor @ paraphrase > anchor @ unrelated + 0.3


async def test_case_and_punctuation_do_not_matter() -> None:
    a, b = await HashingEmbedder().embed(["Refund order 12, please!", "refund ORDER 12 please"])
    assert np.allclose(a, b)


def test_it_satisfies_the_embedder_protocol() -> None:
    assert isinstance(HashingEmbedder(), Embedder)
