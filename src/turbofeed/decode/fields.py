"""Per-field decoding of WebDataset members, by extension (docs/design.md, "decode").

:func:`decode_field` turns one member's bytes into a Python value. The extension is the
full one :func:`turbofeed.io.table.split_key` gives (lower case, ``seg.png`` for
``a/b.seg.png``); the built-in decoders go by its last part:

| ext (last part) | result | notes |
|---|---|---|
| `jpg jpeg png webp bmp` `ppm pgm pbm tif tiff gif` | `ndarray` (H, W, 3) uint8 RGB | [1] |
| the same, `as_mask=True` | `ndarray` (H, W) as stored | [2] |
| `txt` | `str` | strict UTF-8, not stripped |
| `json` | `object` | `json.loads`: dict, list, str, int, float, bool, None |
| `cls` | `int` | the stripped text (`b" 7\\n"` -> 7), within int64 |
| `npy` | `ndarray` | [3] |
| anything else: `pth`, `mp4`, none | `bytes` | as stored |

[1] :func:`turbofeed.decode.decode`: grey replicated, alpha dropped, the pixel limit
checked from the header before any decode.
[2] :func:`decode_mask`: single-channel images (Pillow modes ``1 L LA P I I;16 F``)
keep their stored values, e.g. the class indices of a palette or grey mask: uint8 for
``P``, ``L`` and ``LA`` (alpha dropped), 0/1 uint8 for ``1``, uint16 for ``I;16``, int32
for ``I``, float32 for ``F``; other modes come out as [1].
[3] ``numpy.load(allow_pickle=False)``, a new array; the size the header declares is
checked against the bytes that follow before anything is allocated.

A user decoder wins: ``decoders`` maps an extension to ``f(bytes) -> value`` and is
looked up with the full extension first, then with each shorter suffix down to the last
part (``seg.png``, then ``png``). ``{"jpg": bytes}`` keeps JPEGs encoded (e.g. for a GPU
decode later).

Errors: :class:`FieldError` (a ``ValueError``) names the extension and the reason, e.g.
``txt member is not UTF-8: 'utf-8' codec can't decode byte 0xff in position 3 ...``; a
user decoder that raises is wrapped the same way, naming the decoder. An image over the
pixel limit raises :class:`~turbofeed.errors.ImageTooLarge` (a ``ValueError`` too) as
:func:`turbofeed.decode.decode` does.
"""

from __future__ import annotations

import io
import json
import math
import types
from collections.abc import Callable, Mapping
from typing import Any, cast

import numpy as np
from PIL import Image

from ..errors import ImageTooLarge, TurbofeedError
from .probe import IMAGE_EXTENSIONS
from . import scan
from .cpu import decode
from .limits import DEFAULT, DefaultLimit, check_pixels, resolve

Decoder = Callable[[bytes], Any]

FIELD_TYPES: Mapping[str, type] = types.MappingProxyType({
    **{ext: np.ndarray for ext in IMAGE_EXTENSIONS},
    "txt": str,
    "json": object,
    "cls": int,
    "npy": np.ndarray,
})
"""The type :func:`decode_field` returns per last part of the extension, without user
decoders; any extension not listed gives ``bytes``. ``json`` is any JSON value."""

_MASK_MODES = frozenset({"1", "L", "LA", "P", "I", "I;16", "I;16B", "I;16L", "I;16N", "F"})
_NPY_MAGIC = b"\x93NUMPY"


class FieldError(TurbofeedError, ValueError):
    """A member could not be decoded as its extension says.

    Args:
        ext: the member's extension (``txt``, ``seg.png``).
        reason: what went wrong, as a phrase following the extension
            (``is not UTF-8: ...``).

    ``str(err)`` is one line: ``txt member is not UTF-8: ...``.
    """

    def __init__(self, ext: str, reason: str) -> None:
        super().__init__(ext, reason)
        self.ext = ext
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.ext or '(no extension)'} member {self.reason}"


def decode_field(ext: str, data: bytes | memoryview, decoders: Mapping[str, Decoder] | None = None, *,
                 max_pixels: int | None | DefaultLimit = DEFAULT, as_mask: bool = False) -> Any:
    """Decode one WebDataset member by its extension (table in the module docstring).

    Args:
        ext: the full extension, as :func:`turbofeed.io.table.split_key` gives it
            (``jpg``, ``seg.png``); upper case is lowered.
        data: the member's bytes.
        decoders: user decoders by extension (full or a suffix, lower case); they win
            over the built-in ones and receive ``bytes``.
        max_pixels: the pixel limit for images, checked from the header (None: no
            limit); default :func:`turbofeed.decode.max_pixels` at call time.
        as_mask: for images: single-channel ones (a segmentation mask) come out 2-D with
            their stored values instead of RGB (:func:`decode_mask`).

    Returns:
        See the module docstring: an array, str, object, int or bytes.

    Raises:
        FieldError: the bytes are not what the extension says, or a user decoder raised.
        ImageTooLarge: an image declares more pixels than ``max_pixels``.
    """
    ext = ext.lower()
    if decoders:
        for suffix in _suffixes(ext):
            if suffix in decoders:
                return _run_user(decoders[suffix], suffix, ext, data)
    last = ext.rpartition(".")[2]
    if last in IMAGE_EXTENSIONS:
        try:
            if as_mask:
                return decode_mask(data, max_pixels=max_pixels)
            return decode(cast(bytes, data), max_pixels=max_pixels)  # it reads any byte buffer
        except ImageTooLarge:
            raise
        except ValueError as exc:
            raise FieldError(ext, f"is not a decodable image: {exc}") from exc
    if last == "txt":
        try:
            return bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FieldError(ext, f"is not UTF-8: {exc}") from exc
    if last == "json":
        try:
            return json.loads(bytes(data))
        except UnicodeDecodeError as exc:
            raise FieldError(ext, f"is not UTF-8 JSON: {exc}") from exc
        except ValueError as exc:
            raise FieldError(ext, f"is not valid JSON: {exc}") from exc
        except RecursionError as exc:
            raise FieldError(ext, "is not valid JSON: nested too deeply") from exc
    if last == "cls":
        return _decode_cls(ext, bytes(data))
    if last == "npy":
        return _decode_npy(ext, data)
    return bytes(data)


def decode_mask(data: bytes | memoryview, *, max_pixels: int | None | DefaultLimit = DEFAULT) -> np.ndarray:
    """Decode an image keeping a single channel's stored values (a segmentation mask).

    :func:`turbofeed.decode.decode` gives every image as RGB, so a palette or grey mask
    would lose its class indices to the palette colours. Here a single-channel image
    comes out 2-D (H, W) as stored: ``P`` (palette indices) and ``L`` as uint8, ``1`` as
    uint8 0/1, ``I;16`` uint16, ``I`` int32, ``F`` float32; ``LA`` drops its alpha.
    Anything else (RGB, RGBA, CMYK, ...) is decoded as :func:`~turbofeed.decode.decode`
    does: (H, W, 3) uint8 RGB. Multi-frame images give their first frame.

    Raises:
        ImageTooLarge: more pixels than ``max_pixels`` (checked from the header).
        ValueError: empty, truncated, corrupt or unsupported image, with the reason.
    """
    limit = resolve(max_pixels)
    if not data:
        raise ValueError("empty file (0 bytes)")
    try:
        mask = _read_mask(data, limit)
    except ImageTooLarge:
        raise
    except Exception as exc:  # Pillow raises many types for rubbish input
        raise ValueError(f"not a decodable image ({type(exc).__name__}: {exc})") from None
    return decode(cast(bytes, data), max_pixels=limit) if mask is None else mask


def _read_mask(data: bytes | memoryview, limit: int | None) -> np.ndarray | None:
    """The 2-D array of a single-channel image; None for other modes (left to decode)."""
    with Image.open(io.BytesIO(data)) as im:
        check_pixels(im.height, im.width, limit)
        if im.mode not in _MASK_MODES:
            return None
        if im.format == "JPEG":  # a grey JPEG mask: Pillow would fill a damaged scan with grey
            scan.check(data, max_pixels=limit)
        im.load()
        array = np.asarray(im)
        if im.mode == "LA":
            return np.ascontiguousarray(array[:, :, 0])
    if array.dtype == np.bool_:  # mode 1
        return array.astype(np.uint8)
    if not array.dtype.isnative:  # I;16B
        return array.astype(array.dtype.newbyteorder("="))
    return array


def _suffixes(ext: str) -> list[str]:
    """``a.seg.png`` -> ``["a.seg.png", "seg.png", "png"]``: the most specific first."""
    parts = ext.split(".")
    return [".".join(parts[i:]) for i in range(len(parts))]


def _run_user(decoder: Decoder, matched: str, ext: str, data: bytes | memoryview) -> Any:
    try:
        return decoder(bytes(data))
    except Exception as exc:
        name = getattr(decoder, "__qualname__", None) or repr(decoder)
        raise FieldError(ext, f"failed in user decoder {name} (for {matched!r}): "
                              f"{type(exc).__name__}: {exc}") from exc


def _decode_cls(ext: str, data: bytes) -> int:
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        raise FieldError(ext, f"is not UTF-8: {exc}") from exc
    if not text:
        raise FieldError(ext, "is empty (expected an integer class id)")
    try:
        value = int(text)
    except ValueError:
        raise FieldError(ext, f"is not an integer: {text[:40]!r}") from None
    if not -(1 << 63) <= value < 1 << 63:  # batches hold class ids as int64
        raise FieldError(ext, f"is outside the int64 range: {text[:40]!r}")
    return value


def _decode_npy(ext: str, data: bytes | memoryview) -> np.ndarray:
    """np.load after checking the header: a few bytes declaring a huge shape are refused
    before anything that size is allocated; pickled (object) arrays are refused."""
    if bytes(data[:6]) != _NPY_MAGIC:
        raise FieldError(ext, f"is not a .npy array (starts {bytes(data[:8])!r}, not {_NPY_MAGIC!r})")
    buf = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(buf)
        if version in ((1, 0), (2, 0)):  # 3.0 (UTF-8 field names, rare) goes to np.load unchecked
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, _, dtype = read_header(buf)
            if dtype.hasobject:
                raise FieldError(ext, f"holds Python objects (dtype {dtype}), which need pickle: refused")
            need = math.prod(shape) * dtype.itemsize  # Python ints: no overflow
            have = len(data) - buf.tell()
            if need > have:
                raise FieldError(ext, f"is truncated: its header declares shape {shape} {dtype} "
                                      f"({need} bytes), {have} bytes follow")
            buf.seek(0)
        array = np.load(buf, allow_pickle=False)
    except FieldError:
        raise
    except (ValueError, EOFError, OSError, MemoryError) as exc:
        raise FieldError(ext, f"is not a readable .npy array: {exc}") from exc
    if not isinstance(array, np.ndarray):
        raise FieldError(ext, f"is not a .npy array (np.load gave {type(array).__name__})")
    return array
