"""Every execution path is one engine with a different decode stage: the CPU-fused,
per-sample CPU, GPU and hybrid paths of the DataLoader and the Pipeline's paths all run
through :class:`turbofeed.engine.run.Engine`. The GPU ones run here with the CPU stand-in
decoder of conftest.py (no GPU on this machine); tests/gpu/test_on_gpu.py runs them on one."""

from __future__ import annotations

import pytest
import torch

import turbofeed
from turbofeed import transforms as T
from turbofeed.engine.run import Engine


def stage_names(it) -> list[str]:
    assert isinstance(it.engine, Engine)
    return [s.name for s in it.engine.stages]


@pytest.mark.parametrize("options, decode", [
    ({"transform": T.imagenet_train(32)}, "decode.cpu"),
    ({"transform": T.Compose([T.Resize(40)])}, "decode.cpu"),  # varying sizes: per-sample
    ({"transform": T.imagenet_eval(32), "gpu_decode": "stand-in"}, "decode.gpu"),
    ({"transform": T.imagenet_eval(32), "gpu_decode": "stand-in", "hybrid": True}, "decode.hybrid"),
])
def test_each_dataloader_path_is_the_engine_with_a_decode_choice(shards, stand_in, options, decode):
    if options.get("gpu_decode") == "stand-in":
        options = {**options, "gpu_decode": stand_in}
    loader = turbofeed.DataLoader(shards, batch_size=16, num_workers=2, return_keys=True, **options)
    it = iter(loader)
    assert stage_names(it) == [decode, "deliver"]
    keys = [k for _, _, k in it]
    assert sorted(sum(keys, [])) == sorted(sum((k for _, _, k in turbofeed.DataLoader(
        shards, batch_size=16, num_workers=2, return_keys=True)), []))  # every sample once
    declared = it.engine.stages[0]
    assert declared.where in ("sample", "sample+batch") and "fetch" in declared.counts


@pytest.mark.parametrize("options, decode", [
    ({}, "decode.cpu"),
    ({"decode_jpeg": False}, "fetch"),
    ({"gpu_decode": "stand-in"}, "decode.gpu"),
])
def test_each_pipeline_path_is_the_engine_with_a_decode_choice(shards, stand_in, options, decode):
    if options.get("gpu_decode") == "stand-in":
        options = {**options, "gpu_decode": stand_in, "device_id": 0}
    pipe = turbofeed.Pipeline(shards, num_workers=2, **options)
    pipe.start()
    assert pipe._engine is not None
    assert [s.name for s in pipe._engine.stages][0] == decode
    samples = list(pipe)
    assert len(samples) == pipe.dataset.num_samples
    if decode == "decode.gpu":
        assert all(isinstance(s.tensor, torch.Tensor) and s.tensor.shape[2] == 3 for s in samples)
    pipe.stop()


def test_hybrid_and_gpu_give_the_cpu_paths_samples_in_the_same_order(shards, stand_in):
    kw = dict(batch_size=16, num_workers=2, shuffle=True, seed=5, transform=T.imagenet_eval(32), return_keys=True)
    cpu = [(y.tolist(), k) for _, y, k in turbofeed.DataLoader(shards, **kw)]
    gpu = [(y.tolist(), k) for _, y, k in turbofeed.DataLoader(shards, gpu_decode=stand_in, **kw)]
    hybrid = [(y.tolist(), k) for _, y, k in turbofeed.DataLoader(shards, gpu_decode=stand_in, hybrid=True, **kw)]
    assert cpu == gpu == hybrid
