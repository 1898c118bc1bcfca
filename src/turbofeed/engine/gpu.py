"""Building blocks of GPU decoding shared by the DataLoader and the Pipeline.

Worker threads call :func:`header_window` (bytes in hand, crop window from the header);
the caller's thread calls :func:`decode_job` (one decoder call for a whole batch, CPU
fallback per rejected image through the bad-sample policy) and :func:`resize_batch`
(crop, resize, flip and normalise in one batched op on the decoder's device).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from typing import Any, overload

import numpy as np
import torch

from ..decode import check_pixels, format_of, native, probe, scan
from ..decode.orientation import upright_size
from ..decode.cpu import as_rgb
from .checked import CHECKED
from .policy import ErrorPolicy, PassPolicy
from .stream import Job, fill_position
from .work import SampleWork
from ..plan import EpochPlan
from ..transforms import Compose, Window
from ..transforms.batched import default_budget, float_bytes, groups_within, reaches, resample_table, to_device
from ..transforms.output import OutputSpec


_STREAMS: dict[tuple[torch.device, str], Any] = {}
_STREAMS_LOCK = threading.Lock()


def side_stream(device: torch.device, role: str = "side") -> Any:
    """The process's one stream of ``role`` on CUDA ``device`` for loader work: ``"side"``
    (resize, host-to-device copies), ``"decode"`` (the decoder's outputs: :func:`decode_stream`);
    ``device`` names its index.

    PyTorch's caching allocator keeps a freed block for the stream it was allocated on. A
    new stream per pass left each epoch's cached blocks unusable to the next: on an H100,
    2 GiB more reserved and 32 MiB more allocated after every epoch of the GPU loader. One
    stream per device and role, for the life of the process, reuses them.
    """
    with _STREAMS_LOCK:
        stream = _STREAMS.get((device, role))
        if stream is None:
            stream = _STREAMS[device, role] = torch.cuda.Stream(device)
        return stream


def decode_stream(device: torch.device) -> Any:
    """The stream the GPU decoder's outputs are made on, apart from the side stream.

    torchvision allocates its outputs on the caller's current stream but writes them on
    a stream of its own without waiting for the caller's (gpu-review S7; nvJPEG's batched
    decode on an H100 raced the same way, torchvision PR #9606): a block freed while
    work queued on the current stream still uses it can be written under that work. So
    the decoder runs on a stream of its own that holds nothing else but the joining of
    its outputs, synchronised before each decode (:meth:`GpuDecode.decode_ahead`); the
    side stream waits for it by event and keeps what it reads from it by
    ``record_stream``, so the resize of one batch runs while the next one decodes."""
    return side_stream(device, "decode")


def stream_mark(device: torch.device) -> Any:
    """An event recorded on ``device``'s current stream, marking the end of the work queued
    there so far (None off CUDA: nothing is queued)."""
    if device.type != "cuda":
        return None
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(device))
    return event


def pixels_tensor(pixels: np.ndarray, device: torch.device) -> torch.Tensor:
    """An HWC uint8 image (or a pre-decoded array sample) as the (3, H, W) tensor a decoder returns."""
    return torch.from_numpy(np.ascontiguousarray(as_rgb(pixels).transpose(2, 0, 1))).to(device)


def header_window(work: SampleWork, gid: int, data: bytes | np.ndarray, transform: Compose, tag: int = 1) -> Window:
    """Worker side: the crop window of sample ``gid`` from its header, with the sample's draws,
    on the image turned upright by EXIF orientation ``tag`` (:meth:`SampleWork.orientation`).

    A JPEG's entropy-coded data is checked here the first time the sample is seen (and
    remembered intact, :mod:`turbofeed.engine.checked`): the GPU decoders may decode a
    damaged scan without a word, so the verdict is the CPU paths' one.

    Raises:
        SampleError: no readable header, more pixels than ``work.max_pixels``, or a
            damaged JPEG (stage ``decode.gpu``): checked here, before any decoder
            allocates for the image.
    """
    try:
        size = jpeg_size(data)
        if size is None:  # not a JPEG the native reader takes: Pillow's formats, arrays
            info = probe(data)
            size, jpeg = (info.height, info.width), info.format == "jpeg"
        else:
            jpeg = True
        check_pixels(*size, work.max_pixels)
        if jpeg and not isinstance(data, np.ndarray):
            check_once(work, gid, data)
        return work.window(gid, *upright_size(*size, tag), transform)
    except Exception as exc:
        raise work.error(gid, "decode.gpu", exc) from exc


def jpeg_size(data: bytes | np.ndarray) -> tuple[int, int] | None:
    """``(height, width)`` of JPEG bytes from the native header reader (about 2 us against
    5 for :func:`~turbofeed.decode.probe`, per sample under the GIL; the CPU path's native
    decode reads the same header), or None: not bytes, not a JPEG it reads, or the
    extension off (:func:`turbofeed.decode.native.available`)."""
    if type(data) is not bytes or not native.available():
        return None
    try:
        height, width, _ = native.header(data)
    except ValueError:
        return None
    return height, width


def refuse_damage(work: SampleWork, gid: int, data: bytes | np.ndarray) -> None:
    """Worker side, without a transform: :func:`check_once` for a JPEG.

    Raises:
        SampleError: a damaged JPEG (stage ``decode.gpu``).
    """
    if isinstance(data, np.ndarray) or not format_of(data).scan_check:
        return
    try:
        check_once(work, gid, data)
    except Exception as exc:
        raise work.error(gid, "decode.gpu", exc) from exc


def check_once(work: SampleWork, gid: int, data: bytes | memoryview) -> None:
    """Check the scan of JPEG sample ``gid`` unless it was found intact before.

    Raises:
        ValueError: damaged (:func:`turbofeed.decode.scan.check`).
    """
    if not CHECKED.intact(work.dataset, gid):
        scan.check(data, max_pixels=work.max_pixels)
        CHECKED.mark(work.dataset, gid)


@overload
def cpu_decode(work: SampleWork, gid: int, transform: Compose,
               device: torch.device) -> tuple[bytes | np.ndarray, Window, torch.Tensor]: ...
@overload
def cpu_decode(work: SampleWork, gid: int, transform: Compose | None,
               device: torch.device) -> tuple[bytes | np.ndarray, Window | None, torch.Tensor]: ...
def cpu_decode(work: SampleWork, gid: int, transform: Compose | None,
               device: torch.device) -> tuple[bytes | np.ndarray, Window | None, torch.Tensor]:
    """Fetch and decode sample ``gid`` on the CPU (the fallback for an image the GPU refused).

    Returns:
        (data, window chosen from the decoded (upright) size or None without ``transform``,
        (3, H, W) uint8 tensor on ``device``).

    Raises:
        SampleError: unreadable (stage ``fetch``) or undecodable (stage ``decode.cpu``).
    """
    data = work.fetch(gid)
    try:
        pixels = work.decode_upright(data)  # upright when the loader applies EXIF orientation
        height, width = pixels.shape[:2]
        window = None if transform is None else work.window(gid, height, width, transform)
    except Exception as exc:
        raise work.error(gid, "decode.cpu", exc) from exc
    return data, window, pixels_tensor(pixels, device)


def decode_batch(decoder: Any, datas: Sequence[bytes | np.ndarray]) -> list[torch.Tensor | None]:
    """One ``decoder.decode`` call for the encoded items; pre-decoded arrays (HDF5, Zarr,
    .npy sources) skip the decoder and are copied to its device as they are. No call when
    nothing is encoded."""
    encoded = [d for d in datas if not isinstance(d, np.ndarray)]
    if len(encoded) == len(datas):  # the usual batch: no arrays among the items
        return list(decoder.decode(encoded)) if encoded else []
    device = torch.device(decoder.device)
    results = iter(decoder.decode(encoded) if encoded else [])
    return [pixels_tensor(d, device) if isinstance(d, np.ndarray) else next(results) for d in datas]


def decode_job(decoder: Any, job: Job, plan: EpochPlan, policy: ErrorPolicy | PassPolicy,
               refill: Callable[[int, int], None], entries: list | None = None,
               positions: Sequence[int] | None = None) -> list[int]:
    """Decode the finished ``job`` on the decoder in one call, CPU fallback per image.

    Each ``entries[i]`` (default ``job.slot``) is an entry with ``data`` (bytes or an
    array) and ``pixels`` (set here to its (3, H, W) tensor); only ``positions`` (default:
    all) are decoded. An image the decoder refuses (None) is counted in
    ``stats.errors["gpu_fallback"]`` and ``refill(gid, i)`` decodes it on the CPU into a
    new entry at ``entries[i]`` (pixels set); when that raises :class:`SampleError`,
    the policy replaces, skips (``job.ok[i] = False``) or raises, as on the CPU path.

    Returns:
        The indices of the batch that hold a decoded sample, in order.
    """
    entries = job.slot if entries is None else entries
    ok = job.ok.tolist()  # one conversion, not a NumPy scalar per position
    keep = [i for i in (range(len(job)) if positions is None else positions) if ok[i]]
    decoded = decode_batch(decoder, [entries[i].data for i in keep])
    refused = False
    for i, pixels in zip(keep, decoded):
        entries[i].pixels = pixels
        if pixels is None:  # the decoder refused it: the CPU decodes it, or the policy acts
            refused = True
            fall_back(job, i, plan, policy, refill)
    return [i for i in keep if job.ok[i]] if refused else keep


def fall_back(job: Job, i: int, plan: EpochPlan, policy: ErrorPolicy | PassPolicy,
              refill: Callable[[int, int], None]) -> bool:
    """Position ``i`` of ``job``, which the GPU decoder refused: counted in
    ``stats.errors["gpu_fallback"]``, then ``refill(gid, i)`` decodes it on the CPU, or the
    bad-sample policy replaces, skips (``job.ok[i] = False``) or raises, as on the CPU
    path. Returns whether the position holds a sample."""
    policy.stats.count_error("gpu_fallback")
    gid = fill_position(plan, job.positions[i], lambda g: refill(g, i), policy)
    if gid is None:
        job.ok[i] = False
        return False
    job.ids[i] = gid
    return True


def resize_batch(pixels: Sequence[torch.Tensor], windows: Sequence[Window], size: tuple[int, int],
                 output: OutputSpec | None, channels_last: bool = False,
                 budget: int | None = None) -> torch.Tensor:
    """Crop each (3, h, w) image to its window, resize to ``size``, flip, normalise: one
    batched op on the images' device; (N, 3, *size), uint8 or ``output.dtype``.

    Device memory stays bounded: each image is first cut to the pixels its window reads,
    and the batch runs in as many batched calls as keep the padded float work within
    ``budget`` bytes (:func:`turbofeed.transforms.batched.groups_within`).

    The same pixels as cutting each image with
    :func:`~turbofeed.transforms.batched.crop_to_reach` and padding the cuts with
    :func:`~turbofeed.transforms.batched.pad_batch`, but the arithmetic of the cuts, the
    shifted boxes and the tables is done for the whole batch in NumPy: per image there is
    only the copy of its cut into the padded batch. :func:`resize_packed` does without
    that copy too, where the images' sizes and windows come as arrays."""
    n = len(pixels)
    table = np.array([(*w.box, w.height, w.width, w.flip) for w in windows], dtype=np.float64).reshape(n, 7)
    sizes = np.array([p.shape for p in pixels], dtype=np.int64).reshape(n, 3)[:, 1:]
    cuts, shapes, rows, runs = cut_table(table, sizes, size, budget)
    bounds = cuts.tolist()
    parts = []
    for run in runs:
        height, width = (int(v) for v in shapes[run.start:run.stop].max(0))
        batch = pixels[run.start].new_zeros((len(run), 3, height, width))
        for k, i in enumerate(run):
            top, left, bottom, right = bounds[i]
            batch[k, :, :max(bottom - top, 0), :max(right - left, 0)] = pixels[i][:, top:bottom, left:right]
        parts.append(resample_table(batch, torch.from_numpy(rows[run.start:run.stop]), size, output,
                                    channels_last))
    return joined(parts, channels_last)


def resize_packed(pixels: Sequence[torch.Tensor], sizes: np.ndarray, table: np.ndarray, size: tuple[int, int],
                  output: OutputSpec | None, channels_last: bool = False,
                  budget: int | None = None) -> torch.Tensor:
    """:func:`resize_batch`'s pixels, to the bit, with a fixed number of Python and torch
    calls per batch whatever its length (the caller's thread holds the GIL for each).

    The images are joined into one flat buffer on their device in one call (C++, without
    the GIL); each image's cut then is a run of rows of that buffer, so the padded batch
    of cuts is one index op on a view of the buffer as overlapping rows
    (``unfold``): row ``y`` of channel ``c`` of image ``n``'s cut starts at
    ``offset[n] + c*h*w + (top + y)*w + left``. Past a cut's height and width the padded
    batch holds other pixels, not zeros: the resampling weights there are 0
    (:func:`~turbofeed.transforms.batched.axis_weights`), so the result is the same.

    Args:
        pixels: (3, h, w) uint8 images on one device (any strides), at least one.
        sizes: int64 (N, 2), each image's ``(h, w)`` as its header gave it; the images'
            own shapes are used where they disagree.
        table: float64 (N, 7) windows: ``x0, y0, x1, y1`` (the box), output ``height,
            width``, flip (1.0 mirrors).
        size, output, channels_last, budget: as :func:`resize_batch`.
    """
    return resize_joined(*join_images(pixels, sizes), table, size, output, channels_last, budget)


def join_images(pixels: Sequence[torch.Tensor], sizes: np.ndarray) -> tuple[torch.Tensor, np.ndarray]:
    """The first half of :func:`resize_packed`: the images joined in one flat tensor on
    their device (:func:`flatten`, with as many zeros after them as the widest image is
    wide: the last image's cut rows read up to that far past its end) and their sizes
    (``sizes``, or the images' own shapes where a decoder's differ)."""
    n = len(pixels)
    tail = max(int(sizes[:, 1].max()), 1)
    flat = flatten(pixels, tail)
    if flat.numel() != 3 * int((sizes[:, 0] * sizes[:, 1]).sum()) + tail:
        dims = itertools.chain.from_iterable(p.shape for p in pixels)
        sizes = np.fromiter(dims, np.int64, 3 * n).reshape(n, 3)[:, 1:]
        if int(sizes[:, 1].max()) > tail:
            flat = flatten(pixels, int(sizes[:, 1].max()))
    return flat, sizes


def resize_joined(flat: torch.Tensor, sizes: np.ndarray, table: np.ndarray, size: tuple[int, int],
                  output: OutputSpec | None, channels_last: bool = False,
                  budget: int | None = None) -> torch.Tensor:
    """The second half of :func:`resize_packed`: from :func:`join_images`' ``(flat,
    sizes)``, each image's cut gathered and the batch resized."""
    n = len(sizes)
    cuts, shapes, rows, runs = cut_table(table, sizes, size, budget)
    areas = sizes[:, 0] * sizes[:, 1]
    # per image: where it starts, h*w, w, the cut's top and left, its last row (the rows
    # past it repeat it: any pixels do, their weights are 0)
    params = np.empty((n, 6), np.int64)
    params[0, 0] = 0
    np.cumsum(3 * areas[:-1], out=params[1:, 0])
    params[:, 1], params[:, 2] = areas, sizes[:, 1]
    params[:, 3:5] = np.minimum(cuts[:, :2], sizes - 1)  # an empty cut may start past its image: any row will do
    params[:, 5] = np.maximum(shapes[:, 0] - 1, 0)
    device = flat.device
    every = to_device(torch.from_numpy(params), device)
    channels = torch.arange(3, device=device)[None, :, None]
    parts = []
    for run in runs:
        height, width = (int(v) for v in shapes[run.start:run.stop].max(0))
        if not (height and width):  # nothing any window of this run reads
            batch = flat.new_zeros((len(run), 3, height, width))
        else:
            p = every[run.start:run.stop, :, None, None]
            lines = torch.minimum(torch.arange(height, device=device)[None, None, :], p[:, 5])  # (k, 1, height)
            starts = p[:, 0] + channels * p[:, 1] + (p[:, 3] + lines) * p[:, 2] + p[:, 4]  # (k, 3, height)
            batch = flat.unfold(0, width, 1)[starts]  # (k, 3, height, width)
        parts.append(resample_table(batch, torch.from_numpy(rows[run.start:run.stop]), size, output,
                                    channels_last))
    return joined(parts, channels_last)


def flatten(pixels: Sequence[torch.Tensor], tail: int) -> torch.Tensor:
    """The images' pixels, each in (3, h, w) order, one after the other in one new flat
    tensor on their device, with ``tail`` zeros after them: one call
    (``torch._utils._flatten_dense_tensors``, what DDP uses to join gradients; its loop is
    C++, without the GIL), or one ``view`` per image where a torch lacks it."""
    parts = [*pixels, pixels[0].new_zeros(tail)]
    join = getattr(torch._utils, "_flatten_dense_tensors", None)
    if join is not None:
        return join(parts)
    return torch.cat([p.contiguous().view(-1) for p in parts])


def cut_table(table: np.ndarray, sizes: np.ndarray, size: tuple[int, int],
              budget: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[range]]:
    """For windows ``table`` (N, 7: box, output height and width, flip) on images of
    ``sizes`` (N, 2): each cut ``(top, left, bottom, right)``, its shape ``(h, w)``, the
    float32 resampling table in the cut's coordinates
    (:func:`~turbofeed.transforms.batched.resample_table`: h, w, the shifted box, flip,
    the flip column left out where nothing flips) and the runs of images that keep the
    padded float work within ``budget`` bytes (default
    :func:`~turbofeed.transforms.batched.default_budget`)."""
    n = len(table)
    cuts = reaches(table[:, :4], table[:, 4:6], sizes)  # (top, left, bottom, right)
    shapes = np.maximum(cuts[:, 2:] - cuts[:, :2], 0)  # as slicing gives
    rows = np.empty((n, 7), np.float32)
    rows[:, 0:2] = shapes
    rows[:, 2:6] = table[:, :4] - cuts[:, [1, 0, 1, 0]]
    rows[:, 6] = table[:, 6]
    if not rows[:, 6].any():  # no flip in the batch: two ops fewer
        rows = rows[:, :6]
    budget = default_budget() if budget is None else budget
    if n and float_bytes(n, int(shapes[:, 0].max()), int(shapes[:, 1].max()), size) <= budget:
        runs = [range(n)]  # the usual case: every prefix fits too, so groups_within would agree
    else:
        runs = groups_within(shapes, size, budget)
    return cuts, shapes, rows, runs


def joined(parts: list[torch.Tensor], channels_last: bool) -> torch.Tensor:
    """The runs' resized parts as one batch."""
    if len(parts) == 1:
        return parts[0]
    out = torch.cat(parts)
    return out.contiguous(memory_format=torch.channels_last) if channels_last else out
