"""`turbofeed bench` where PyTorch is not installed (the demo's core-only .venv): it streams
through turbofeed.Pipeline and prints the same lines as with the DataLoader."""

from __future__ import annotations

import importlib.util
import sys

from turbofeed import cli


def test_bench_without_torch_streams_through_the_pipeline(shards, monkeypatch, capsys):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else find_spec(name, *a))
    monkeypatch.setitem(sys.modules, "torch", None)  # any import of torch would fail
    assert cli.main(["bench", shards, "--epochs", "1", "--warmup", "1", "--batch-size", "16", "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert "120 samples" in out and "turbofeed.Pipeline" in out
    assert "epoch 0 (warm-up): 120 images" in out and "epoch 1: 120 images" in out
    assert "median" in out and "decode.cpu" in out
