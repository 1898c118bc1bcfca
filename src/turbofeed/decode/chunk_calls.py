"""The native calls of a chunk of samples (``csrc/chunk.c``, bound in ``csrc/module_chunk.c``
and ``csrc/module_read.c``), each one call that releases the GIL for the whole chunk:
the GPU path's reads (:func:`read_chunk`, :func:`read_chunk_at`) and the CPU path's
reads and decodes (:func:`run_chunk`, :func:`run_chunk_at`), with their status codes.

:mod:`turbofeed.decode.native` imports them: callers use them as ``native.<name>`` (the
tests and benches patch them there), after checking :func:`native.available
<turbofeed.decode.native.available>`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .limits import DEFAULT, DefaultLimit, resolve

try:
    from . import _crop
except ImportError:  # native.available() is False: nothing calls these
    _crop = None  # type: ignore[assignment]

#: :func:`read_chunk`'s statuses: read, a JPEG the crop decoder takes; read, for the
#: general decoder; read, bad data (the per-sample path names it); the file changed; the
#: read failed (errno); fewer bytes than indexed. From READ_CHANGED on: storage faults.
READ_OK, READ_GENERAL, READ_BAD, READ_CHANGED, READ_ERRNO, READ_SHORT = 0, 1, 2, 3, 4, 5
#: :func:`run_chunk`'s codes: decoded; for the per-sample path; no memory (then the
#: storage faults READ_CHANGED, READ_ERRNO, READ_SHORT as :func:`read_chunk` says them).
RUN_OK, RUN_GENERAL, RUN_NOMEM = 0, 1, 2
#: :func:`run_chunk_at`, :func:`read_chunk_at`: the sample's shard is not open (untouched:
#: open it, run or read it again)
RUN_UNOPENED = 6


def read_chunk(fds: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, stamps: np.ndarray,
               buffer: np.ndarray | bytearray, starts: np.ndarray, *, checks: np.ndarray | None = None,
               max_pixels: int | None | DefaultLimit = None) -> np.ndarray:
    """Read a chunk of samples into ``buffer`` and their JPEG headers, in one call that
    releases the GIL: for sample ``i``, ``sizes[i]`` bytes at ``offsets[i]`` of descriptor
    ``fds[i]`` (int32) go to ``buffer[starts[i]:]``; then one
    ``fstat`` must show the shard's identity ``stamps[i]`` (size, mtime_ns, ctime_ns), so
    the bytes are the indexed ones (:mod:`turbofeed.io.local.files`). With
    ``max_pixels``, an image over the limit is bad data; with ``checks`` (uint8 or bool
    per sample), those samples' whole scans are checked (:func:`turbofeed.decode.native.check`'s verdict).

    Returns:
        int32 ``(n, 3)``: (status, height, width) per sample; status :data:`READ_OK`,
        :data:`READ_GENERAL` (not a JPEG the crop decoder takes: CMYK, no readable
        header), :data:`READ_BAD` (over the limit, or a damaged scan), :data:`READ_CHANGED`,
        :data:`READ_ERRNO` (the errno in place of the height) or :data:`READ_SHORT`.
    """
    extra = {} if checks is None else {"checks": checks.view(np.uint8)}
    out = _crop.read_chunk(fds, offsets, sizes, stamps, buffer, starts, max_pixels=resolve(max_pixels) or 0,
                           **extra)
    return np.frombuffer(out, np.int32).reshape(-1, 3)


def read_chunk_at(order: np.ndarray, first: int, step: int, count: int, table: tuple[np.ndarray, ...],
                  buffer: np.ndarray, *, max_pixels: int | None | DefaultLimit = None
                  ) -> tuple[np.ndarray | None, np.ndarray, int]:
    """:func:`read_chunk` with the chunk's bookkeeping native too, as :func:`run_chunk_at`
    does it, so Python runs a fixed number of operations per chunk: row ``i`` is sample
    ``order[first + i * step]``, its read gathered from ``table`` by its id, its bytes
    read into ``buffer``, its header read, the pixel limit applied, its whole scan checked
    where its checked flag is 0 and the flag set where it reads as :data:`READ_OK`.

    The buffer's size: the rows readable by range take their bytes one after another in
    row order, whether their shard is open or not, so the layout, and ``total``, the
    bytes it takes, depend only on the order and the table, never on which shards are
    open. The call works it out first, holding the GIL (a few operations a row); where
    ``buffer`` is shorter it reads nothing and returns None for ``head``, and the caller
    takes a buffer of ``total`` bytes and calls again (:meth:`ChunkReader.read
    <turbofeed.engine.chunk_reads.ChunkReader.read>` takes one the size of the largest chunk
    so far, so that happens when a chunk is larger than any before). One call in the
    usual case, no second native call to size the buffer, and a row whose shard another
    thread opens meanwhile still has its place.

    Args:
        order: the pass's int64 order of sample ids (C-contiguous).
        table: as :func:`run_chunk_at`'s (``labels`` is not read).
        buffer: uint8, writable: the bytes go to ``buffer[start:start + size]``.

    Returns:
        ``(head, place, total)``: ``place`` int64 ``(n, 3)``, each row's (sample id,
        start, size), size 0 for a row not readable by range; ``head`` None where
        ``buffer`` is shorter than ``total``, else int32 ``(n, 3)`` (status, height, width)
        per row as :func:`read_chunk` says them, :data:`READ_GENERAL` for a row not
        readable by range (the per-sample path reads it) and :data:`RUN_UNOPENED` for one
        whose shard is not open (nothing read: open it, read it at its place).

    Raises:
        ValueError: arrays of other types or lengths, positions or ids out of range, a
            read-only ``buffer`` or checked flags.
    """
    head, place, total = _crop.read_chunk_at(order, first, step, count, table, buffer,
                                             max_pixels=resolve(max_pixels) or 0)
    return (None if head is None else np.frombuffer(head, np.int32).reshape(-1, 3),
            np.frombuffer(place, np.int64).reshape(-1, 3), total)


def run_chunk(fds: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, stamps: np.ndarray, gids: np.ndarray,
              checks: np.ndarray, rows: np.ndarray, program: np.ndarray, epoch_key: int, out: np.ndarray, *,
              channels_first: bool = True, offset: Sequence[float] | np.ndarray | None = None,
              factor: Sequence[float] | np.ndarray | None = None, max_pixels: int | None | DefaultLimit = DEFAULT,
              emulate_s: float = 0.0) -> tuple[np.ndarray, float]:
    """The CPU path of a chunk of samples in one call that releases the GIL: sample ``i``
    read and checked as :func:`read_chunk` reads it, its window chosen as :func:`windows`
    chooses it (``program``, ``epoch_key``, its id ``gids[i]`` and its header's size),
    and, where the window has ``out``'s size, decoded as :func:`crop_resize` decodes it
    (its whole scan checked where ``checks[i]``) into row ``rows[i]`` of ``out``.

    Args:
        out: a batch: C-contiguous ``(N, 3, h, w)`` or ``(N, h, w, 3)``, uint8, or float32
            with ``offset`` and ``factor``.
        emulate_s: > 0 replaces each decode by a wait of that many seconds without the
            GIL (bench/emulated_cores.py: each thread then acts as one more core).

    Returns:
        ``(codes, read_seconds)``: int32 ``(n, 2)``, each sample's code (:data:`RUN_OK`,
        :data:`RUN_GENERAL`: the per-sample path decides and names the error, its row
        left undefined; :data:`RUN_NOMEM`; or a storage fault, :data:`READ_CHANGED`,
        :data:`READ_ERRNO`, :data:`READ_SHORT`) and the errno of a failed read; and the
        seconds spent reading (the rest of the call decoded).
    """
    h, w = out.shape[2:] if channels_first else out.shape[1:3]
    extra = {} if offset is None and factor is None else {"offset": _floats(offset), "factor": _floats(factor)}
    codes, reading = _crop.run_chunk(fds, offsets, sizes, stamps, gids, checks.view(np.uint8), rows, program, epoch_key,
                                     out, h, w, channels_first, max_pixels=resolve(max_pixels) or 0,
                                     emulate_ns=int(emulate_s * 1e9), **extra)
    return np.frombuffer(codes, np.int32).reshape(-1, 2), reading * 1e-9


def run_chunk_at(order: np.ndarray, first: int, step: int, count: int, row0: int, table: tuple[np.ndarray, ...],
                 program: np.ndarray, epoch_key: int, out: np.ndarray, labels_out: np.ndarray, ids_out: np.ndarray,
                 *, channels_first: bool = True, offset: Sequence[float] | np.ndarray | None = None,
                 factor: Sequence[float] | np.ndarray | None = None, max_pixels: int | None | DefaultLimit = DEFAULT,
                 emulate_s: float = 0.0) -> tuple[np.ndarray | None, float, int]:
    """:func:`run_chunk` with the chunk's bookkeeping native too, so Python runs a fixed
    number of operations per chunk (:mod:`turbofeed.engine.chunks`): row ``i`` is sample
    ``order[first + i * step]``, its read arrays gathered from ``table`` by its id, decoded
    into row ``row0 + i`` of ``out``; where decoded, its label and id are written to
    ``labels_out[row0 + i]`` and ``ids_out[row0 + i]`` and its checked flag set.

    Args:
        order: the pass's int64 order of sample ids (C-contiguous).
        table: ``(readable, source, fds, offsets, sizes, stamps, checked, labels)``, by
            sample id but ``fds`` (-1: not open) and ``stamps`` by source: uint8, int32,
            int32, int64 ... (:meth:`turbofeed.io.local.ranges.SampleRanges.arrays`).
        out, labels_out, ids_out: the batch's images (as :func:`run_chunk`), labels, ids.

    Returns:
        ``(codes, read_seconds, bytes_read)``: None for ``codes`` where every row was
        decoded (the usual chunk: no array made, nothing to look at), else the codes of
        :func:`run_chunk`, with :data:`RUN_GENERAL` for a sample not readable by range
        and :data:`RUN_UNOPENED` for one whose shard is not open.

    Raises:
        ValueError: arrays of other types or lengths, positions or ids out of range.
    """
    h, w = out.shape[2:] if channels_first else out.shape[1:3]
    extra = {} if offset is None and factor is None else {"offset": _floats(offset), "factor": _floats(factor)}
    codes, reading, nbytes = _crop.run_chunk_at(order, first, step, count, row0, table, program, epoch_key, out, h, w,
                                                labels_out, ids_out, channels_first,
                                                max_pixels=resolve(max_pixels) or 0,
                                                emulate_ns=int(emulate_s * 1e9), **extra)
    return None if codes is None else np.frombuffer(codes, np.int32).reshape(-1, 2), reading * 1e-9, nbytes


def _floats(values: Sequence[float] | np.ndarray | None) -> tuple[float, ...] | None:
    """The numbers as floats; None as is (the extension says it needs 3 numbers)."""
    return None if values is None else tuple(map(float, values))
