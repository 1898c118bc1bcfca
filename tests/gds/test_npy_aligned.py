"""gds.tensors.load_npy reads a .npy payload from a 4096-aligned file offset (GPUDirect
Storage moves aligned reads straight to the GPU; numpy's payload starts at byte 128) into
a padded buffer and returns a view past the header: the same array as np.load. On the CPU,
with a reader over the real file that records where each read starts."""

from __future__ import annotations

import ast
import os
import struct

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from turbofeed.gds.tensors import ALIGN, load_npy  # noqa: E402


class FileReader:
    """The client's ``read_into(buffer, offset, n)`` over a real file, with ``os.preadv``;
    remembers each (offset, n)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.reads: list[tuple[int, int]] = []

    def __call__(self, buffer, offset: int, n: int) -> int:
        self.reads.append((offset, n))
        view = memoryview(buffer.numpy() if isinstance(buffer, torch.Tensor) else buffer).cast("B")[:n]
        fd = os.open(self.path, os.O_RDONLY)
        try:
            got = os.preadv(fd, [view], offset)
        finally:
            os.close(fd)
        assert got == n
        return got


def _load(path: str) -> tuple[torch.Tensor, FileReader]:
    reader = FileReader(path)
    return load_npy(os.path.getsize(path), reader, "cpu"), reader


def _npy_with_header(arr: np.ndarray, header_bytes: int) -> bytes:
    """A version-1 .npy whose magic + header take ``header_bytes`` (numpy pads with spaces)."""
    meta = repr({"descr": np.lib.format.dtype_to_descr(arr.dtype), "fortran_order": False,
                 "shape": arr.shape})
    text = meta.ljust(header_bytes - 10 - 1) + "\n"
    assert ast.literal_eval(text.strip()) and len(text) + 10 == header_bytes
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode("latin1") + arr.tobytes()


@pytest.mark.parametrize("arr", [
    np.random.default_rng(0).standard_normal((33, 65)).astype(np.float32),
    np.arange(10_000, dtype=np.int64),
    np.array([[True, False], [False, True]]),
    np.array(2.5, dtype=np.float16),
    np.asfortranarray(np.arange(24, dtype=np.float64).reshape(2, 3, 4)),
])
def test_the_payload_is_read_from_offset_0_and_the_tensor_equals_np_load(tmp_path, arr):
    path = str(tmp_path / "a.npy")
    np.save(path, arr)
    out, reader = _load(path)
    np.testing.assert_array_equal(out.numpy(), np.load(path))
    assert out.dtype == torch.from_numpy(np.load(path)).dtype
    payload = reader.reads[1:]  # the first read is the header probe
    assert payload == [(0, os.path.getsize(path))]  # header bytes and payload in one aligned read


def test_a_header_longer_than_a_page_starts_the_read_on_its_page(tmp_path):
    arr = np.arange(3000, dtype=np.float32).reshape(30, 100)
    path = tmp_path / "long.npy"
    path.write_bytes(_npy_with_header(arr, 5120))
    out, reader = _load(str(path))
    np.testing.assert_array_equal(out.numpy(), arr)
    assert reader.reads[-1] == (ALIGN, 5120 - ALIGN + arr.nbytes)


def test_a_payload_not_on_its_element_size_is_read_where_it_starts(tmp_path):
    """An odd header length (valid for np.load) leaves the payload at an offset a float64
    view cannot start at: read into the tensor directly, same values."""
    arr = np.arange(50, dtype=np.float64)
    path = tmp_path / "odd.npy"
    path.write_bytes(_npy_with_header(arr, 131))
    out, reader = _load(str(path))
    np.testing.assert_array_equal(out.numpy(), arr)
    assert reader.reads[-1] == (131, arr.nbytes)
