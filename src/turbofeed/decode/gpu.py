"""GPU decoding: a batch of encoded JPEGs to CUDA tensors in one call (nvJPEG).

Backends, in order of preference when ``backend="auto"``:

- ``nvimgcodec``: NVIDIA nvImageCodec (``pip install nvidia-nvimgcodec-cu13[nvjpeg]``; CUDA 12:
  ``-cu12``), batched, uses the hardware JPEG engines of A100/H100 where present. One that
  fails to start (e.g. an API this code does not know) is passed over for torchvision.
- ``torchvision``: ``torchvision.io.decode_jpeg(list, device="cuda")``, batched nvJPEG.

Images a backend rejects (unusual sampling, corrupt data) come back as None so the
caller can decode them on the CPU; nothing here raises for one bad image. Some are
known from their header and never sent (:func:`sendable`): data that is not a JPEG or
whose header cannot be read, CMYK and YCCK JPEGs (nvJPEG fails the whole batch on one:
measured on an H100), and images over the pixel limit
(:func:`turbofeed.decode.max_pixels`), refused before the backend allocates for them;
the CPU path then decodes them or names the error. torchvision's batched call gives no
partial results: when it fails anyway, the batch is halved until the bad image is found
(:func:`decode_bisecting`), about 2 log2(N) calls instead of one per image.

A JPEG with damaged entropy-coded data may be decoded here into garbage without a word
(nvJPEG does not report libjpeg's corrupt-data warnings): the loaders check each scan on
the CPU before it gets here (:func:`turbofeed.decode.scan.check`, once per sample); call
it yourself when you use :class:`GpuDecoder` directly.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from typing import Any

from .._deps import simplejpeg
from .limits import exceeds, max_pixels
from .probe import is_jpeg

BACKENDS = ("nvimgcodec", "torchvision")

#: CPU threads an nvImageCodec decoder may use (its default is one per core).
NVIMGCODEC_CPU_THREADS = 4

#: JPEG colour spaces nvJPEG's RGB output does not take (simplejpeg's names).
CPU_ONLY_COLORSPACES = frozenset({"CMYK", "YCCK"})


def sendable(data: bytes | bytearray | memoryview, limit: int | None) -> bool:
    """Whether ``data`` goes to the GPU decoder: a JPEG whose header reads, not CMYK or
    YCCK, and not over ``limit`` pixels (0 or None: no limit). About 1 us per header."""
    if not is_jpeg(data):
        return False
    try:
        height, width, colorspace, _ = simplejpeg.decode_jpeg_header(data)
    except ValueError:
        return False
    return colorspace not in CPU_ONLY_COLORSPACES and not (limit and exceeds(height, width, limit))


def decode_bisecting(decode_many: Callable[[list[Any]], Sequence[Any]], items: list[Any]) -> list[Any | None]:
    """``decode_many(items)``, which fails as a whole when one item is bad; on failure the
    halves are tried again, down to single items (None for each that fails alone)."""
    if not items:
        return []
    try:
        return list(decode_many(items))
    except Exception:
        if len(items) == 1:
            return [None]
        half = len(items) // 2
        return decode_bisecting(decode_many, items[:half]) + decode_bisecting(decode_many, items[half:])


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


def decode_parsed(parse: Callable[[Any], Any], decode_many: Callable[[list[Any]], Sequence[Any]],
                  items: Sequence[Any]) -> list[Any | None]:
    """``parse`` each item on its own (None for one that raises), then
    :func:`decode_bisecting` the parsed ones: one item its backend cannot parse no longer
    fails the whole batch (nvImageCodec fails a whole list of bytes on one it cannot read)."""
    keep: list[int] = []
    parsed: list[Any] = []
    for i, item in enumerate(items):
        try:
            parsed.append(parse(item))
        except Exception:  # the backend's error for data it cannot read: that item is None
            continue
        keep.append(i)
    out: list[Any | None] = [None] * len(items)
    for i, result in zip(keep, decode_bisecting(decode_many, parsed)):
        out[i] = result
    return out


class GpuDecodeUnavailable(RuntimeError):
    """No usable GPU decoder here; the message says why."""


def find_backend(preferred: str = "auto") -> tuple[str | None, str]:
    """(backend name or None, reason) for GPU decoding on this machine. Never raises."""
    try:
        import torch
    except ImportError:
        return None, "PyTorch is not installed"
    if not torch.cuda.is_available():
        return None, "no CUDA GPU visible to PyTorch"
    wanted = BACKENDS if preferred == "auto" else (preferred,)
    missing, broken = [], []
    for name in wanted:
        module = "nvidia.nvimgcodec" if name == "nvimgcodec" else "torchvision.io"
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        except Exception as exc:  # installed, but its package fails to import (built for another torch)
            broken.append(f"{name} is installed but fails to import ({type(exc).__name__}: {exc})")
            continue
        if found:
            return name, f"{name} on {torch.cuda.get_device_name()}"
        missing.append(name)
    why = [f"none of {missing} is installed"] if missing else []
    return None, "; ".join(why + broken) + (" (pip install torchvision built for your torch, or "
                                            "nvidia-nvimgcodec-cu13[nvjpeg]; CUDA 12: -cu12)")


class GpuDecoder:
    """Decode batches of JPEG bytes into (3, H, W) uint8 CUDA tensors.

    Args:
        device: the CUDA device (``"cuda:0"``).
        backend: ``"auto"``, ``"nvimgcodec"`` or ``"torchvision"``.

    Raises:
        GpuDecodeUnavailable: no GPU or no backend, with the reason.
    """

    def __init__(self, device: Any = "cuda", backend: str = "auto") -> None:
        name, reason = find_backend(backend)
        if name is None:
            raise GpuDecodeUnavailable(reason)
        import torch

        self.torch = torch
        self.device = torch.device(device)
        if self.device.index is None:  # one name per GPU: torchvision re-creates (and leaks) its
            self.device = torch.device("cuda", torch.cuda.current_device())  # decoder when it changes
        self.backend = name
        self.description = reason
        self.max_pixels = max_pixels()  # read once, checked per image in decode()
        if name == "nvimgcodec":
            try:
                self._open_nvimgcodec()
            except Exception as exc:  # a release whose API differs: say so, use torchvision
                why = f"nvImageCodec does not start ({type(exc).__name__}: {exc})"
                if backend != "auto" or find_backend("torchvision")[0] is None:
                    raise GpuDecodeUnavailable(why) from exc
                self.backend = "torchvision"
                self.description = f"{find_backend('torchvision')[1]}; {why}"

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
        from torchvision.io import ImageReadMode, decode_jpeg

        return decode_bisecting(lambda part: decode_jpeg(part, mode=ImageReadMode.RGB, device=self.device),
                                list(tensors))

    def _decode(self, datas: Sequence[bytes]) -> list[Any | None]:
        if self.backend == "nvimgcodec":
            return self._decode_nvimgcodec(datas)
        return self._decode_torchvision(datas)

    def _decode_nvimgcodec(self, datas: Sequence[bytes]) -> list[Any | None]:
        torch = self.torch
        # Ordered on the caller's current stream (the loader's side stream), so the decode
        # overlaps the training step instead of synchronising with the default stream.
        stream = torch.cuda.current_stream(self.device).cuda_stream
        # One CodeStream per item, each in its own try: a list of bytes fails as a whole on
        # one item nvImageCodec cannot parse ("Failed to get image info").
        images = decode_parsed(self._nvimgcodec.CodeStream,
                               lambda part: self._decoder.decode(part, params=self._params, cuda_stream=stream),
                               datas)
        out: list[Any | None] = []
        for image in images:
            if image is None:
                out.append(None)
                continue
            hwc = torch.as_tensor(image, device=self.device)  # zero-copy via __cuda_array_interface__
            out.append(hwc.permute(2, 0, 1))
        return out

    def _decode_torchvision(self, datas: Sequence[bytes]) -> list[Any | None]:
        torch = self.torch
        from torchvision.io import ImageReadMode, decode_jpeg

        # Empty data goes nowhere near torch: frombuffer raises on 0 bytes (a ValueError that
        # would escape the bad-sample policy) and nvJPEG would fail the whole batch.
        keep = [i for i, d in enumerate(datas) if len(d)]
        out: list[Any | None] = [None] * len(datas)
        if not keep:
            return out
        encoded = encoded_tensors([datas[i] for i in keep] if len(keep) < len(datas) else datas)
        images = decode_bisecting(lambda part: decode_jpeg(part, mode=ImageReadMode.RGB, device=self.device),
                                  encoded)
        for i, image in zip(keep, images):
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
