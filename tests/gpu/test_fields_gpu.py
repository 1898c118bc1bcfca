"""General samples through the GPU decode stage (the CPU stand-in decoder of conftest.py)."""

from __future__ import annotations

import turbofeed
from builders import small_jpeg, write_tar
from turbofeed import transforms as T


def test_gpu_decode_with_fields_keeps_the_pairing(tmp_path, stand_in):
    members = []
    for i in range(20):
        members += [(f"k{i:03d}.jpg", small_jpeg(seed=i)), (f"k{i:03d}.txt", f"caption of k{i:03d}".encode())]
    path = write_tar(str(tmp_path / "pairs.tar"), members)
    loader = turbofeed.DataLoader(turbofeed.Dataset(path, fields={"image": "jpg", "caption": "txt"}), batch_size=8,
                                  num_workers=2, shuffle=True, gpu_decode=stand_in, transform=T.imagenet_eval(16))
    assert [s.name for s in iter(loader).engine.stages][0] == "decode.gpu"
    keys = []
    for batch in loader:
        assert batch["image"].shape[1:] == (3, 16, 16)
        assert batch["caption"] == [f"caption of {k}" for k in batch["__key__"]]
        keys += batch["__key__"]
    assert sorted(keys) == [f"k{i:03d}" for i in range(20)]
    assert stand_in.calls and set(stand_in.calls) <= {8, 4}
