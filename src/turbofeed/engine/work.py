"""What a worker does for one sample: fetch -> probe -> window -> decode -> resample -> write."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, overload

import numpy as np

from ..decode import IMAGE_FORMATS, decode, image_format, max_pixels, native, probe
from ..decode.orientation import jpeg_orientation, orientation, stored_box, upright, upright_size
from ..errors import ImageTooLarge, SampleError, StorageError
from ..io import IndexedDataset, pick_member
from ..transforms import Compose, Draws, Window, Windows, resample, write_slot
from ..transforms.draws import epoch_key
from .checked import CHECKED
from .slots import Slot
from .stats import Stats

_LAST = threading.local()  # (sample id, window, image size) this thread chose last


@dataclass
class Decoded:
    """One sample's pixels (HWC) before they go into a slot."""

    pixels: np.ndarray
    flip: bool
    label: int


class SampleWork:
    """Loads samples of ``dataset`` for one epoch; every failure of the data becomes a
    :class:`SampleError` naming shard, key and stage (a :class:`StorageError` from the
    source passes as it is). Thread-safe: holds no per-sample state.

    The random crop and flip of a sample come from ``(seed, epoch, sample id)``, so they
    do not depend on which thread runs it, and a resumed run sees the same pixels. With
    ``orient``, images are turned upright by their EXIF orientation first (the crop window
    is chosen on the upright image; :mod:`turbofeed.decode.orientation`).
    """

    def __init__(self, dataset: IndexedDataset, transform: Compose | None, stats: Stats, *,
                 seed: int, epoch: int, image_exts: tuple[str, ...] | None = None, orient: bool = False) -> None:
        self.dataset = dataset
        self.orient = orient
        self.image_exts = image_exts  # the image field's extensions (first match), or the table's image
        self.transform = transform
        self.stats = stats
        self.seed = seed
        self.epoch = epoch
        self.native = native.available() and transform is not None
        if transform is not None:
            native.log_once_if_off()  # one warning per process: why it is off, how to get it
        # Read once, not per sample (an environment lookup costs ~0.5 us under the GIL).
        self.max_pixels = max_pixels()

    def error(self, gid: int, stage: str, exc: BaseException) -> SampleError:
        shard, key = self.dataset.describe(gid)
        return SampleError(shard, key, stage, str(exc) or type(exc).__name__)

    @overload
    def fetch(self, gid: int, *, view: Literal[False] = ...) -> bytes | np.ndarray: ...
    @overload
    def fetch(self, gid: int, *, view: bool) -> bytes | memoryview | np.ndarray: ...
    def fetch(self, gid: int, *, view: bool = False) -> bytes | memoryview | np.ndarray:
        """The sample's encoded bytes (or pixels); with ``view``, without a copy where the
        source can (a memoryview of a mapped shard: for the native decoder only)."""
        started = time.perf_counter()
        data: bytes | memoryview | np.ndarray | None
        bad = self.dataset.bad  # {gid: why}: bad whatever their bytes (no image, a bad label)
        if gid in bad:
            raise self.error(gid, "fetch", LookupError(bad[gid]))
        try:
            ext = None if self.image_exts is None else self._other_image_member(gid)
            if ext is not None:
                data = self.dataset.read_member(gid, ext)  # the field asks for another member
                if data is None:  # listed a moment ago: the shard changed under us
                    raise LookupError(f"no {ext} member any more")
            else:
                data = self.dataset.view(gid) if view else self.dataset.read(gid)
        except (SampleError, StorageError):  # a storage fault is not bad data: past the policy
            raise
        except Exception as exc:
            raise self.error(gid, "fetch", exc) from exc
        self.stats.add_fetch(time.perf_counter() - started, data.nbytes if isinstance(data, np.ndarray) else len(data))
        return data

    def _other_image_member(self, gid: int) -> str | None:
        """The extension of the member the image field picks (first of ``image_exts``), or
        None when it is the table's own image (read as usual, without a copy)."""
        assert self.image_exts is not None
        source, i = self.dataset.locate(gid)
        if not source.table.has_members:  # folders, arrays: the image is the sample's one member
            return None
        present = source.member_exts(i)
        ext = pick_member(present, self.image_exts)
        if ext is None:
            raise self.error(gid, "fetch", LookupError(
                f"no {';'.join(self.image_exts)} member for field 'image' (the sample has "
                f"{', '.join(present) or 'no members'})"))
        return None if ext == source.table.image_ext(i) else ext

    def load(self, gid: int) -> Decoded:
        """Fetch, decode and resample one sample (no flip applied yet)."""
        data = self.fetch(gid)
        if self.native:
            sample = self._native(gid, data, None, channels_first=False)
            if sample is not None:
                return sample
        return self._decode(gid, data)

    def _native(self, gid: int, data: bytes | memoryview | np.ndarray, out: np.ndarray | None, *,
                channels_first: bool) -> Decoded | None:
        """Decode only the crop window of a JPEG (or take pre-decoded uint8 pixels) and
        resize it in one native call, into ``out`` (a slot: flipped and converted;
        ``pixels`` is then ``out``) or, without ``out``, into a new HWC array (flip left to
        the caller). None when the general path must do it (not a JPEG, CMYK, corrupt,
        truncated, an array of another dtype or layout, another size than ``out``): that
        path then decides, and names any error."""
        transform = self.transform
        if transform is None:  # never here: ``native`` is False without a transform
            return None
        if isinstance(data, np.ndarray):  # pre-decoded pixels: the same resize, no decode
            if data.dtype != np.uint8 or data.ndim not in (2, 3) or not data.flags.c_contiguous:
                return None
            size = data.shape[:2]
        elif IMAGE_FORMATS[image_format(data)].native_crop:
            size = None
        else:
            return None
        kernel: Callable[..., None] = native.resize
        extra: dict[str, bool] = {}
        if size is None:  # a JPEG: its whole scan is checked until it is known intact (engine/checked.py)
            check = not CHECKED.intact(self.dataset, gid)
            kernel, extra = native.crop_resize, {"check_scan": check}
        started = time.perf_counter()
        try:
            height, width = size or native.header(data)[:2]
            tag = jpeg_orientation(data) if self.orient and not isinstance(data, np.ndarray) else 1
            height, width = upright_size(height, width, tag)
            window = self.window(gid, height, width, transform)
            spec = transform.output
            if out is not None and (out.shape[1:] if channels_first else out.shape[:2]) != (window.height,
                                                                                              window.width):
                return None
            if tag != 1:  # the window's part of the stored image, decoded, then turned upright
                stored = np.empty((*upright_size(window.height, window.width, tag), 3), np.uint8)
                kernel(data, stored_box(window.box, height, width, tag), stored, channels_first=False,
                       max_pixels=self.max_pixels, **extra)
                if out is None:
                    out = np.ascontiguousarray(upright(stored, tag))
                else:
                    write_slot(upright(stored, tag), out, flip=window.flip, channels_first=channels_first,
                               output=spec)
            elif out is None:
                out = np.empty((window.height, window.width, 3), np.uint8)
                kernel(data, window.box, out, channels_first=False, max_pixels=self.max_pixels, **extra)
            elif spec is None or out.dtype == np.float32:
                kernel(data, window.box, out, flip=window.flip, channels_first=channels_first,
                       offset=None if spec is None else spec.offset,
                       factor=None if spec is None else spec.factor, max_pixels=self.max_pixels, **extra)
            else:  # float16/float64: through a uint8 scratch, converted by numpy
                pixels = native.scratch(window.height, window.width)
                kernel(data, window.box, pixels, flip=window.flip, channels_first=False,
                       max_pixels=self.max_pixels, **extra)
                write_slot(pixels, out, flip=False, channels_first=channels_first, output=spec)
        except ImageTooLarge as exc:  # a bad sample: the general path would decode it all
            raise self.error(gid, "decode.cpu", exc) from exc
        except (NotImplementedError, ValueError):
            return None
        except Exception as exc:
            raise self.error(gid, "decode.cpu", exc) from exc
        finally:
            self.stats.add_times(decode_cpu=time.perf_counter() - started)
        if extra.get("check_scan"):
            CHECKED.mark(self.dataset, gid)
        return Decoded(out, window.flip, int(self.dataset.labels[gid]))

    def _decode(self, gid: int, data: bytes | np.ndarray) -> Decoded:
        started = time.perf_counter()
        stage = "decode.cpu"
        try:
            transform = self.transform
            window = None
            tag = self.orientation(data)
            if transform is not None:
                info = probe(data)  # the crop window comes from the header, before decoding
                height, width = upright_size(info.height, info.width, tag)
                window = self.window(gid, height, width, transform)
            image = self.decode_upright(data, tag)
            decoded = time.perf_counter()
            stage = "augment"
            flip = False
            if window is not None and transform is not None:  # (a window means a transform)
                if image.shape[:2] != (height, width):  # header lied; trust pixels
                    height, width = image.shape[:2]
                    window = self.window(gid, height, width, transform)
                image, flip = resample(image, window), window.flip
        except SampleError:
            raise
        except Exception as exc:
            raise self.error(gid, stage, exc) from exc
        done = time.perf_counter()
        self.stats.add_times(decode_cpu=decoded - started, augment=done - decoded)
        return Decoded(image, flip, int(self.dataset.labels[gid]))

    def orientation(self, data: bytes | memoryview | np.ndarray) -> int:
        """The EXIF orientation to apply to ``data`` (1: none, or not ``orient``)."""
        return orientation(data) if self.orient else 1

    def decode_upright(self, data: bytes | np.ndarray, tag: int | None = None) -> np.ndarray:
        """Decode ``data`` (:func:`turbofeed.decode.decode`, under the pixel limit) and turn
        it upright by EXIF orientation ``tag`` (default: read from ``data`` when ``orient``).

        Raises:
            ValueError: undecodable or damaged (ImageTooLarge over the pixel limit).
        """
        image = decode(data, max_pixels=self.max_pixels)  # checks the header first
        tag = self.orientation(data) if tag is None else tag
        return image if tag == 1 else np.ascontiguousarray(upright(image, tag))

    def window(self, gid: int, height: int, width: int, transform: Compose) -> Window:
        """The crop window of sample ``gid`` (an image of ``height x width``), from the
        sample's own draws (:meth:`draws`); remembered for this thread, for the fields
        paired with the image (:meth:`last_window`)."""
        window = transform.window(height, width, self.draws(gid))
        _LAST.window = (gid, window, (height, width))
        return window

    def windows(self, gids: np.ndarray, heights: np.ndarray, widths: np.ndarray,
                transform: Compose | None = None) -> Windows:
        """The crop windows of a chunk of samples at once, row ``i`` the window
        :meth:`window` gives sample ``gids[i]``, to the bit: natively without the GIL
        where the transform has a program (:mod:`turbofeed.transforms.program`) and the
        extension is on, else :meth:`Compose.windows` (NumPy).

        Args:
            gids: int64 sample ids ``(n,)``.
            heights, widths: their images' (upright) sizes, ints >= 1, ``(n,)``.
            transform: default this work's transform.

        Raises:
            ValueError: no transform, lengths differ, or a size below 1.
        """
        transform = self.transform if transform is None else transform
        if transform is None:
            raise ValueError("SampleWork.windows: no transform, so no crop windows")
        if transform.program is not None and native.available():
            if not len(gids) == len(heights) == len(widths):
                raise ValueError(f"{len(gids)} sample ids for {len(heights)} heights and {len(widths)} widths")
            return Windows(*native.windows(transform.program, epoch_key(self.seed, self.epoch), gids, heights,
                                           widths))
        return transform.windows(heights, widths, self.seed, self.epoch, gids)

    @staticmethod
    def last_window(gid: int) -> tuple[Window, tuple[int, int]] | None:
        """The window this thread chose last, with the image size it was chosen for, if
        it was for sample ``gid`` (the image field is decoded right before the others)."""
        last = getattr(_LAST, "window", None)
        return (last[1], last[2]) if last is not None and last[0] == gid else None

    def draws(self, gid: int) -> Draws:
        """Sample ``gid``'s random draws: a pure function of (seed, epoch, gid)
        (:mod:`turbofeed.transforms.draws`), whichever thread or chunk asks."""
        return Draws(self.seed, self.epoch, gid)

    def into_slot(self, gid: int, slot: Slot, j: int, *, channels_first: bool) -> None:
        """Load sample ``gid`` straight into ``slot.images[j]``."""
        self.bytes_into_slot(gid, self.fetch(gid, view=self.native), slot, j, channels_first=channels_first)

    def bytes_into_slot(self, gid: int, data: bytes | memoryview | np.ndarray, slot: Slot, j: int, *,
                        channels_first: bool) -> None:
        """Sample ``gid``, whose encoded bytes (or pixels) ``data`` were read elsewhere (a
        Ray read task: :mod:`turbofeed.ray`), into ``slot.images[j]`` and its label into
        ``slot.labels[j]``: the pixels :meth:`into_slot` gives it.

        Raises:
            SampleError: undecodable, damaged or of another size than the slot's.
        """
        if self.native:
            sample = self._native(gid, data, slot.images[j], channels_first=channels_first)
            if sample is not None:
                slot.labels[j] = sample.label
                return
        sample = self._decode(gid, bytes(data) if isinstance(data, memoryview) else data)
        started = time.perf_counter()
        try:
            out = slot.images[j]
            expected = out.shape[1:] if channels_first else out.shape[:2]
            if sample.pixels.shape[:2] != tuple(expected):
                raise ValueError(f"image is {sample.pixels.shape[:2]} but the batch holds "
                                 f"{tuple(expected)}; add a crop or a fixed Resize((h, w))")
            write_slot(sample.pixels, out, flip=sample.flip, channels_first=channels_first,
                       output=self.transform.output if self.transform else None)
            slot.labels[j] = sample.label
        except Exception as exc:
            raise self.error(gid, "collate", exc) from exc
        self.stats.add_times(collate=time.perf_counter() - started)
