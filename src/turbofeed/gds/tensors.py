"""Tensor files read through the client: ``.npy`` (header + raw bytes into the target),
``.pt``/``.pth`` (``torch.load``) and ``.safetensors`` (the ``safetensors`` package).

A ``.npy`` payload is read straight into a tensor allocated on the target device, so on
a GPU with GDS the bytes go from the drive to GPU memory without a host copy. The other
formats are parsed from host bytes and then moved.
"""

from __future__ import annotations

import ast
import io
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

_MAGIC = b"\x93NUMPY"
NPY_PROBE = 4096  # first read of a .npy: numpy writes headers of 128 bytes, rarely more
ALIGN = 4096  # file offset a .npy payload read starts at a multiple of (GPUDirect Storage's page)


class FormatError(ValueError):
    """The bytes are not a tensor file this module can read; the message says why."""


@dataclass(frozen=True)
class NpyHeader:
    """A parsed ``.npy`` header: ``data_offset`` is where the raw array bytes start."""

    dtype: np.dtype
    shape: tuple[int, ...]
    fortran_order: bool
    data_offset: int

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


def npy_header_length(prefix: bytes) -> int:
    """Bytes of magic + header, from the first 12 bytes (or more) of a ``.npy`` file."""
    if len(prefix) < 10 or not prefix.startswith(_MAGIC):
        raise FormatError("not a .npy file (no \\x93NUMPY magic)")
    major = prefix[6]
    if major == 1:
        return 10 + struct.unpack_from("<H", prefix, 8)[0]
    if major in (2, 3) and len(prefix) >= 12:
        return 12 + struct.unpack_from("<I", prefix, 8)[0]
    raise FormatError(f"unsupported .npy format version {major}.{prefix[7]}")


def parse_npy_header(head: bytes) -> NpyHeader:
    """Parse magic + header (exactly :func:`npy_header_length` bytes or more)."""
    total = npy_header_length(head)
    if len(head) < total:
        raise FormatError(f"the header is cut short ({len(head)} of {total} bytes)")
    start = 10 if head[6] == 1 else 12
    text = head[start:total].decode("utf-8" if head[6] == 3 else "latin1")
    try:
        meta = ast.literal_eval(text)
        dtype = np.lib.format.descr_to_dtype(meta["descr"])
        shape = tuple(int(d) for d in meta["shape"])
        fortran = bool(meta["fortran_order"])
    except (ValueError, SyntaxError, KeyError, TypeError) as exc:
        raise FormatError(f"unreadable .npy header {text.strip()!r}: {exc}") from None
    if dtype.hasobject:
        raise FormatError(f"the array holds pickled Python objects (dtype {dtype}); only raw arrays are read")
    if any(d < 0 for d in shape):
        raise FormatError(f"negative dimension in shape {shape}")
    return NpyHeader(dtype, shape, fortran, total)


def torch_dtype(dtype: np.dtype):
    """The torch dtype of a NumPy dtype (byte order ignored)."""
    import torch

    try:
        return torch.from_numpy(np.empty(0, dtype=dtype.newbyteorder("="))).dtype
    except TypeError:
        raise FormatError(f"dtype {dtype} has no torch equivalent") from None


def load_npy(size: int, read_into: Callable[[Any, int, int], int], device: Any):
    """Read a ``.npy`` of ``size`` bytes as a tensor on ``device``.

    Args:
        read_into: ``read_into(buffer, offset, n)`` fills ``buffer`` with bytes
            ``[offset, offset + n)`` of the file (the client's read).
        device: the torch device of the result.
    """
    import torch

    first = bytearray(min(size, NPY_PROBE))
    read_into(first, 0, len(first))
    total = npy_header_length(bytes(first[:12]))
    if total > len(first):
        if total > size:
            raise FormatError(f"the file ({size} bytes) ends inside its {total}-byte header")
        first = bytearray(total)
        read_into(first, 0, total)
    header = parse_npy_header(bytes(first))
    if size < header.data_offset + header.nbytes:
        raise FormatError(f"truncated: the header promises {header.nbytes} bytes of {header.dtype} "
                          f"{header.shape}, the file has {size - header.data_offset} after it")
    shape = header.shape[::-1] if header.fortran_order else header.shape
    if header.dtype.isnative:  # the payload goes straight into the target tensor
        out = _read_payload(header, shape, read_into, device)
    else:  # torch has no byte-swapped dtypes: swap on the host, then move
        host = np.empty(shape, dtype=header.dtype)
        if header.nbytes:
            read_into(host, header.data_offset, header.nbytes)
        out = torch.from_numpy(host.astype(header.dtype.newbyteorder("="))).to(device)
    if header.fortran_order and out.dim() > 1:
        out = out.permute(*reversed(range(out.dim()))).contiguous()
    return out


def _read_payload(header: NpyHeader, shape: tuple[int, ...], read_into: Callable[[Any, int, int], int],
                  device: Any) -> Any:
    """The payload of a native-order ``.npy`` as a tensor of ``shape`` on ``device``.

    The read starts at the payload's offset rounded down to :data:`ALIGN` (0 for the
    usual 128-byte header) into a buffer that much longer, and the tensor is a view of
    it past the header bytes: cuFile moves a read from an aligned file offset straight
    to the GPU, where an unaligned one (numpy's payload starts at byte 128) is split
    and bounced through host memory. A payload whose offset is not a multiple of its
    element size cannot be viewed that way and is read into the tensor directly."""
    import torch

    dtype = torch_dtype(header.dtype)
    start = header.data_offset - header.data_offset % ALIGN
    skip = header.data_offset - start
    if not header.nbytes or skip % header.dtype.itemsize:
        out = torch.empty(shape, dtype=dtype, device=device)
        if header.nbytes:
            read_into(out, header.data_offset, header.nbytes)
        return out
    buffer = torch.empty(skip + header.nbytes, dtype=torch.uint8, device=device)
    read_into(buffer, start, len(buffer))
    return buffer[skip:].view(dtype).view(shape)


def load_pt(data: bytes | bytearray, device: Any) -> Any:
    """``torch.load`` of a ``.pt``/``.pth`` file's bytes onto ``device`` (weights only:
    tensors and plain containers, never arbitrary pickled code)."""
    import torch

    try:
        return torch.load(io.BytesIO(data), map_location=device, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many types for a bad file
        raise FormatError(f"torch.load failed: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}") from exc


def load_safetensors(data: bytes | bytearray, device: Any) -> dict[str, Any]:
    """The tensors of a ``.safetensors`` file's bytes, as ``{name: tensor on device}``."""
    try:
        from safetensors.torch import load
    except ImportError as exc:
        raise ImportError("reading .safetensors files needs the 'safetensors' package: "
                          f"pip install safetensors ({exc})") from exc
    try:
        tensors = load(bytes(data))
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types
        raise FormatError(f"not a readable safetensors file: {type(exc).__name__}: {exc}") from exc
    return {name: t.to(device) for name, t in tensors.items()}


__all__ = ["FormatError", "NpyHeader", "load_npy", "load_pt", "load_safetensors", "npy_header_length",
           "parse_npy_header", "torch_dtype"]
