"""GPUDirectClient and local files: byte-exact round trips through host buffers, async
variants, ranges, a too-small buffer, and writes that fail without leaving a file."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from turbofeed.gds import BufferTooSmallError, GDSConfig, GDSError, GPUDirectClient

SIZES = [0, 1, 100 << 10]
SMALL = GDSConfig(max_transfer_size="16K", buffer_pool_size="64K", queue_depth=4)


@pytest.fixture
def client():
    with GPUDirectClient(config=SMALL) as c:  # no S3 arguments: file-only use needs none
        yield c


@pytest.mark.parametrize("size", SIZES)
def test_round_trip_through_host_buffers(client, helpers, tmp_path, size):
    data = helpers.payload(size, seed=size)
    path = tmp_path / f"{size}.bin"
    assert client.write_file_from_gpu(path, data) == size
    assert path.read_bytes() == data.tobytes()
    assert sorted(os.listdir(tmp_path)) == [f"{size}.bin"]  # no temporary file left
    out = np.full(size + 3, 0xCD, np.uint8)
    assert client.read_file_to_gpu(path, out) == size
    assert helpers.same_bytes(out[:size], data) and (out[size:] == 0xCD).all()
    assert client.file_method(out) == "host"


@pytest.mark.parametrize("size", SIZES)
def test_async_round_trip(client, helpers, tmp_path, size):
    data = helpers.payload(size, seed=size + 2)
    futures = [client.async_write_file(tmp_path / f"{i}.bin", data) for i in range(3)]
    assert [f.result(timeout=60) for f in futures] == [size] * 3
    outs = [bytearray(size) for _ in range(3)]
    futures = [client.async_read_file(tmp_path / f"{i}.bin", out) for i, out in enumerate(outs)]
    assert [f.result(timeout=60) for f in futures] == [size] * 3
    assert all(bytes(out) == data.tobytes() for out in outs)


def test_overwrite_replaces_the_whole_file(client, helpers, tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 1_000_000)
    client.write_file_from_gpu(str(path), b"short")
    assert path.read_bytes() == b"short"


def test_ranges(client, helpers, tmp_path):
    data = helpers.payload(70_000, seed=5)
    path = tmp_path / "r.bin"
    path.write_bytes(data.tobytes())
    out = bytearray(30_000)
    assert client.read_file_to_gpu(path, out, offset=1_000, size=30_000) == 30_000
    assert bytes(out) == data[1_000:31_000].tobytes()
    assert client.read_file_to_gpu(path, out, offset=50_000) == 20_000
    assert bytes(out[:20_000]) == data[50_000:].tobytes()
    assert client.read_file_to_gpu(path, out, offset=70_000) == 0
    with pytest.raises(GDSError, match="outside the file"):
        client.read_file_to_gpu(path, out, offset=70_001)
    with pytest.raises(GDSError, match="the file has 70000"):
        client.read_file_to_gpu(path, out, offset=60_000, size=20_000)


def test_buffer_too_small_names_file_and_sizes(client, tmp_path):
    path = tmp_path / "big.bin"
    path.write_bytes(bytes(100 << 10))
    with pytest.raises(BufferTooSmallError) as info:
        client.read_file_to_gpu(path, np.zeros(10, np.float32))
    text = str(info.value)
    assert str(path) in text and "102400 bytes to read" in text and "holds 40" in text and "float32" in text


def test_missing_file_and_folder(client, tmp_path):
    with pytest.raises(FileNotFoundError):
        client.read_file_to_gpu(tmp_path / "nope.bin", bytearray(1))
    with pytest.raises(FileNotFoundError):
        client.write_file_from_gpu(tmp_path / "no-folder" / "x.bin", b"abc")
    assert os.listdir(tmp_path) == []


_FULL_DISK = textwrap.dedent("""
    import errno, os, resource, signal, sys
    import numpy as np
    from turbofeed.gds import GDSConfig, GPUDirectClient

    target, existing = sys.argv[1], sys.argv[2]
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG instead of being killed
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.RLIM_INFINITY))
    data = np.ones(4 << 20, np.uint8)
    with GPUDirectClient(config=GDSConfig(max_transfer_size="256K", buffer_pool_size="1M")) as client:
        for path in (target, existing):
            try:
                client.write_file_from_gpu(path, data)
            except OSError as exc:
                assert exc.errno == errno.EFBIG, exc
                print("failed", os.path.basename(path))
""")


def test_failed_write_leaves_no_file(tmp_path):
    """A real I/O failure in the middle of a write: the file-size limit (RLIMIT_FSIZE, in a
    child process so the limit touches nothing else) stops it after 1 MiB of 4 MiB."""
    target, existing = tmp_path / "new.bin", tmp_path / "old.bin"
    existing.write_bytes(b"old content")
    done = subprocess.run([sys.executable, "-c", _FULL_DISK, str(target), str(existing)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["failed", "new.bin", "failed", "old.bin"]
    assert sorted(os.listdir(tmp_path)) == ["old.bin"]  # no new.bin, no temporary file
    assert existing.read_bytes() == b"old content"


def test_a_folder_in_the_way_fails_cleanly(client, tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(OSError):
        client.write_file_from_gpu(tmp_path / "d", b"abc")
    assert os.listdir(tmp_path) == ["d"]
