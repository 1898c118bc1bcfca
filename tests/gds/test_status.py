"""``turbofeed gds-status`` as a user runs it: what is available, why, and where each
config value came from; on a machine without CUDA it says so and exits 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from turbofeed.cli import main
from turbofeed.gds import format_status, probe


def _cuda() -> bool:
    from turbofeed.torch.device import gpu_available

    return gpu_available()


def _run(*args: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("TURBOFEED_GDS_")}
    full.update(env)
    return subprocess.run([sys.executable, "-m", "turbofeed.cli", "gds-status", *args], capture_output=True,
                          text=True, timeout=120, env=full)


def test_command_reports_hardware_and_config(tmp_path):
    pytest.importorskip("yaml")
    cfg = tmp_path / "gds.yaml"
    cfg.write_text("gds:\n  buffer_pool_size: 64M\n  queue_depth: 4\n")
    done = _run("--config", str(cfg), TURBOFEED_GDS_QUEUE_DEPTH="6")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for label in ("CUDA", "P2P", "KvikIO", "cuFile library", "nvidia-fs driver", "KvikIO compat",
                  "local files", "S3 objects"):
        assert any(line.startswith(label) for line in out.splitlines()), label
    if not _cuda():
        assert "no CUDA" in out and "GPU buffers unavailable" in out
    else:
        assert "cuda:0" in out
    assert f"config (file: {cfg}" in out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert "64 MiB" in lines["buffer_pool_size"] and f"file {cfg}" in lines["buffer_pool_size"]
    assert "6" in lines["queue_depth"] and "env TURBOFEED_GDS_QUEUE_DEPTH" in lines["queue_depth"]
    assert "16 MiB" in lines["max_transfer_size"] and lines["max_transfer_size"].rstrip().endswith("default")
    assert "all visible" in lines["device_ids"]


def test_json_and_reasons(capsys, monkeypatch):
    monkeypatch.setenv("TURBOFEED_GDS_ENABLED", "false")
    assert main(["gds-status", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["config"]["enabled"] is False and report["config_sources"]["enabled"] == "env TURBOFEED_GDS_ENABLED"
    assert report["cuda_why"] and report["kvikio_why"] and report["file_path"] and report["object_path"]
    if not report["kvikio"]:
        assert "not importable" in report["kvikio_why"] and "turbofeed[gds]" in report["kvikio_why"]
        assert report["compat_why"] == "n/a: KvikIO is not installed"
    if not report["cuda"]:
        assert report["cuda_why"].startswith("no CUDA") and report["devices"] == [] and report["p2p"] == []
        assert report["p2p_why"] == "n/a: no CUDA"


def test_invalid_config_is_reported_not_crashed(capsys, monkeypatch):
    monkeypatch.setenv("TURBOFEED_GDS_QUEUE_DEPTH", "zero")
    assert main(["gds-status"]) == 1
    out = capsys.readouterr().out
    assert "INVALID: gds config: queue_depth: must be an integer >= 1, got 'zero' (env TURBOFEED_GDS_QUEUE_DEPTH)" in out
    assert "CUDA" in out  # the hardware part is still there


def test_probe_is_a_plain_function():
    status = probe(env={})
    text = format_status(status)
    assert text.splitlines()[0].startswith("CUDA")
    assert status.as_dict()["config_sources"]["queue_depth"] == "default"
