"""What a transfer reads into or writes from, as flat bytes: host memory or CUDA memory.

:func:`as_buffer` accepts, in this order:

=============================================  ===============================================
buffer                                         becomes
=============================================  ===============================================
``torch.Tensor`` on CUDA                       :class:`DeviceBuffer` (a flat uint8 view)
``torch.Tensor`` on the CPU                    :class:`HostBuffer`
``numpy.ndarray``                              :class:`HostBuffer`
``__cuda_array_interface__`` (CuPy, Numba)     :class:`DeviceBuffer` through ``torch.as_tensor``
``__dlpack__`` on a CUDA device (JAX, ...)     :class:`DeviceBuffer` through ``torch.from_dlpack``
buffer protocol (bytearray, memoryview, mmap)  :class:`HostBuffer`
=============================================  ===============================================

Every view shares memory with the caller's object (checked by address for the CUDA
imports); a non-contiguous buffer is refused rather than silently copied, since a
read into a copy would be lost.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from .errors import GDSError

if TYPE_CHECKING:
    import torch

_CUDA_DLPACK_DEVICES = {2, 3, 13}  # kDLCUDA, kDLCUDAHost, kDLCUDAManaged
_streams = threading.local()  # one side stream per (thread, device): chunks copy in parallel


class HostBuffer:
    """C-contiguous host memory as a flat byte ``memoryview``.

    Attributes:
        view: the bytes (format ``"B"``), sharing memory with the caller's object.
        nbytes: its length.
        what: a short description for messages (``numpy.ndarray float32 (4096 bytes)``).
    """

    on_device: Literal[False] = False  # tells the two kinds apart (type checkers narrow on it)

    def __init__(self, view: memoryview, what: str) -> None:
        self.view = view
        self.nbytes = view.nbytes
        self.readonly = view.readonly
        self.what = what


class DeviceBuffer:
    """A contiguous CUDA allocation as a flat ``torch.uint8`` tensor (no copy).

    Copies to and from host staging memory run on a side stream per thread and are
    waited for before the call returns. Work the caller queued on the buffer's device
    (the current stream when the transfer starts) is waited for first: see
    :meth:`mark_ready`.

    Attributes:
        flat: the bytes, a 1-D uint8 CUDA tensor sharing memory with the caller's object.
        nbytes: its length.
        device_index: the CUDA device number.
        what: a short description for messages.
    """

    on_device: Literal[True] = True

    def __init__(self, flat: Any, what: str, readonly: bool = False) -> None:
        self.flat = flat
        self.nbytes = int(flat.numel())
        self.device_index = int(flat.device.index or 0)
        self.readonly = readonly
        self.what = what
        self._ready: torch.cuda.Event | None = None

    def mark_ready(self) -> None:
        """Record the point on the caller's current stream after which the buffer may be
        touched. Call in the caller's thread before handing the transfer to workers."""
        import torch

        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(self.flat.device))
        self._ready = event

    def wait_ready(self) -> None:
        """Block until the caller's queued work on the buffer is done (before cuFile I/O,
        which is not stream-ordered)."""
        if self._ready is not None:
            self._ready.synchronize()

    @contextlib.contextmanager
    def current_context(self) -> Iterator[None]:
        """Make the buffer's device (its CUDA primary context) current in this thread for the
        block. KvikIO's ``raw_read``/``raw_write`` use the calling thread's current context and
        push none; a transfer worker that never made a CUDA call has none, and the call fails
        with CUDA_ERROR_INVALID_CONTEXT. A runtime call (a stream query) binds it; ``device()``
        alone does not when the index is already the thread's default."""
        import torch

        with torch.cuda.device(self.device_index):
            torch.cuda.current_stream(self.device_index).query()
            yield

    def _stream(self):
        import torch

        streams = getattr(_streams, "by_device", None)
        if streams is None:
            streams = _streams.by_device = {}
        stream = streams.get(self.device_index)
        if stream is None:
            stream = streams[self.device_index] = torch.cuda.Stream(device=self.flat.device)
        return stream

    def upload(self, pos: int, staging: Any, n: int) -> None:
        """Copy ``staging[:n]`` (pinned host uint8 tensor) to bytes ``[pos, pos + n)``; waits."""
        import torch

        stream = self._stream()
        with torch.cuda.stream(stream):
            if self._ready is not None:
                stream.wait_event(self._ready)
            self.flat[pos:pos + n].copy_(staging[:n], non_blocking=True)
        stream.synchronize()  # the staging buffer is reused as soon as we return

    def download(self, pos: int, staging: Any, n: int) -> None:
        """Copy bytes ``[pos, pos + n)`` into ``staging[:n]`` (pinned host); waits."""
        import torch

        stream = self._stream()
        with torch.cuda.stream(stream):
            if self._ready is not None:
                stream.wait_event(self._ready)
            staging[:n].copy_(self.flat[pos:pos + n], non_blocking=True)
        stream.synchronize()

    def cuda_view(self, pos: int, n: int) -> Any:
        """Bytes ``[pos, pos + n)`` as an object with ``__cuda_array_interface__`` (for KvikIO)."""
        return self.flat[pos:pos + n]


def as_buffer(obj: Any, *, writable: bool) -> HostBuffer | DeviceBuffer:
    """Wrap ``obj`` as flat bytes without copying.

    Args:
        obj: see the module table; :class:`HostBuffer`/:class:`DeviceBuffer` pass through.
        writable: the transfer writes into the buffer (a read from storage).

    Raises:
        GDSError: not contiguous, read-only when ``writable``, a Python-object array, a
            kind of buffer not in the table, or a CUDA buffer without PyTorch.
    """
    if isinstance(obj, (HostBuffer, DeviceBuffer)):
        out = obj
    elif "torch" in sys.modules and isinstance(obj, sys.modules["torch"].Tensor):
        out = _from_torch(obj)
    elif isinstance(obj, np.ndarray):
        out = _from_numpy(obj, f"numpy.ndarray {obj.dtype}")
    elif hasattr(obj, "__cuda_array_interface__"):
        out = _from_cuda_array_interface(obj)
    elif hasattr(obj, "__dlpack_device__") and _dlpack_device(obj) in _CUDA_DLPACK_DEVICES:
        out = _from_dlpack(obj)
    else:
        out = _from_buffer_protocol(obj)
    if writable and out.readonly:
        raise GDSError(f"cannot read into a read-only buffer ({out.what})")
    return out


def _describe(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _from_numpy(arr: np.ndarray, what: str) -> HostBuffer:
    if arr.dtype.hasobject:
        raise GDSError(f"a {what} holds Python objects, not raw bytes")
    if not arr.flags.c_contiguous:
        raise GDSError(f"the buffer must be C-contiguous, got a strided {what} of shape {arr.shape} "
                       "(pass np.ascontiguousarray(...) and copy back, or a contiguous array)")
    flat = arr.reshape(-1).view(np.uint8)
    return HostBuffer(flat.data, f"{what} ({flat.nbytes} bytes)")


def _from_torch(t: Any) -> HostBuffer | DeviceBuffer:
    import torch

    what = f"torch.Tensor {str(t.dtype).removeprefix('torch.')} {t.device}"
    if t.layout != torch.strided or t.is_quantized:
        raise GDSError(f"the buffer must be a dense tensor, got {what} with layout {t.layout}")
    if not t.is_contiguous():
        raise GDSError(f"the buffer must be contiguous, got {what} of shape {tuple(t.shape)} and "
                       f"strides {t.stride()} (pass t.contiguous() and copy back)")
    flat = t.detach().reshape(-1).view(torch.uint8)
    if t.device.type == "cuda":
        return DeviceBuffer(flat, f"{what} ({flat.numel()} bytes)")
    if t.device.type != "cpu":
        raise GDSError(f"buffers on {t.device.type} are not supported ({what}); use CUDA or CPU memory")
    return _from_numpy(flat.numpy(), what)


def _cuda_torch(obj: Any, kind: str):
    try:
        import torch
    except ImportError as exc:
        raise GDSError(f"GPU buffers ({_describe(obj)}) need PyTorch with CUDA: pip install torch") from exc
    if not torch.cuda.is_available():
        raise GDSError(f"a CUDA buffer ({_describe(obj)}, {kind}) but PyTorch sees no CUDA device")
    return torch


def _from_cuda_array_interface(obj: Any) -> HostBuffer | DeviceBuffer:
    torch = _cuda_torch(obj, "__cuda_array_interface__")
    iface = obj.__cuda_array_interface__
    ptr, readonly = iface["data"]
    # No device= argument: torch finds the pointer's device itself; naming one would copy
    # an array that lives on another GPU, and the read would land in the copy.
    t = torch.as_tensor(obj)
    if ptr and t.data_ptr() != ptr:
        raise GDSError(f"{_describe(obj)}: PyTorch made a copy of the buffer instead of a view")
    out = _from_torch(t)
    out.readonly = bool(readonly)
    out.what = f"{_describe(obj)} {iface.get('typestr', '')} ({out.nbytes} bytes)"
    return out


def _dlpack_device(obj: Any) -> int:
    try:
        return int(obj.__dlpack_device__()[0])
    except Exception:  # noqa: BLE001 - an object that cannot say is not a CUDA buffer
        return -1


def _from_dlpack(obj: Any) -> HostBuffer | DeviceBuffer:
    torch = _cuda_torch(obj, "DLPack")
    t = torch.from_dlpack(obj)
    out = _from_torch(t)
    out.what = f"{_describe(obj)} via DLPack ({out.nbytes} bytes)"
    return out


def _from_buffer_protocol(obj: Any) -> HostBuffer:
    try:
        view = memoryview(obj)
    except TypeError:
        raise GDSError(f"unsupported buffer {_describe(obj)}: pass a torch tensor, a CuPy or NumPy "
                       "array, or a bytearray/memoryview") from None
    if not view.c_contiguous:
        raise GDSError(f"the buffer must be C-contiguous, got a strided {_describe(obj)}")
    if view.format != "B" or view.ndim != 1:
        try:
            view = view.cast("B")
        except TypeError:  # a format memoryview cannot reinterpret: let NumPy do it
            return _from_numpy(np.frombuffer(obj, dtype=np.uint8), _describe(obj))
    return HostBuffer(view, f"{_describe(obj)} ({view.nbytes} bytes)")


__all__ = ["DeviceBuffer", "HostBuffer", "as_buffer"]
