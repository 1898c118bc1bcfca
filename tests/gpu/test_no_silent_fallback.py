"""No silent fallback (issue 36): the GPU decoder's failures are counted and logged once
per kind with their text, and its backend is the one that decodes a test JPEG right on
the device, not the one that imports. All of it runs without a GPU: the backend's batched
call is a plain function, and a stand-in ``torchvision.io`` decodes the trial on the CPU."""

from __future__ import annotations

import importlib.machinery
import logging
import sys
import types

import numpy as np
import pytest
import torch

from turbofeed.decode import decode
from turbofeed.decode import gpu
from turbofeed.decode.gpu import DecoderFailures, decode_bisecting, decode_parsed, find_backend
from turbofeed.decode.gpu_failures import FAILURES
from turbofeed.decode.gpu_backend import choose_backend, trial_jpeg, trial_verdict

CPU = torch.device("cpu")


def _failing(message: str):
    """A batched call that fails every call with ``message``, as nvJPEG that does not start does."""
    def decode_many(items):
        raise RuntimeError(message + "\nException raised from decode_jpegs_cuda at decode_jpegs_cuda.cpp:123")
    return decode_many


def test_every_failure_is_counted_by_kind_and_logged_once_with_its_text(caplog):
    failures = DecoderFailures()
    with caplog.at_level(logging.WARNING, logger="turbofeed"):
        out = decode_bisecting(_failing("Failed to initialize nvjpeg with hardware backend"), [b"a"] * 4, failures)
        decode_bisecting(_failing("Failed to initialize nvjpeg with hardware backend"), [b"b"], failures)
        decode_bisecting(_failing("CUDA out of memory"), [b"c"], failures)
    assert out == [None] * 4
    # 4 items: the batch, two halves, four single images; then one more call of each kind
    kind = "RuntimeError: Failed to initialize nvjpeg with hardware backend"
    assert failures.as_dict() == {kind: 8, "RuntimeError: CUDA out of memory": 1} and failures.total == 9
    logged = [r.getMessage() for r in caplog.records if r.name == "turbofeed"]
    assert len(logged) == 2, logged
    assert "Failed to initialize nvjpeg with hardware backend" in logged[0] and "a batch of 4" in logged[0]
    assert "decode_jpegs_cuda.cpp:123" in logged[0]  # the whole text, once
    assert "CUDA out of memory" in logged[1]


def test_a_bad_image_is_found_and_its_failures_recorded():
    failures = DecoderFailures()

    def decode_many(items):
        if b"bad" in items:
            raise RuntimeError("Error while decoding JPEG images")
        return [item.decode() for item in items]

    assert decode_bisecting(decode_many, [b"1", b"bad", b"2", b"3"], failures) == ["1", None, "2", "3"]
    assert failures.as_dict() == {"RuntimeError: Error while decoding JPEG images": 3}  # 4, then 2, then 1
    assert decode_bisecting(decode_many, [b"1", b"2"], failures) == ["1", "2"] and failures.total == 3


def test_without_a_record_named_the_failure_goes_to_the_default_one():
    before = FAILURES.total
    assert decode_bisecting(_failing("nvjpeg fault"), [b"x"]) == [None]
    assert FAILURES.total == before + 1


def test_a_parse_failure_is_recorded_too():
    failures = DecoderFailures()

    def parse(item: bytes) -> bytes:
        if not item.startswith(b"ok"):
            raise RuntimeError("Failed to get image info")
        return item[2:]

    assert decode_parsed(parse, lambda part: [p.decode() for p in part], [b"ok1", b"junk"], failures) == ["1", None]
    assert failures.as_dict() == {"RuntimeError: Failed to get image info": 1}


# --- choosing the backend by a trial decode ------------------------------------------

def test_the_first_backend_whose_trial_decodes_is_chosen_and_the_others_named():
    verdicts = {"nvimgcodec": "not installed", "torchvision": None}
    assert choose_backend(("nvimgcodec", "torchvision"), verdicts.get) == ("torchvision", ["nvimgcodec: not installed"])
    verdicts = {"nvimgcodec": None, "torchvision": None}
    assert choose_backend(("nvimgcodec", "torchvision"), verdicts.get) == ("nvimgcodec", [])


def test_an_importable_backend_whose_trial_fails_is_not_chosen():
    def trial(name: str) -> str | None:
        if name == "nvimgcodec":
            return "nvImageCodec decoded on the host"
        raise RuntimeError("Failed to initialize nvjpeg\nC++ trace")  # a trial that raises fails, never the caller

    name, why = choose_backend(("nvimgcodec", "torchvision"), trial)
    assert name is None
    assert why == ["nvimgcodec: nvImageCodec decoded on the host",
                   "torchvision: its trial raised RuntimeError: Failed to initialize nvjpeg"]


def test_without_cuda_find_backend_says_so_and_tries_nothing():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    tried: list[str] = []
    assert find_backend("auto", trial=lambda name: tried.append(name)) == (None, "no CUDA GPU visible to PyTorch")
    assert tried == []


def _with_cuda(monkeypatch) -> None:
    """This machine's torch as if it saw one GPU, for the choice around the trial."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Stand-in GPU")
    monkeypatch.setattr(gpu, "_TRIED", {})


def test_find_backend_reports_the_chosen_backend_and_why_the_others_were_passed_over(monkeypatch):
    _with_cuda(monkeypatch)
    verdicts = {"nvimgcodec": "fails to decode a test JPEG", "torchvision": None}
    assert find_backend("auto", "cuda:0", trial=verdicts.get) == (
        "torchvision", "torchvision on Stand-in GPU; nvimgcodec: fails to decode a test JPEG")
    name, reason = find_backend("nvimgcodec", "cuda:0", trial=verdicts.get)
    assert name is None and reason.startswith("no GPU decoder decodes here: nvimgcodec: fails to decode")


def test_the_trial_picture_is_its_colour_and_a_wrong_decode_is_named():
    image = torch.from_numpy(np.ascontiguousarray(decode(trial_jpeg()).transpose(2, 0, 1)))
    assert trial_verdict(image, CPU) is None
    assert "came back on cpu, not cuda:0" in trial_verdict(image, torch.device("cuda", 0))
    assert "levels from the colour" in trial_verdict(image.flip(0), CPU)  # channels swapped
    assert "levels from the colour" in trial_verdict(torch.zeros_like(image), CPU)
    assert "not uint8 (3, 16, 16)" in trial_verdict(image[:, :8], CPU)
    assert "not a tensor" in trial_verdict(None, CPU)


def _stand_in_torchvision(monkeypatch, decode_jpeg) -> None:
    """A ``torchvision.io`` whose ``decode_jpeg`` is ``decode_jpeg``: torchvision is not
    installed here, and its CUDA decode needs a GPU."""
    io = types.ModuleType("torchvision.io")
    io.__spec__ = importlib.machinery.ModuleSpec("torchvision.io", None)
    io.ImageReadMode = types.SimpleNamespace(RGB="RGB")  # type: ignore[attr-defined]
    io.decode_jpeg = decode_jpeg  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torchvision", types.SimpleNamespace(io=io))
    monkeypatch.setitem(sys.modules, "torchvision.io", io)
    monkeypatch.setitem(sys.modules, "nvidia.nvimgcodec", None)  # not installed, whatever this machine has


@pytest.mark.parametrize("outcome", ["right", "grey", "raises"])
def test_the_real_trial_decodes_through_the_backends_own_call(monkeypatch, outcome):
    """find_backend's own trial (GpuDecoder.decode_one on the trial JPEG, then its
    verdict), with a stand-in backend that decodes on the CPU: the device asked for."""
    calls = []

    def decode_jpeg(tensors, mode, device):
        calls.append((len(tensors), mode, device))
        if outcome == "raises":
            raise RuntimeError("Failed to initialize nvjpeg with hardware backend")
        images = [torch.from_numpy(np.ascontiguousarray(decode(t.numpy().tobytes()).transpose(2, 0, 1)))
                  for t in tensors]
        return [i if outcome == "right" else torch.full_like(i, 128) for i in images]

    _with_cuda(monkeypatch)
    _stand_in_torchvision(monkeypatch, decode_jpeg)
    name, reason = find_backend("auto", "cpu")
    assert calls == [(1, "RGB", CPU)]
    if outcome == "right":
        assert (name, reason) == ("torchvision", "torchvision on Stand-in GPU; nvimgcodec: not installed")
        decoder = gpu.GpuDecoder("cpu")
        assert decoder.backend == "torchvision" and calls == [(1, "RGB", CPU)]  # tried once per process
        assert decoder.failures.total == 0
    else:
        why = "levels from the colour" if outcome == "grey" else "Failed to initialize nvjpeg with hardware backend"
        assert name is None and why in reason and "nvimgcodec: not installed" in reason
        with pytest.raises(gpu.GpuDecodeUnavailable, match="no GPU decoder decodes here"):
            gpu.GpuDecoder("cpu")
