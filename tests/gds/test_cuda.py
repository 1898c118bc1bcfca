"""Real CUDA buffers: torch, CuPy (when installed) and DLPack, through S3 and local files,
by cuFile/KvikIO (when installed) and by pinned staging. Skipped without a GPU.

The file tests use a file-only client (``make_file_client``): they need no S3 server, so
they run where moto and boto3 are missing (the GPU machine); only the object round trip
needs the server."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)

from turbofeed.gds import BufferTooSmallError, DeviceBuffer, GDSError, GPUDirectDataset, as_buffer  # noqa: E402
from turbofeed.gds.files import kvikio_module  # noqa: E402

METHODS = ["staged"] + (["kvikio"] if kvikio_module()[0] is not None else [])
SIZES = [0, 1, 100 << 10, 40 << 20]


def _config(method: str) -> dict:
    return dict(enabled=method == "kvikio", max_transfer_size="4M", buffer_pool_size="16M", queue_depth=4)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("size", SIZES)
def test_file_round_trip(make_file_client, helpers, tmp_path, method, size):
    client = make_file_client(**_config(method))
    data = helpers.payload(size, seed=size)
    src = torch.from_numpy(data).cuda()
    assert client.file_method(src) == method
    path = tmp_path / "f.bin"
    assert client.write_file_from_gpu(path, src) == size
    assert path.read_bytes() == data.tobytes()
    dst = torch.full((size + 8,), 7, dtype=torch.uint8, device="cuda")
    assert client.read_file_to_gpu(path, dst) == size
    assert torch.equal(dst[:size].cpu(), torch.from_numpy(data)) and (dst[size:] == 7).all()
    assert client.async_read_file(path, dst, offset=size // 2).result(60) == size - size // 2


@pytest.mark.parametrize("size", SIZES)
def test_object_round_trip(make_client, helpers, size):
    client = make_client(**_config("staged"))
    data = helpers.payload(size, seed=size + 1)
    src = torch.from_numpy(data).to("cuda")
    assert client.async_write(helpers.BUCKET, f"cuda/{size}.bin", src).result(60) == size
    dst = torch.empty(size, dtype=torch.uint8, device="cuda")
    assert client.read_to_gpu(helpers.BUCKET, f"cuda/{size}.bin", dst) == size
    assert torch.equal(dst.cpu(), torch.from_numpy(data))
    if size:
        assert client.stats()["staging"]["pinned"] is True


def test_reads_wait_for_the_callers_stream(make_file_client, helpers, tmp_path):
    """Work queued on the caller's stream before a read must not overwrite what was read."""
    client = make_file_client(**_config("staged"))
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(range(256)) * 4096)
    dst = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # keeps the stream busy, then the fill runs
        dst.fill_(0)
        client.read_file_to_gpu(path, dst)
    torch.cuda.synchronize()
    assert torch.equal(dst.cpu(), torch.from_numpy(np.frombuffer(path.read_bytes(), np.uint8)))


def test_other_dtypes_and_shapes(make_file_client, helpers, tmp_path):
    client = make_file_client(**_config(METHODS[-1]))
    src = torch.randn(33, 17, device="cuda")
    client.write_file_from_gpu(tmp_path / "x.bin", src)
    dst = torch.empty_like(src)
    client.read_file_to_gpu(tmp_path / "x.bin", dst)
    assert torch.equal(src, dst)


def test_cupy_and_dlpack(make_file_client, helpers, tmp_path):
    cupy = pytest.importorskip("cupy")
    client = make_file_client(**_config(METHODS[-1]))
    src = cupy.arange(1000, dtype=cupy.float32)
    client.write_file_from_gpu(tmp_path / "c.bin", src)
    dst = cupy.zeros(1000, dtype=cupy.float32)
    client.read_file_to_gpu(tmp_path / "c.bin", dst)  # via __cuda_array_interface__
    assert bool((dst == src).all())

    class OnlyDLPack:  # an object offering DLPack and nothing else
        def __init__(self, arr):
            self.arr = arr

        def __dlpack__(self, **kw):
            return self.arr.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.arr.__dlpack_device__()
    dst2 = cupy.zeros(1000, dtype=cupy.float32)
    client.read_file_to_gpu(tmp_path / "c.bin", OnlyDLPack(dst2))
    assert bool((dst2 == src).all())


def test_buffer_checks_on_device(make_file_client, helpers, tmp_path):
    client = make_file_client(**_config("staged"))
    (tmp_path / "f.bin").write_bytes(bytes(5000))
    with pytest.raises(BufferTooSmallError, match=r"5000 bytes to read, but the buffer \(torch.Tensor uint8 cuda:"):
        client.read_file_to_gpu(tmp_path / "f.bin", torch.empty(4096, dtype=torch.uint8, device="cuda"))
    with pytest.raises(GDSError, match="contiguous"):
        as_buffer(torch.empty(8, 8, device="cuda").t(), writable=True)
    assert isinstance(as_buffer(torch.empty(3, device="cuda"), writable=True), DeviceBuffer)
    wrong = make_file_client(device_ids=[torch.cuda.device_count()], **_config("staged"))
    with pytest.raises(GDSError, match="but the GDS config allows devices"):
        wrong.read_file_to_gpu(tmp_path / "f.bin", torch.empty(5000, dtype=torch.uint8, device="cuda"))


def test_dataset_on_gpu(tmp_path):
    arr = np.random.default_rng(3).standard_normal((128, 129)).astype(np.float32)
    np.save(tmp_path / "a.npy", arr)
    torch.save(torch.arange(5), tmp_path / "b.pt")
    ds = GPUDirectDataset(str(tmp_path), device="cuda")
    a, b = ds[0], ds[1]
    assert a.is_cuda and b.is_cuda
    assert torch.equal(a.cpu(), torch.from_numpy(arr)) and torch.equal(b.cpu(), torch.arange(5))
