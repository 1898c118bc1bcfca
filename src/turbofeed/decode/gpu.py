"""GPU decoding: a batch of encoded JPEGs to CUDA tensors in one call (nvJPEG).

Backends, in order of preference when ``backend="auto"``:

- ``nvimgcodec``: NVIDIA nvImageCodec (``pip install nvidia-nvimgcodec-cu13[nvjpeg]``; CUDA 12:
  ``-cu12``), batched, uses the hardware JPEG engines of A100/H100 where present.
- ``torchvision``: ``torchvision.io.decode_jpeg(list, device="cuda")``, batched nvJPEG.

The one used is the first that decodes a test JPEG right on the device
(:func:`find_backend`): one that is installed but fails to start, to decode, or decodes
on the host or wrong is passed over, and the decoder's ``description`` says why.

Images a backend rejects (unusual sampling, corrupt data) come back as None so the
caller can decode them on the CPU; nothing here raises for one bad image. Some are
known from their header and never sent (:func:`sendable`): data that is not a JPEG or
whose header cannot be read, CMYK and YCCK JPEGs (nvJPEG fails the whole batch on one:
measured on an H100), and images over the pixel limit
(:func:`turbofeed.decode.max_pixels`), refused before the backend allocates for them;
the CPU path then decodes them or names the error. torchvision's batched call gives no
partial results: when it fails anyway, the batch is halved until the bad image is found
(:func:`decode_bisecting`), about 2 log2(N) calls instead of one per image. Every
exception met on the way is counted in the decoder's ``failures`` by kind and logged
once per kind with its text (:class:`~turbofeed.decode.gpu_failures.DecoderFailures`).

A JPEG with damaged entropy-coded data may be decoded here into garbage without a word
(nvJPEG does not report libjpeg's corrupt-data warnings): the loaders check each scan on
the CPU before it gets here (:func:`turbofeed.decode.scan.check`, once per sample); call
it yourself when you use :class:`GpuDecoder` directly.
"""

from __future__ import annotations

import functools
import importlib.util
import threading
from collections.abc import Callable, Sequence
from typing import Any

from .._deps import simplejpeg
from .gpu_backend import NOT_INSTALLED, choose_backend, first_line, trial_jpeg, trial_verdict
from .gpu_failures import DecoderFailures, decode_bisecting, decode_parsed
from .limits import exceeds, max_pixels
from .formats import format_of

BACKENDS = ("nvimgcodec", "torchvision")

#: CPU threads an nvImageCodec decoder may use (its default is one per core).
NVIMGCODEC_CPU_THREADS = 4

#: JPEG colour spaces nvJPEG's RGB output does not take (simplejpeg's names).
CPU_ONLY_COLORSPACES = frozenset({"CMYK", "YCCK"})


def sendable(data: bytes | bytearray | memoryview, limit: int | None) -> bool:
    """Whether ``data`` goes to the GPU decoder: a JPEG whose header reads, not CMYK or
    YCCK, and not over ``limit`` pixels (0 or None: no limit). About 1 us per header."""
    if not format_of(data).gpu:
        return False
    try:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError:
        return False
    return colorspace not in CPU_ONLY_COLORSPACES and not (limit and exceeds(height, width, limit))


def encoded_tensors(datas: Sequence[bytes | bytearray | memoryview]) -> list[Any]:
    """The 1-D uint8 CPU tensors ``torchvision.io.decode_jpeg`` takes, one per item (none
    empty): views of one buffer that holds the whole batch.

    One join (CPython copies 1 MiB or more of ``bytes`` without holding the GIL) and two
    torch calls per batch, where a tensor per image (``torch.frombuffer(bytearray(d))``)
    took a copy under the GIL and two calls per image: in the loader this runs in the
    caller's thread, which competes for the GIL with the feeding threads. Each view is
    contiguous and starts at its image's first byte, which is all nvJPEG reads."""
    import torch

    return list(torch.frombuffer(bytearray().join(datas), dtype=torch.uint8).split([len(d) for d in datas]))


class GpuDecodeUnavailable(RuntimeError):
    """No usable GPU decoder here; the message says why."""


def find_backend(preferred: str = "auto", device: Any = "cuda",
                 trial: Callable[[str], str | None] | None = None) -> tuple[str | None, str]:
    """(backend name or None, reason) for GPU decoding on ``device``. Never raises.

    The backend is the first of ``preferred`` (``"auto"``: nvImageCodec, then torchvision)
    that decodes a tiny JPEG right on the device (:mod:`turbofeed.decode.gpu_backend`):
    installed is not enough. Each backend is tried once per device and process.
    ``trial(name)`` (None: the real one, :func:`trial_decode`) says why a backend does not
    decode, or None when it does."""
    try:
        import torch
    except ImportError:
        return None, "PyTorch is not installed"
    if not torch.cuda.is_available():
        return None, "no CUDA GPU visible to PyTorch"
    wanted = BACKENDS if preferred == "auto" else (preferred,)
    if trial is None:
        trial = functools.partial(_tried, device)
    name, passed_over = choose_backend(wanted, trial)
    if name is not None:
        return name, "; ".join([f"{name} on {torch.cuda.get_device_name(indexed(device))}", *passed_over])
    return None, ("no GPU decoder decodes here: " + "; ".join(passed_over)
                  + " (pip install torchvision built for your torch, or nvidia-nvimgcodec-cu13[nvjpeg]; CUDA 12: -cu12)")


def indexed(device: Any) -> Any:
    """``device`` as a ``torch.device`` with its index (``"cuda"``: the current one):
    torchvision re-creates (and leaks) its process-wide decoder whenever the device it
    is given changes, so each GPU has one name."""
    import torch

    where = torch.device(device)
    if where.type == "cuda" and where.index is None:
        where = torch.device("cuda", torch.cuda.current_device())
    return where


_TRIED: dict[tuple[str, str], str | None] = {}
_TRIED_LOCK = threading.Lock()


def _tried(device: Any, name: str) -> str | None:
    """:func:`trial_decode`, once per backend and device in this process."""
    key = (name, str(device))
    with _TRIED_LOCK:
        if key not in _TRIED:
            _TRIED[key] = trial_decode(name, device)
        return _TRIED[key]


def trial_decode(name: str, device: Any) -> str | None:
    """Why backend ``name`` does not decode :func:`~turbofeed.decode.gpu_backend.trial_jpeg`
    right on ``device``, or None when it does. Needs a GPU."""
    module = "nvidia.nvimgcodec" if name == "nvimgcodec" else "torchvision.io"
    try:
        if importlib.util.find_spec(module) is None:
            return NOT_INSTALLED
    except ModuleNotFoundError:
        return NOT_INSTALLED
    except Exception as exc:  # installed, but its package fails to import (built for another torch)
        return f"installed but fails to import ({type(exc).__name__}: {exc})"
    try:
        decoder = GpuDecoder.started(name, device)  # the device named first: CUDA may fail to start
        image = decoder.decode_one(trial_jpeg())
    except Exception as exc:
        return f"fails to decode a test JPEG on {device} ({type(exc).__name__}: {first_line(exc)})"
    return trial_verdict(image, decoder.device)


class GpuDecoder:
    """Decode batches of JPEG bytes into (3, H, W) uint8 CUDA tensors.

    Args:
        device: the CUDA device (``"cuda:0"``).
        backend: ``"auto"``, ``"nvimgcodec"`` or ``"torchvision"``: the first of them that
            decodes a test JPEG right on ``device`` (:func:`find_backend`).

    Attributes:
        backend, description: the backend in use, and which GPU and why others were passed over.
        failures: what the backend's calls raised, by kind (:class:`DecoderFailures`).

    Raises:
        GpuDecodeUnavailable: no GPU or no backend that decodes, with the reason.
    """

    def __init__(self, device: Any = "cuda", backend: str = "auto") -> None:
        name, reason = find_backend(backend, device)
        if name is None:
            raise GpuDecodeUnavailable(reason)
        self._start(name, device)
        self.description = reason

    @classmethod
    def started(cls, name: str, device: Any) -> GpuDecoder:
        """A decoder of backend ``name`` on ``device`` without the trial decode (the trial uses it)."""
        decoder = cls.__new__(cls)
        decoder._start(name, device)
        decoder.description = name
        return decoder

    def _start(self, name: str, device: Any) -> None:
        import torch

        self.torch = torch
        self.device = indexed(device)
        self.backend = name
        self.failures = DecoderFailures()
        self.max_pixels = max_pixels()  # read once, checked per image in decode()
        if name == "nvimgcodec":
            self._open_nvimgcodec()

    def _open_nvimgcodec(self) -> None:
        import nvidia.nvimgcodec as nvimgcodec

        self._nvimgcodec = nvimgcodec
        index = self.device.index  # always set (__init__)
        # nvImageCodec turns chroma "fancy" upsampling off by default; libjpeg-turbo (the
        # CPU path) has it on, and matching it keeps GPU and CPU pixels close.
        # Its CPU threads (Huffman decoding of what the hardware engine does not take): its
        # default, 0, starts one per core, on top of the loader's own feeding threads.
        try:
            self._decoder = nvimgcodec.Decoder(device_id=index, max_num_cpu_threads=NVIMGCODEC_CPU_THREADS,
                                               options=":fancy_upsampling=1")
        except TypeError:  # releases without decoder options
            self._decoder = nvimgcodec.Decoder(device_id=index, max_num_cpu_threads=NVIMGCODEC_CPU_THREADS)
        # RGB was renamed SRGB in nvImageCodec 0.7 (0.9 has only SRGB).
        spec = nvimgcodec.ColorSpec.SRGB if hasattr(nvimgcodec.ColorSpec, "SRGB") else nvimgcodec.ColorSpec.RGB
        self._params = nvimgcodec.DecodeParams(color_spec=spec, apply_exif_orientation=False)

    def decode(self, datas: Sequence[bytes]) -> list[Any | None]:
        """One batched decode; returns a (3, H, W) uint8 tensor per input, None where rejected
        or not sent (:func:`sendable`: not a JPEG, CMYK/YCCK, over ``max_pixels`` pixels)."""
        if not datas:
            return []
        keep = [i for i, data in enumerate(datas) if sendable(data, self.max_pixels)]
        if len(keep) == len(datas):
            return self._decode(datas)
        out: list[Any | None] = [None] * len(datas)
        for i, image in zip(keep, self._decode([datas[i] for i in keep]) if keep else []):
            out[i] = image
        return out

    def decode_tensors(self, tensors: Sequence[Any]) -> list[Any | None]:
        """:meth:`decode` for JPEGs given as 1-D uint8 CPU tensors whose headers were read
        already: the loaders' per-chunk path reads each header natively and sends only
        JPEGs it decodes (not CMYK/YCCK, under the pixel limit, not empty), so nothing is
        parsed or copied again here; one decoder call for the batch."""
        if not tensors:
            return []
        if self.backend == "nvimgcodec":
            return self._decode_nvimgcodec([t.numpy() for t in tensors])
        return decode_bisecting(self._torchvision_call, list(tensors), self.failures)

    def decode_one(self, data: bytes) -> Any:
        """One JPEG through the backend's batched call, raising what the backend raises
        (nothing split, nothing recorded): :func:`trial_decode`'s decode."""
        if self.backend == "nvimgcodec":
            image = self._nvimgcodec_call([self._nvimgcodec.CodeStream(data)])[0]
            kind = str(getattr(image, "buffer_kind", ""))
            if "HOST" in kind.upper():  # an nvImageCodec without nvJPEG decodes on the CPU
                raise RuntimeError(f"nvImageCodec decoded on the host ({kind}), not on the GPU")
            return self._nvimgcodec_tensor(image)
        return self._torchvision_call(encoded_tensors([data]))[0]

    def _torchvision_call(self, part: list[Any]) -> list[Any]:
        from torchvision.io import ImageReadMode, decode_jpeg

        return decode_jpeg(part, mode=ImageReadMode.RGB, device=self.device)

    def _nvimgcodec_call(self, part: list[Any]) -> list[Any]:
        # Ordered on the caller's current stream (the loader's side stream), so the decode
        # overlaps the training step instead of synchronising with the default stream.
        stream = self.torch.cuda.current_stream(self.device).cuda_stream
        return self._decoder.decode(part, params=self._params, cuda_stream=stream)

    def _nvimgcodec_tensor(self, image: Any) -> Any:
        hwc = self.torch.as_tensor(image, device=self.device)  # zero-copy via __cuda_array_interface__
        return hwc.permute(2, 0, 1)

    def _decode(self, datas: Sequence[bytes]) -> list[Any | None]:
        if self.backend == "nvimgcodec":
            return self._decode_nvimgcodec(datas)
        return self._decode_torchvision(datas)

    def _decode_nvimgcodec(self, datas: Sequence[Any]) -> list[Any | None]:
        # One CodeStream per item, each in its own try: a list of bytes fails as a whole on
        # one item nvImageCodec cannot parse ("Failed to get image info").
        images = decode_parsed(self._nvimgcodec.CodeStream, self._nvimgcodec_call, datas, self.failures)
        return [None if image is None else self._nvimgcodec_tensor(image) for image in images]

    def _decode_torchvision(self, datas: Sequence[bytes]) -> list[Any | None]:
        # Empty data goes nowhere near torch: frombuffer raises on 0 bytes (a ValueError that
        # would escape the bad-sample policy) and nvJPEG would fail the whole batch.
        keep = [i for i, d in enumerate(datas) if len(d)]
        out: list[Any | None] = [None] * len(datas)
        if not keep:
            return out
        encoded = encoded_tensors([datas[i] for i in keep] if len(keep) < len(datas) else datas)
        for i, image in zip(keep, decode_bisecting(self._torchvision_call, encoded, self.failures)):
            out[i] = image
        return out


def open_decoder(gpu_decode: Any, device: Any = "cuda") -> tuple[Any | None, str]:
    """The batch decoder a ``gpu_decode=`` argument asks for, or ``(None, why not)``.

    ``True`` builds a :class:`GpuDecoder` on ``device``; an object with ``device`` and
    ``decode(datas)`` (your own decoder, or a test stand-in) is used as it is. No GPU or
    no backend is not an error here: the reason comes back for the caller's one warning.

    Raises:
        TypeError: ``gpu_decode`` is neither ``True`` nor a decoder.
    """
    if gpu_decode is True:
        try:
            return GpuDecoder(device), ""
        except GpuDecodeUnavailable as exc:
            return None, str(exc)
    if not (callable(getattr(gpu_decode, "decode", None)) and hasattr(gpu_decode, "device")):
        raise TypeError(f"gpu_decode must be True, False or a decoder with .device and .decode(datas), "
                        f"got {gpu_decode!r}")
    return gpu_decode, ""
