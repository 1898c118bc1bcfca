"""Native JPEG fast path: decode only the crop window, resize, flip and write into a batch
slot in one C call that releases the GIL (the optional extension ``turbofeed.decode._crop``,
built against libjpeg-turbo by ``pip install`` when a compiler and the libjpeg headers are
present; without it :func:`available` is False, turbofeed uses its Python path, about 2x
slower, and the first loader of the process says so once: :func:`log_once_if_off`).

What it computes: the pixels of
``Image.fromarray(decode(data)).resize((w, h), Image.BILINEAR, box=box)`` (the Python
path, :func:`turbofeed.transforms.resample`) bit for bit, measured max difference 0 on
the test images. It decodes only the rows and columns the filter reads, and stops after
the last row it needs (with ``check_scan``, the rest of the scan is then only
Huffman-decoded, to check it). Set ``TURBOFEED_NATIVE=0`` to turn it off.

Fallbacks: :class:`NotImplementedError` for streams it leaves to the general decoder
(CMYK/YCCK, or bytes that do not end with an EOI marker: they may be truncated in a part
it never decodes, and the strict full decode must judge them). :class:`ValueError` for
damaged data (libjpeg's corrupt-data warnings in the scan, whatever the crop with
``check_scan``; not header warnings such as junk bytes before a marker) or bad arguments.
:class:`~turbofeed.errors.ImageTooLarge` (a ValueError: catch it first) for an image
over the pixel limit, from its header, before anything its size is allocated or decoded:
a bad sample, never one for the general decoder.

Example::

    out = np.empty((3, 224, 224), np.uint8)
    crop_resize(data, window.box, out, flip=window.flip, channels_first=True)
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from collections.abc import Sequence

import numpy as np

from .chunk_calls import (READ_BAD, READ_CHANGED, READ_ERRNO, READ_GENERAL, READ_OK, READ_SHORT, RUN_GENERAL,
                          RUN_NOMEM, RUN_OK, RUN_UNOPENED, _floats, read_chunk, read_chunk_at, run_chunk, run_chunk_at)
from .limits import DEFAULT, DefaultLimit, resolve

log = logging.getLogger("turbofeed")

# How to get the extension; setup.py prints the same commands when it cannot build it.
BUILD_FIX = ("install a C compiler and the libjpeg-turbo headers (Debian: apt-get install gcc "
             "libjpeg62-turbo-dev; Ubuntu: libjpeg-turbo8-dev; Fedora: dnf install gcc libjpeg-turbo-devel), "
             "then rebuild: pip install --force-reinstall --no-deps --no-cache-dir turbofeed "
             "(in a checkout: pip install -e .)")

try:
    from . import _crop
except ImportError as exc:
    _crop = None  # type: ignore[assignment]  # _ENABLED is False: nothing calls it
    if importlib.util.find_spec(f"{__package__}._crop") is None:
        _WHY_OFF = ("the extension turbofeed.decode._crop is not built (no C compiler or libjpeg headers "
                    "when turbofeed was installed)")
        _FIX: str | None = BUILD_FIX
    else:  # built, but does not load: e.g. the libjpeg shared library is gone
        _WHY_OFF = f"the extension turbofeed.decode._crop does not import: {exc}"
        _FIX = f"install the libjpeg-turbo runtime library (Debian: libjpeg62-turbo), or {BUILD_FIX}"
else:
    _WHY_OFF, _FIX = "", None

_ENABLED = _crop is not None and os.environ.get("TURBOFEED_NATIVE", "1") != "0"
if _crop is not None and not _ENABLED:
    _WHY_OFF, _FIX = "turned off with TURBOFEED_NATIVE=0", "unset TURBOFEED_NATIVE"
_scratch = threading.local()
_notice = {"done": False}
_notice_lock = threading.Lock()


def available() -> bool:
    """True when the extension is built and not turned off with ``TURBOFEED_NATIVE=0``."""
    return _ENABLED


def built() -> bool:
    """True when the extension is built and loads (even under ``TURBOFEED_NATIVE=0``): its
    verdicts on damage (:func:`scan_checks`, :mod:`turbofeed.decode.scan`) are about
    correctness, not speed."""
    return _crop is not None


def status() -> tuple[bool, str, str | None]:
    """``(on, why, fix)``: whether the native decoder is in use, why (not), and how to
    get it (None when on). ``turbofeed doctor`` shows this."""
    if _ENABLED:
        built = os.path.basename(_crop.__file__)
        return True, f"built ({built}), crop-window decode with libjpeg-turbo; TURBOFEED_NATIVE=0 turns it off", None
    return False, _WHY_OFF, _FIX


def log_once_if_off() -> None:
    """Say once per process that the native decoder is off, where a loader would use it:
    a warning with why and the fix, or an info line when ``TURBOFEED_NATIVE=0`` asked for it."""
    if _ENABLED:
        return
    with _notice_lock:
        if _notice["done"]:
            return
        _notice["done"] = True
    if _crop is not None:
        log.info("turbofeed: the native JPEG decoder is off (TURBOFEED_NATIVE=0): decoding takes the "
                 "Python path, about 2x slower")
    else:
        log.warning("turbofeed: the native JPEG decoder is off, so decoding runs about 2x slower: %s. "
                    "Fix: %s. `turbofeed doctor` shows what is on.", _WHY_OFF, _FIX)


def header(data: bytes | bytearray | memoryview | np.ndarray) -> tuple[int, int, str]:
    """``(height, width, colorspace)`` from a JPEG header; colorspace is ``"gray"``,
    ``"rgb"``, ``"ycbcr"``, ``"cmyk"``, ``"ycck"`` or ``"unknown"``.

    Raises:
        ValueError: not a JPEG, or an unreadable header.
    """
    return _crop.header(data)


def crop_resize(data: bytes | bytearray | memoryview | np.ndarray, box: Sequence[float], out: np.ndarray, *,
                flip: bool = False, channels_first: bool = True, dct_scale: bool = False,
                offset: Sequence[float] | np.ndarray | None = None,
                factor: Sequence[float] | np.ndarray | None = None,
                max_pixels: int | None | DefaultLimit = DEFAULT, check_scan: bool = True) -> None:
    """Decode the part of JPEG ``data`` under ``box`` and resize it into ``out``.

    Args:
        data: JPEG bytes (any bytes-like object).
        box: ``(x0, y0, x1, y1)`` in source pixels, floats (``Window.box``); clamped to
            the image like :func:`turbofeed.transforms.resample` does.
        out: C-contiguous ``(3, h, w)`` (``channels_first``) or ``(h, w, 3)`` array, uint8,
            or float32 with ``offset`` and ``factor``; the output size is its shape.
        flip: mirror left-right.
        dct_scale: decode at half size (libjpeg-turbo's exact 1/2 IDCT scaling) when the
            box is at least twice the output in both axes (about 20% faster then); the
            pixels are those of the half-size decode, not the Python path's (measured max
            difference 22 levels, mean 0.94, on 112x112 crops of ImageNet-like JPEGs).
        offset, factor: 3 numbers each: ``out = (pixel - offset) * factor`` in float32,
            as :func:`turbofeed.transforms.write_slot` computes it.
        max_pixels: the pixel limit (None: none), checked from the header; default
            :func:`turbofeed.decode.max_pixels` at call time (loaders pass it).
        check_scan: check the whole entropy-coded scan for damage, not only the rows
            down to the box's last (rows above the box are always checked): the rest of
            the scan is Huffman-decoded without IDCT, colour conversion or resize.
            Loaders check a sample until it is known intact (the dataset index's verdict,
            or their own first check: :mod:`turbofeed.engine.checked`), so the verdict
            does not depend on the crop.

    Raises:
        ImageTooLarge: more pixels than ``max_pixels``: a bad sample, do not fall back.
        NotImplementedError: CMYK/YCCK, or no EOI marker at the end: use the general decoder.
        ValueError: corrupt or not a JPEG, or ``out`` of the wrong shape or dtype.
    """
    _call(_crop.crop_resize, data, box, out, flip, channels_first, offset, factor, max_pixels,
          dct_scale=dct_scale, check_scan=check_scan)


def resize(pixels: np.ndarray, box: Sequence[float], out: np.ndarray, *, flip: bool = False,
           channels_first: bool = True, offset: Sequence[float] | np.ndarray | None = None,
           factor: Sequence[float] | np.ndarray | None = None,
           max_pixels: int | None | DefaultLimit = DEFAULT) -> None:
    """:func:`crop_resize` for pixels already decoded (HDF5, Zarr, .npy sources): the same
    Pillow-exact resize of ``box`` into ``out``, reading only the rows and columns the
    filter needs, with the GIL released.

    Args:
        pixels: C-contiguous uint8 ``(H, W)``, ``(H, W, 1)``, ``(H, W, 3)`` or
            ``(H, W, 4)`` (gray repeated to RGB, alpha dropped, as
            :func:`turbofeed.decode.cpu.as_rgb` does).
        box, out, flip, channels_first, offset, factor, max_pixels: as for :func:`crop_resize`
            (the limit applies to arrays too, so a sample's fate does not depend on its source).

    Raises:
        ImageTooLarge: more pixels than ``max_pixels``.
        ValueError: another dtype, shape or memory layout, or bad arguments.
    """
    _call(_crop.resize, pixels, box, out, flip, channels_first, offset, factor, max_pixels)


def _call(kernel, source, box: Sequence[float], out: np.ndarray, flip: bool, channels_first: bool,
          offset: Sequence[float] | np.ndarray | None, factor: Sequence[float] | np.ndarray | None,
          max_pixels: int | None | DefaultLimit, **extra: bool) -> None:
    if out.ndim != 3 or out.shape[0 if channels_first else 2] != 3:
        raise ValueError(f"out must be (3, h, w) or (h, w, 3), got shape {out.shape}")
    h, w = out.shape[1:] if channels_first else out.shape[:2]
    x0, y0, x1, y1 = box
    limit = resolve(max_pixels) or 0  # the extension's "no limit"
    if offset is None and factor is None:
        kernel(source, x0, y0, x1, y1, out, h, w, flip, channels_first, max_pixels=limit, **extra)
    else:
        kernel(source, x0, y0, x1, y1, out, h, w, flip, channels_first,
               offset=_floats(offset), factor=_floats(factor), max_pixels=limit, **extra)


def scratch(height: int, width: int) -> np.ndarray:
    """A per-thread ``(height, width, 3)`` uint8 array, reused across calls (for outputs
    of a dtype the extension does not write, converted afterwards)."""
    array = getattr(_scratch, "array", None)
    if array is None or array.shape != (height, width, 3):
        array = _scratch.array = np.empty((height, width, 3), np.uint8)
    return array


# The dataset index's reads (module_index.c): the tar header walk, many members' bytes,
# many JPEGs' sizes, each one call without the GIL (so the index's threads run in
# parallel). Callers check available() and keep their Python path for when it is False.

def tar_walk(fd: int, file_size: int) -> tuple[bytes, np.ndarray, np.ndarray, np.ndarray] | None:
    """``(names, name_end, offset, size)`` of the regular files of the plain, whole tar
    shard open as ``fd`` (name ``i`` is ``names[name_end[i - 1]:name_end[i]]``, raw bytes;
    int64 arrays), or None when it is not plain and whole: exactly when
    :func:`turbofeed.io.local.tarscan.fast_members` says None.

    Raises:
        OSError: a read failed.
    """
    found = _crop.tar_walk(fd, file_size)
    if found is None:
        return None
    names, ends, offsets, sizes = found
    return names, np.frombuffer(ends, np.int64), np.frombuffer(offsets, np.int64), np.frombuffer(sizes, np.int64)


def gather(fd: int, offsets: np.ndarray, sizes: np.ndarray) -> bytes:
    """The bytes of the members at ``offsets`` (``sizes`` bytes each) of the file open
    as ``fd``, one after another.

    Raises:
        OSError: a read failed, or the file ends before a member.
    """
    return _crop.gather(fd, np.ascontiguousarray(offsets, np.int64), np.ascontiguousarray(sizes, np.int64))


#: :func:`jpeg_sizes`' verdicts: the size; no readable header; not decided (ask the Python probe).
SIZE_OK, SIZE_NONE, SIZE_ASK = 0, 1, 2


def jpeg_sizes(fd: int, offsets: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """``(height, width, verdict)`` per image member at ``offsets`` (``sizes`` bytes each)
    of the file open as ``fd``, an int32 array of shape ``(n, 3)``: :data:`SIZE_OK` with
    what :func:`turbofeed.decode.probe.probe_size` gives; :data:`SIZE_NONE` (0, 0) where
    it gives (0, 0); :data:`SIZE_ASK` where only it can say (not a JPEG, or a JPEG header
    that libjpeg-turbo versions may judge differently: jpeg_sizes.c).

    Raises:
        OSError: a read failed.
    """
    out = _crop.jpeg_sizes(fd, np.ascontiguousarray(offsets, np.int64), np.ascontiguousarray(sizes, np.int64))
    return np.frombuffer(out, np.int32).reshape(-1, 3)


# A chunk of samples in one call without the GIL (chunk.c, windows.c, module_chunk.c,
# module_read.c): the hot path's Python runs once per chunk around it
# (turbofeed.engine.chunks). The chunk's reads and decodes are in chunk_calls.py, and
# called as native.<name> (tests and benches patch them here): read_chunk,
# read_chunk_at, run_chunk, run_chunk_at and their status codes (imported above).

#: :func:`scan_checks`' verdicts: not checked (the loader checks it when it first decodes
#: it); its whole scan intact; damaged.
SCAN_UNKNOWN, SCAN_INTACT, SCAN_DAMAGED = 0, 1, 2


def scan_checks(fd: int, offsets: np.ndarray, sizes: np.ndarray, *, max_pixels: int | None = None) -> np.ndarray:
    """Each image member's scan verdict (uint8 :data:`SCAN_INTACT`, :data:`SCAN_DAMAGED`,
    :data:`SCAN_UNKNOWN`), ``sizes[i]`` bytes at ``offsets[i]`` of the file open as
    ``fd``: its whole entropy-coded scan checked as :func:`turbofeed.decode.scan.check`
    checks it (the same native check), for the dataset index. A member that is no JPEG
    (only its first two bytes read), has more than ``max_pixels`` pixels (None: no limit)
    or runs past the file's end is :data:`SCAN_UNKNOWN`. Works under ``TURBOFEED_NATIVE=0``
    too (a verdict, not a speed-up); needs the extension (:func:`built`).

    Raises:
        OSError: a read failed.
    """
    out = _crop.scan_checks(fd, np.ascontiguousarray(offsets, np.int64), np.ascontiguousarray(sizes, np.int64),
                            max_pixels=max_pixels or 0)
    return np.frombuffer(out, np.uint8)


def windows(program: np.ndarray, epoch_key: int, gids: np.ndarray, heights: np.ndarray,
            widths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The crop windows of a chunk from ``program`` (:mod:`turbofeed.transforms.program`)
    without the GIL: sample ``gids[i]`` (an image of ``heights[i] x widths[i]``, >= 1)
    gets what ``Compose.window`` gives it under ``epoch_key``
    (:func:`turbofeed.transforms.draws.epoch_key`), to the bit.

    Returns:
        ``(boxes, heights, widths, flips)``: float64 ``(n, 4)``, int64 ``(n,)`` twice, bool.

    Raises:
        ValueError: a malformed program, or a size below 1.
    """
    n = len(gids)
    boxes, sizes, flips = np.empty((n, 4), np.float64), np.empty((n, 2), np.int64), np.empty(n, np.uint8)
    _crop.windows(program, epoch_key, np.ascontiguousarray(gids, np.int64), np.ascontiguousarray(heights, np.int32),
                  np.ascontiguousarray(widths, np.int32), boxes, sizes, flips)
    return boxes, sizes[:, 0], sizes[:, 1], flips.view(bool)
