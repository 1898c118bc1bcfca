"""plan.lazy_chunks: chunks computed on demand and kept in a least-recently-read cache of
``cached`` chunks. The ids are a pure function of the position either way; what the cache
decides is how often a chunk is computed again (a resampled block is ~2 ms, a streamed
round more), so the tests count the computations."""

from __future__ import annotations

import numpy as np

from turbofeed.plan.lazy_chunks import LazyChunks


class Counted(LazyChunks[np.ndarray]):
    """Chunk ``c`` holds ids ``c * 10 + q``; every computation is recorded."""

    def __init__(self, size: int, chunk_len: int, cached: int) -> None:
        super().__init__(size, chunk_len, cached, np.zeros(0, np.int64))
        self.computed: list[int] = []

    def _compute(self, c: int) -> np.ndarray:
        self.computed.append(c)
        return c * 10 + np.arange(self.chunk_len, dtype=np.int64)

    def _ids(self, chunk: np.ndarray) -> np.ndarray:
        return chunk

    def __getitem__(self, position: int) -> int:
        c, q = divmod(position, self.chunk_len)
        return int(self.chunk(c)[q])


def test_the_cache_keeps_cached_chunks_and_drops_the_least_recently_read():
    chunks = Counted(size=40, chunk_len=4, cached=2)
    assert [chunks[p] for p in (0, 5, 1)] == [0, 11, 1]  # chunks 0, 1, then 0 again: read last
    assert chunks.computed == [0, 1]  # both kept: 2 chunks fit the cache
    assert chunks[9] == 21  # chunk 2 drops chunk 1 (least recently read), not chunk 0
    assert chunks[2] == 2 and chunks.computed == [0, 1, 2]  # chunk 0 still cached
    assert chunks[6] == 12 and chunks.computed == [0, 1, 2, 1]  # chunk 1 was dropped: computed again


def test_at_reads_positions_across_chunks_in_any_order():
    chunks = Counted(size=40, chunk_len=4, cached=1)
    positions = np.array([13, 0, 3, 13, 39, 4])
    assert chunks.at(positions).tolist() == [31, 0, 3, 31, 93, 10]
    assert sorted(chunks.computed) == [0, 1, 3, 9]  # each chunk once per call, whatever the order
