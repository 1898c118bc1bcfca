"""A bug in user code is not bad data: an exception from a ``transform`` callable, ``map``,
``collate`` or ``batch_transform`` (or a None / unbatchable value it returns) stops the pass
at its first batch with ``turbofeed.UserCodeError`` naming the callable, shard and key,
raised from the user's exception, whatever ``on_error`` says; the threads stop. Only
``user_errors="bad_sample"`` routes a per-sample callable's failure through ``on_error``.
"""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest
import torch

import turbofeed
from builders import small_jpeg, write_tar
from turbofeed import transforms as T
from turbofeed.errors import SampleError, UserCodeError

SAMPLES = 40


@pytest.fixture(scope="module")
def shard(tmp_path_factory) -> str:
    members = []
    for i in range(SAMPLES):
        members += [(f"k{i:03d}.jpg", small_jpeg(seed=i)), (f"k{i:03d}.cls", str(i % 4).encode()),
                    (f"k{i:03d}.json", json.dumps({"w": i}).encode())]
    return write_tar(str(tmp_path_factory.mktemp("usercode") / "shard-000000.tar"), members)


def turbofeed_threads(timeout: float = 5.0) -> list[str]:
    """The turbofeed threads still alive once they had ``timeout`` seconds to stop."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [t.name for t in threading.enumerate() if t.name.startswith("turbofeed-") and t.is_alive()]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def always_fails(x: torch.Tensor) -> torch.Tensor:
    raise RuntimeError("bug in my transform")


@pytest.mark.parametrize("on_error", ["replace", "skip", "raise"])
def test_a_transform_callable_that_raises_stops_the_pass_at_the_first_batch(shard, on_error, caplog):
    loader = turbofeed.DataLoader(shard, batch_size=8, num_workers=2, on_error=on_error,
                                  transform=T.Compose([T.CenterCrop(16), always_fails]))
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        with pytest.raises(UserCodeError) as caught:
            for _ in loader:
                pass
    err = caught.value
    assert err.callable_name == "transform[1]=always_fails"
    assert err.shard == shard and err.key.startswith("k")
    assert isinstance(err.__cause__, RuntimeError) and str(err.__cause__) == "bug in my transform"
    assert str(err) == (f"user code: transform[1]=always_fails on {shard}/{err.key}: "
                        "RuntimeError: bug in my transform")
    assert loader.stats.batches == 0 and loader.stats.replaced == 0 and not loader.stats.errors
    assert not [r for r in caplog.records if "bug in my transform" in r.getMessage()]  # no line per sample
    assert turbofeed_threads() == []
    assert loader.state_dict()["samples_done"] == 0  # nothing was delivered: a resume starts over


@pytest.mark.parametrize("result, said", [(None, "returned NoneType, not a tensor"),
                                          ("a string", "returned str, not a tensor or numpy array")])
def test_a_transform_callable_returning_what_cannot_be_batched_is_named_at_the_first_batch(shard, result, said):
    class ToNothing:  # an object, as torchvision transforms are: named by its type
        def __call__(self, x: torch.Tensor) -> object:
            return result

    loader = turbofeed.DataLoader(shard, batch_size=8, num_workers=2, transform=[T.CenterCrop(16), ToNothing()])
    with pytest.raises(UserCodeError, match=f"transform\\[1\\]=ToNothing on .*shard-000000.tar/k\\d+: {said}"):
        next(iter(loader))
    assert turbofeed_threads() == []


def test_none_in_the_middle_of_the_callables_names_the_callable_that_returned_it(shard):
    def forgets_return(x: torch.Tensor) -> None:
        x.add_(1)

    loader = turbofeed.DataLoader(shard, batch_size=8, num_workers=2,
                                  transform=[T.CenterCrop(16), forgets_return, lambda x: x * 2])
    with pytest.raises(UserCodeError, match=r"transform\[1\]=.*forgets_return on .*: returned NoneType"):
        next(iter(loader))


def test_map_that_raises_or_returns_none_stops_the_dataloader_and_the_pipeline(shard):
    def tokenize(fields: dict) -> dict:
        return {**fields, "tokens": fields["caption"].split()}  # there is no caption: KeyError

    loader = turbofeed.DataLoader(turbofeed.Dataset(shard, fields={"image": "jpg", "meta": "json"}), batch_size=8,
                                  num_workers=2,
                                  transform=T.imagenet_eval(16), map=tokenize)
    with pytest.raises(UserCodeError, match=r"map=.*tokenize on .*shard-000000.tar/k\d+: KeyError: 'caption'") as e:
        next(iter(loader))
    assert isinstance(e.value.__cause__, KeyError) and loader.stats.replaced == 0
    assert turbofeed_threads() == []

    pipe = turbofeed.Pipeline(turbofeed.Dataset(shard, fields={"meta": "json"}), num_workers=2, map=lambda fields: None)
    with pytest.raises(UserCodeError, match=r"map=.*<lambda> on .*: returned NoneType, not a dict"):
        pipe.next_batch(4)
    assert turbofeed_threads() == []
    assert pipe.next_batch(4) == []  # the epoch ended there, as after a SampleError
    pipe.stop()
    assert turbofeed_threads() == []


def test_collate_and_batch_transform_errors_raise_naming_the_callable(shard):
    def my_collate(samples: list[dict]) -> dict:
        raise ValueError("cannot collate")

    fields = {"image": "jpg", "meta": "json"}
    loader = turbofeed.DataLoader(turbofeed.Dataset(shard, fields=fields), batch_size=8, num_workers=2,
                                  transform=T.imagenet_eval(16),
                                  collate=my_collate)
    with pytest.raises(UserCodeError, match=r"^user code: collate=.*my_collate: ValueError: cannot collate$"):
        next(iter(loader))
    none_collate = turbofeed.DataLoader(turbofeed.Dataset(shard, fields=fields), batch_size=8, num_workers=2,
                                        transform=T.imagenet_eval(16), collate=lambda samples: None)
    with pytest.raises(UserCodeError, match=r"collate=.*<lambda>: returned NoneType, not a batch"):
        next(iter(none_collate))

    def mixup(images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return images * labels.view(3, -1)  # 8 labels are no 3 rows: RuntimeError

    failing = turbofeed.DataLoader(shard, batch_size=8, num_workers=2, transform=T.imagenet_eval(16),
                                   batch_transform=mixup)
    with pytest.raises(UserCodeError, match=r"batch_transform=.*mixup: RuntimeError") as e:
        next(iter(failing))
    assert isinstance(e.value.__cause__, RuntimeError)
    forgetful = turbofeed.DataLoader(shard, batch_size=8, num_workers=2, transform=T.imagenet_eval(16),
                                     batch_transform=lambda images, labels: None)
    with pytest.raises(UserCodeError, match=r"batch_transform=.*: returned NoneType, not a batch"):
        next(iter(forgetful))
    assert turbofeed_threads() == []


def test_user_errors_bad_sample_opts_the_per_sample_callables_into_on_error(shard):
    def picky(x: torch.Tensor) -> torch.Tensor:
        if int(x.sum()) % 3 == 0:
            raise RuntimeError("no thanks")
        return x

    transform = T.Compose([T.CenterCrop(16), picky])
    loader = turbofeed.DataLoader(shard, batch_size=8, num_workers=2, transform=transform, user_errors="bad_sample")
    batches = list(loader)
    assert [len(y) for _, y in batches] == [8] * (SAMPLES // 8)  # replaced: same shapes and steps
    assert loader.stats.errors.get("augment", 0) >= 1 and loader.stats.replaced >= 1
    strict = turbofeed.DataLoader(shard, batch_size=8, num_workers=2, transform=transform, on_error="raise",
                                  user_errors="bad_sample")
    with pytest.raises(SampleError, match=r"augment: .*shard-000000\.tar/k\d{3}: transform\[1\]=.*picky: "
                                          r"RuntimeError: no thanks"):
        list(strict)
    with pytest.raises(ValueError, match="user_errors must be 'raise' or 'bad_sample'"):
        turbofeed.DataLoader(shard, user_errors="skip")


class CpuStandInDecoder:
    """The GPU decoder's contract (``device``, ``decode(datas)`` -> (3, H, W) uint8 tensors),
    decoding on the CPU: the GPU path's stages run here without a GPU."""

    device = torch.device("cpu")

    def decode(self, datas):
        from turbofeed.decode import decode

        return [torch.from_numpy(decode(bytes(d)).transpose(2, 0, 1).copy()) for d in datas]


@pytest.mark.parametrize("hybrid", [False, True])
def test_on_the_gpu_decode_path_batch_transform_raises_the_same_way(shard, hybrid):
    def cutmix(images: torch.Tensor, labels: torch.Tensor):
        raise IndexError("cutmix bug")

    loader = turbofeed.DataLoader(shard, batch_size=8, num_workers=2, transform=T.imagenet_eval(16),
                                  gpu_decode=CpuStandInDecoder(), hybrid=hybrid, batch_transform=cutmix)
    assert loader._gpu_decoder is not None  # the GPU decode stage runs
    with pytest.raises(UserCodeError, match=r"^user code: batch_transform=.*cutmix: IndexError: cutmix bug$"):
        next(iter(loader))
    assert turbofeed_threads() == []
    # (transform callables never reach the GPU decode: it needs a fixed output size, which a
    # transform with callables has not; they run in the CPU augment stage tested above)
