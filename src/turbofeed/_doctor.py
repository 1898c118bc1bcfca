"""``turbofeed doctor``: which fast paths are on here, why not, and the command that fixes each.

:func:`collect` asks the modules that own each path (``decode.native``, ``decode.gpu``,
``gds.status``) rather than guessing, and never raises: a broken install is a line of the
report. :func:`render` prints it as one aligned line per capability.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata
from typing import Any

# PyPI's Linux torch wheel is the CUDA build (several GB with its nvidia-* wheels): right
# where a GPU is; elsewhere the CPU-only build comes from PyTorch's own CPU wheel index.
TORCH_GPU_FIX = ("pip install torch (from PyPI: the CUDA build; another CUDA version: "
                 "https://pytorch.org/get-started/locally/)")
TORCH_CPU_FIX = ("pip install torch --index-url https://download.pytorch.org/whl/cpu (the CPU-only build, "
                 "no NVIDIA GPU here; PyPI's torch is the multi-GB CUDA build)")
CUDA_TORCH_FIX = ("install a CUDA build of PyTorch: the pip command for your CUDA version is at "
                  "https://pytorch.org/get-started/locally/")
GPU_BACKEND_FIX = ("pip install 'nvidia-nvimgcodec-cu13[nvjpeg]' (CUDA 12: -cu12; or torchvision built for "
                   "your torch: pip install torchvision)")
BROKEN_BACKEND_FIX = ("reinstall the backend for this torch: pip install --force-reinstall torchvision "
                      "(the build for your torch version: https://pytorch.org/get-started/locally/)")
GDS_FIX = "pip install 'turbofeed[gds]'"
S3_FIX = "pip install 'turbofeed[s3]'"
_NVIDIA_GPUS = "/proc/driver/nvidia/gpus"  # the driver's folder per GPU
_GPU_MODULES = {"nvimgcodec": "nvidia.nvimgcodec", "torchvision": "torchvision.io"}


def _entry(on: bool, why: str, fix: str | None = None) -> dict[str, Any]:
    return {"on": bool(on), "why": why, "fix": None if on else fix}


def _drop_fix(why: str) -> str:
    """A probe's reason without the install hint it appends (the report has a fix column)."""
    for hint in (" (pip install", ": pip install"):
        if hint in why:
            return why[:why.index(hint)]
    return why


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"


def _native() -> dict[str, Any]:
    from .decode import native

    return _entry(*native.status())


def _threads() -> dict[str, Any]:
    from .base.threads import choose_threads

    return _entry(True, choose_threads().why)


def _nvidia_gpu() -> bool:
    """Whether an NVIDIA GPU is here without asking torch: the driver's ``/proc`` entry or
    ``nvidia-smi`` listing one (``/proc/driver/nvidia`` is missing in some containers)."""
    if os.path.isdir(_NVIDIA_GPUS) and os.listdir(_NVIDIA_GPUS):
        return True
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0 and "GPU" in done.stdout


def torch_fix(gpu: bool | None = None) -> str:
    """The command that installs the PyTorch build for this machine: PyPI's CUDA build
    where an NVIDIA GPU is (``gpu``; None: look), the CPU-only build from PyTorch's CPU
    wheel index elsewhere."""
    return TORCH_GPU_FIX if (_nvidia_gpu() if gpu is None else gpu) else TORCH_CPU_FIX


def _torch() -> tuple[dict[str, Any], Any]:
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - a broken install is "off", with its error
        return _entry(False, f"not installed ({type(exc).__name__}: {exc}); turbofeed.DataLoader needs it",
                      torch_fix()), None
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only build"
    return _entry(True, f"PyTorch {torch.__version__} ({build})"), torch


def _cuda(status: Any, torch: Any) -> dict[str, Any]:
    if status.cuda:
        names = ", ".join(sorted({d["name"] for d in status.devices}))
        return _entry(True, f"{status.cuda_why}: {names}")
    if torch is None:
        fix = TORCH_GPU_FIX  # CUDA needs torch's CUDA build, whatever this machine has
    elif torch.version.cuda is None:
        fix = CUDA_TORCH_FIX
    else:
        fix = "check that nvidia-smi lists a GPU and CUDA_VISIBLE_DEVICES allows it (containers: --gpus all)"
    return _entry(False, status.cuda_why, fix)


def _gpu_decoder(cuda: dict[str, Any], torch: Any) -> dict[str, Any]:
    from .decode.gpu import find_backend

    name, reason = find_backend("auto")
    found = {b: _import_error(module) for b, module in _GPU_MODULES.items() if _has_module(module)}
    installed = [b for b, error in found.items() if error is None]
    broken = [f"{b} is installed but fails to import ({error})" for b, error in found.items() if error]
    backends = "; ".join([f"backends installed: {', '.join(installed) or 'none'}", *broken])
    if name is not None:
        return _entry(True, f"{reason} ({backends}); used with gpu_decode=True")
    if torch is None:
        fix = TORCH_GPU_FIX
    elif broken:
        fix = BROKEN_BACKEND_FIX if cuda["on"] else f"{cuda['fix']}; and {BROKEN_BACKEND_FIX}"
    elif not cuda["on"]:
        fix = cuda["fix"] if installed else f"{cuda['fix']}; then {GPU_BACKEND_FIX}"
    else:
        fix = GPU_BACKEND_FIX
    return _entry(False, f"{_drop_fix(reason)}; {backends}", fix)


def _has_module(module: str) -> bool:
    """Whether ``module`` is installed: found, or its package is there but fails to
    import (:func:`_import_error` says how)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that is missing
        return False
    except Exception:  # noqa: BLE001 - the parent package raised while importing: installed, broken
        return True


def _import_error(module: str) -> str | None:
    """Why an installed ``module`` fails to import (``RuntimeError: ...``), or None."""
    try:
        importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - a torchvision built for another torch raises anything
        return f"{type(exc).__name__}: {exc}"
    return None


def _kvikio(status: Any) -> dict[str, Any]:
    return _entry(status.kvikio, _drop_fix(status.kvikio_why), GDS_FIX)


def _cufile(status: Any, cuda: dict[str, Any]) -> dict[str, Any]:
    driver = f"nvidia-fs {'loaded: GPUDirect Storage' if status.nvidia_fs else 'not loaded'}"
    library = f"libcufile {status.libcufile or 'not found'}"
    if not status.kvikio:
        return _entry(False, "n/a: KvikIO is not installed (turbofeed reaches cuFile through it)", GDS_FIX)
    if not cuda["on"]:
        return _entry(False, "n/a: no CUDA", cuda["fix"])
    if status.compat_effective is False:
        return _entry(True, f"{status.compat_why}; {library}; {driver}")
    if status.libcufile is None:
        fix = "pip install nvidia-cufile-cu12 (or install CUDA's GDS package, libcufile)"
    elif not status.run_udev_readable:
        fix = "run the container with --volume /run/udev:/run/udev:ro"
    elif status.compat_mode == "ON":
        fix = "unset KVIKIO_COMPAT_MODE (or set it to AUTO)"
    else:
        fix = "turbofeed gds-status shows the details"
    return _entry(False, f"{status.compat_why or 'KvikIO compat mode'}; {library}; {driver}", fix)


def _importable(module: str, does: str, without: str) -> dict[str, Any]:
    try:
        importlib.import_module(module)
    except Exception as exc:  # noqa: BLE001 - a broken install is "off", with its error
        return _entry(False, f"not installed ({type(exc).__name__}: {exc}); {without}", S3_FIX)
    return _entry(True, f"{module} {_version(module)}: {does}")


def _gds_status() -> tuple[Any, dict[str, Any] | None]:
    """``(gds.status.Status, None)``, or ``(None, an "off" entry)`` if the probe raised."""
    try:
        from .gds.status import probe

        return probe(), None
    except Exception as exc:  # noqa: BLE001 - probe() should not raise; if it does, say so
        return None, _entry(False, f"the GDS probe failed: {type(exc).__name__}: {exc}",
                            "turbofeed gds-status shows the details")


def _guard(name: str, probe: Any, *args: Any) -> Any:
    """``probe(*args)``, or an "off" entry naming the error: the report never raises."""
    try:
        return probe(*args)
    except Exception as exc:  # noqa: BLE001 - a doctor must finish its report
        return _entry(False, f"the {name} probe failed: {type(exc).__name__}: {exc}",
                      "a fault in turbofeed's own check (the project has no public tracker yet): "
                      "keep the line above and `turbofeed doctor --json` for whoever provides your turbofeed")


def collect() -> dict[str, Any]:
    """What this machine offers turbofeed, JSON-safe.

    Returns:
        ``{"version": str, "python": str, <capability>: {"on": bool, "why": str,
        "fix": str | None}, ...}`` for ``native_decoder``, ``threads`` (what
        ``num_workers=None`` starts, and why), ``gpu_decoder``, ``kvikio``,
        ``cufile``, ``obstore``, ``boto3``, ``torch`` and ``cuda``. ``fix`` is the command
        (or step) that turns an "off" capability on; None when it is on.
    """
    from . import __version__

    report: dict[str, Any] = {"version": __version__,
                              "python": f"{platform.python_version()} ({sys.executable})"}
    report["native_decoder"] = _guard("native decoder", _native)
    report["threads"] = _guard("threads", _threads)  # what num_workers=None starts here
    torch_entry, torch = _torch()
    status, failed = _gds_status()
    cuda = _guard("CUDA", _cuda, status, torch) if status is not None else failed
    report["gpu_decoder"] = _guard("GPU decoder", _gpu_decoder, cuda, torch)
    report["kvikio"] = _guard("KvikIO", _kvikio, status) if status is not None else failed
    report["cufile"] = _guard("cuFile", _cufile, status, cuda) if status is not None else failed
    report["obstore"] = _guard("obstore", _importable, "obstore", "S3 reads in Rust with the GIL released",
                               "s3:// reads go through boto3, slower")
    report["boto3"] = _guard("boto3", _importable, "boto3", "AWS profiles and SSO, multipart uploads",
                             "no AWS profiles/SSO or uploads")
    report["torch"] = torch_entry
    report["cuda"] = cuda
    return report


def render(report: dict[str, Any]) -> str:
    """The report as text: a header line, then ``name  ON|off  why  fix: ...`` per capability."""
    rows = [(name, entry) for name, entry in report.items() if isinstance(entry, dict) and "on" in entry]
    width = max(len(name) for name, _ in rows) + 2
    lines = [f"turbofeed {report.get('version', '?')}, Python {report.get('python', '?')}"]
    for name, entry in rows:
        line = f"{name:<{width}}{'ON' if entry['on'] else 'off':<5}{entry['why']}"
        if not entry["on"] and entry.get("fix"):
            line += f"  fix: {entry['fix']}"
        lines.append(line)
    return "\n".join(lines)


__all__ = ["collect", "render"]
