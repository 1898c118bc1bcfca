"""GPUDirectDataset: .npy (header + raw bytes into the target tensor), .pt and .safetensors
from local files and from the local S3 server, on the CPU; clear errors for bad files."""

from __future__ import annotations

import io
import os
import sys

import numpy as np
import pytest

from turbofeed.errors import DatasetError, SampleError

torch = pytest.importorskip("torch")
from turbofeed.gds import GDSConfig, GPUDirectDataset  # noqa: E402

ARRAYS = {
    "a_float32.npy": np.random.default_rng(0).standard_normal((3, 4, 5)).astype(np.float32),
    "b_uint8.npy": np.arange(200, dtype=np.uint8).reshape(10, 20),
    "c_int64.npy": np.array([-(2**40), 0, 7], dtype=np.int64),
    "d_bool.npy": np.array([[True, False], [False, True]]),
    "e_fortran.npy": np.asfortranarray(np.arange(24, dtype=np.float64).reshape(2, 3, 4)),
    "f_bigendian.npy": np.arange(6, dtype=">i4").reshape(2, 3),
    "g_scalar.npy": np.array(3.5, dtype=np.float16),
    "h_empty.npy": np.zeros((0, 5), dtype=np.float32),
}
SMALL = GDSConfig(max_transfer_size="4K", buffer_pool_size="16K", queue_depth=3)


def _pt_bytes(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


@pytest.fixture(scope="module")
def tensor_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("tensors")
    for name, arr in ARRAYS.items():
        np.save(root / name, arr)
    np.save(root / "i_big.npy", np.random.default_rng(1).standard_normal((64, 257)))  # 131 KiB: many chunks
    (root / "j_model.pt").write_bytes(_pt_bytes(torch.arange(10, dtype=torch.int32)))
    (root / "k_dict.pth").write_bytes(_pt_bytes({"w": torch.ones(2, 2), "step": 3}))
    (root / "notes.txt").write_text("ignored: not a tensor file")
    return root


def _expect(path: str):
    if path.endswith(".npy"):
        return torch.from_numpy(np.load(path).astype(np.load(path).dtype.newbyteorder("=")))
    return torch.load(path, weights_only=True)


def _same(got, want) -> None:
    if isinstance(want, dict):
        assert set(got) == set(want)
        for k in want:
            _same(got[k], want[k])
    elif isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype and got.shape == want.shape and got.device.type == "cpu"
        assert torch.equal(got, want)
    else:
        assert got == want


def test_local_folder(tensor_dir):
    ds = GPUDirectDataset(str(tensor_dir), config=SMALL)
    names = [os.path.basename(p) for p in ds.items]
    assert names == sorted(list(ARRAYS) + ["i_big.npy", "j_model.pt", "k_dict.pth"])  # notes.txt left out
    for i, path in enumerate(ds.items):
        _same(ds[i], _expect(path))
    assert ds[names.index("e_fortran.npy")].is_contiguous()


def test_local_file_list_and_dataloader(tensor_dir):
    files = [str(tensor_dir / "a_float32.npy")] * 4
    ds = GPUDirectDataset(files, device="cpu", config=SMALL)
    loader = torch.utils.data.DataLoader(ds, batch_size=2, num_workers=1)  # a worker process: own client
    batches = list(loader)
    assert len(batches) == 2 and batches[0].shape == (2, 3, 4, 5)
    assert torch.equal(batches[1][1], torch.from_numpy(ARRAYS["a_float32.npy"]))


def test_safetensors(tensor_dir, tmp_path):
    st = pytest.importorskip("safetensors.torch")
    tensors = {"weight": torch.randn(3, 4), "bias": torch.arange(4, dtype=torch.int16)}
    path = tmp_path / "m.safetensors"
    st.save_file(tensors, str(path))
    _same(GPUDirectDataset(str(path))[0], tensors)


def test_safetensors_missing_package_message(tmp_path, monkeypatch):
    """The package is made unimportable the way Python does for a missing one."""
    path = tmp_path / "m.safetensors"
    path.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    for name in [n for n in sys.modules if n == "safetensors" or n.startswith("safetensors.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "safetensors", None)
    with pytest.raises(SampleError, match=r"decode.cpu: .*m.safetensors: .*needs the 'safetensors' package: "
                                          r"pip install safetensors"):
        GPUDirectDataset(str(path))[0]


def test_s3_prefix_and_urls(s3_server, tensor_dir, helpers):
    boto = helpers.boto(s3_server)
    for name in sorted(os.listdir(tensor_dir)):
        boto.upload_file(str(tensor_dir / name), helpers.BUCKET, f"tensors/{name}")
    kw = dict(endpoint=s3_server.endpoint, access_key="test", secret_key="test", config=SMALL)
    ds = GPUDirectDataset(f"s3://{helpers.BUCKET}/tensors/", **kw)
    assert [u.rsplit("/", 1)[1] for u in ds.items] == sorted(list(ARRAYS) + ["i_big.npy", "j_model.pt",
                                                                             "k_dict.pth"])
    for i, url in enumerate(ds.items):
        _same(ds[i], _expect(str(tensor_dir / url.rsplit("/", 1)[1])))
    one = GPUDirectDataset([f"s3://{helpers.BUCKET}/tensors/i_big.npy"], **kw)
    _same(one[0], _expect(str(tensor_dir / "i_big.npy")))


def test_bad_files_raise_sample_errors(tmp_path):
    arr = np.arange(1000, dtype=np.float32)
    np.save(tmp_path / "whole.npy", arr)
    data = (tmp_path / "whole.npy").read_bytes()
    (tmp_path / "truncated.npy").write_bytes(data[:-100])
    (tmp_path / "garbage.npy").write_bytes(b"not an array at all")
    (tmp_path / "objects.npy").write_bytes(_npy_with_objects())
    (tmp_path / "broken.pt").write_bytes(b"PK\x03\x04 definitely not a zip")
    ds = GPUDirectDataset(str(tmp_path))
    errors = {}
    for i, path in enumerate(ds.items):
        try:
            ds[i]
        except SampleError as exc:
            errors[os.path.basename(path)] = str(exc)
    assert set(errors) == {"truncated.npy", "garbage.npy", "objects.npy", "broken.pt"}
    assert errors["truncated.npy"].startswith(f"decode.cpu: {tmp_path}/truncated.npy: truncated")
    assert "no \\x93NUMPY magic" in errors["garbage.npy"]
    assert "pickled Python objects" in errors["objects.npy"]
    assert "torch.load failed" in errors["broken.pt"]


def _npy_with_objects() -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    return buf.getvalue()


def test_construction_errors(tmp_path):
    with pytest.raises(DatasetError, match="no such file or folder"):
        GPUDirectDataset(str(tmp_path / "missing.npy"))
    with pytest.raises(DatasetError, match="no files ending in"):
        GPUDirectDataset(str(tmp_path))
    (tmp_path / "x.csv").write_text("1,2")
    with pytest.raises(DatasetError, match="unknown tensor file type"):
        GPUDirectDataset(str(tmp_path / "x.csv"))


def test_missing_file_after_construction_is_a_fetch_error(tmp_path):
    np.save(tmp_path / "gone.npy", np.zeros(3))
    ds = GPUDirectDataset(str(tmp_path / "gone.npy"))
    os.remove(tmp_path / "gone.npy")
    with pytest.raises(SampleError, match="fetch: .*gone.npy: FileNotFoundError"):
        ds[0]


def test_s3_object_replaced_after_listing_is_read_whole_from_the_new_version(s3_server, helpers):
    """Every ranged GET of one item carries the listed ETag (If-Match): a replaced object
    is read again from its new version, never as a mix of the two."""
    boto = helpers.boto(s3_server)
    old, new = np.arange(5000, dtype=np.float32), -np.arange(7000, dtype=np.float64)  # other size too
    buf = io.BytesIO()
    np.save(buf, old)
    boto.put_object(Bucket=helpers.BUCKET, Key="replaced/v.npy", Body=buf.getvalue())
    ds = GPUDirectDataset(f"s3://{helpers.BUCKET}/replaced/", endpoint=s3_server.endpoint, access_key="test",
                          secret_key="test", config=SMALL)
    assert torch.equal(ds[0], torch.from_numpy(old))
    buf = io.BytesIO()
    np.save(buf, new)
    boto.put_object(Bucket=helpers.BUCKET, Key="replaced/v.npy", Body=buf.getvalue())
    assert torch.equal(ds[0], torch.from_numpy(new))
    ds.close()
