"""What this machine offers the GPUDirect-style client, and why: ``turbofeed gds-status``.

Every probe returns a value and a reason and never raises: a machine without CUDA, a
CPU-only PyTorch build or a broken KvikIO install is a report, not a crash.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib
import os
from dataclasses import asdict, dataclass, field
from typing import Any

from .config import GDSConfig, LoadedConfig, load_config
from .errors import GDSConfigError
from .files import kvikio_module

_NVIDIA_FS = ("/proc/driver/nvidia-fs", "/sys/module/nvidia_fs")
_CUFILE_NAMES = ("libcufile.so.0", "libcufile.so.1", "libcufile.so")


@dataclass
class Status:
    """The probe results; ``as_dict()`` is JSON-safe. Each ``*_why`` says why, in words."""

    cuda: bool = False
    cuda_why: str = ""
    devices: list[dict[str, Any]] = field(default_factory=list)
    p2p: list[dict[str, Any]] = field(default_factory=list)
    p2p_why: str = ""
    kvikio: bool = False
    kvikio_version: str | None = None
    kvikio_why: str = ""
    compat_mode: str | None = None  # what KvikIO was asked for: ON / OFF / AUTO
    compat_effective: bool | None = None  # True: KvikIO uses POSIX, not cuFile
    compat_why: str = ""
    libcufile: str | None = None
    nvidia_fs: bool = False
    run_udev_readable: bool = False
    file_path: str = ""
    object_path: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    config_sources: dict[str, str] = field(default_factory=dict)
    config_file: str | None = None
    config_error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def probe(config_path: str | None = None, env: dict[str, str] | None = None) -> Status:
    """Look at CUDA, KvikIO, cuFile and the effective config (never raises).

    Args:
        config_path: a GDS YAML file (default ``$TURBOFEED_GDS_CONFIG``).
        env: the environment (default ``os.environ``).
    """
    env = dict(os.environ if env is None else env)
    s = Status()
    try:
        loaded = load_config(config_path, env=env)
    except GDSConfigError as exc:
        s.config_error = str(exc)
        loaded = LoadedConfig(GDSConfig(), {}, config_path or env.get("TURBOFEED_GDS_CONFIG"))
    s.config = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(loaded.config).items()}
    s.config_sources = dict(loaded.sources)
    s.config_file = loaded.path
    _probe_cuda(s, env)
    _probe_p2p(s, loaded.config)
    _probe_kvikio(s, env)
    _choose_paths(s, loaded.config)
    return s


def _probe_cuda(s: Status, env: dict[str, str]) -> None:
    try:
        import torch
    except ImportError:
        s.cuda_why = "no CUDA: PyTorch is not installed (GPU buffers need torch with CUDA)"
        return
    if torch.version.cuda is None:
        s.cuda_why = f"no CUDA: PyTorch {torch.__version__} is a CPU-only build"
        return
    try:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception as exc:  # noqa: BLE001 - a broken driver is reported, not raised
        s.cuda_why = f"no CUDA: the driver failed to initialise ({exc})"
        return
    if count == 0:
        visible = env.get("CUDA_VISIBLE_DEVICES")
        hint = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
        s.cuda_why = f"no CUDA: PyTorch {torch.__version__} (CUDA {torch.version.cuda}) sees no device{hint}"
        return
    s.cuda = True
    s.cuda_why = f"PyTorch {torch.__version__}, CUDA {torch.version.cuda}, {count} device(s)"
    for i in range(count):
        p = torch.cuda.get_device_properties(i)
        s.devices.append({"index": i, "name": p.name, "memory_gib": round(p.total_memory / 2**30, 1),
                          "capability": f"{p.major}.{p.minor}"})


def _probe_p2p(s: Status, config: GDSConfig) -> None:
    if not s.cuda:
        s.p2p_why = "n/a: no CUDA"
        return
    ids = list(config.device_ids) or [d["index"] for d in s.devices]
    if len(ids) < 2:
        s.p2p_why = f"n/a: {len(ids)} device in use (P2P needs two)"
        return
    import torch

    for a in ids:
        for b in ids:
            if a < b:
                try:
                    ab, ba = torch.cuda.can_device_access_peer(a, b), torch.cuda.can_device_access_peer(b, a)
                except Exception as exc:  # noqa: BLE001 - e.g. a device number not present
                    s.p2p.append({"pair": [a, b], "ok": False, "why": str(exc)})
                    continue
                s.p2p.append({"pair": [a, b], "ok": ab and ba,
                              "why": "peer access both ways" if ab and ba else
                              "no peer access (different PCIe root / no NVLink, or disabled): copies go by host"})
    s.p2p_why = "enable_p2p is on" if config.enable_p2p else "enable_p2p is off (reported only)"


def _probe_kvikio(s: Status, env: dict[str, str]) -> None:
    s.libcufile = _find_libcufile()
    s.nvidia_fs = any(os.path.exists(p) for p in _NVIDIA_FS)
    s.run_udev_readable = os.access("/run/udev", os.R_OK | os.X_OK)
    kvikio, why = kvikio_module()
    if kvikio is None:
        s.kvikio_why = f"not importable ({why}): pip install 'turbofeed[gds]'"
        s.compat_why = "n/a: KvikIO is not installed"
        return
    s.kvikio = True
    s.kvikio_version = str(getattr(kvikio, "__version__", "?"))
    s.kvikio_why = f"KvikIO {s.kvikio_version} imported"
    try:  # KvikIO 26.x does not import its defaults submodule in `import kvikio`
        defaults: Any = importlib.import_module(f"{kvikio.__name__}.defaults")
    except ImportError:
        defaults = getattr(kvikio, "defaults", None)
    try:
        # KvikIO >= 25.02: defaults.get("compat_mode") -> CompatMode and
        # defaults.is_compat_mode_preferred() -> what AUTO resolved to. Older: a bool or
        # a CompatMode from defaults.compat_mode().
        requested = defaults.get("compat_mode") if hasattr(defaults, "get") else defaults.compat_mode()
        s.compat_mode = _mode_name(requested)
        if hasattr(defaults, "is_compat_mode_preferred"):
            s.compat_effective = bool(defaults.is_compat_mode_preferred())
        else:
            s.compat_effective = s.compat_mode == "ON"
    except Exception as exc:  # noqa: BLE001 - an API we do not know: say so
        s.compat_why = f"could not ask KvikIO for its compat mode: {type(exc).__name__}: {exc}"
        return
    asked = env.get("KVIKIO_COMPAT_MODE")
    reasons = []
    if asked is not None:
        reasons.append(f"KVIKIO_COMPAT_MODE={asked}")
    if s.compat_effective:
        if s.libcufile is None:
            reasons.append("libcufile not found")
        if not s.run_udev_readable:
            reasons.append("/run/udev not readable (a container without --volume /run/udev:/run/udev:ro)")
        if not reasons:
            reasons.append("KvikIO's own checks chose POSIX")
    s.compat_why = ("ON: KvikIO reads with POSIX + bounce buffers, not cuFile" if s.compat_effective
                    else "OFF: KvikIO uses cuFile") + (f" ({'; '.join(reasons)})" if reasons else "")


def _mode_name(value: Any) -> str:
    if isinstance(value, bool):
        return "ON" if value else "OFF"
    name = getattr(value, "name", None) or str(value)
    return name.rsplit(".", 1)[-1].upper()


def _find_libcufile() -> str | None:
    """A loadable libcufile: the system's, or a wheel's (``nvidia-cufile-cu12`` puts it in
    ``nvidia/cufile/lib``, CUDA 13's ``nvidia-cufile`` in ``nvidia/cu13/lib``)."""
    candidates = list(_CUFILE_NAMES)
    found = ctypes.util.find_library("cufile")
    if found:
        candidates.insert(0, found)
    try:
        import nvidia  # the namespace package of NVIDIA's wheels (KvikIO depends on one of them)

        for folder in list(getattr(nvidia, "__path__", [])):
            for sub in ("cufile", "cu13", "cu12"):
                for name in _CUFILE_NAMES:
                    candidates.append(os.path.join(folder, sub, "lib", name))
    except ImportError:
        pass
    for name in candidates:
        try:
            ctypes.CDLL(name)
            return name
        except OSError:
            continue
    return None


def _choose_paths(s: Status, config: GDSConfig) -> None:
    host = "host buffers: os.pread/os.pwrite straight into/out of them"
    if not s.cuda:
        s.file_path = f"{host}; GPU buffers unavailable ({s.cuda_why})"
        s.object_path = "host buffers: ranged GETs straight into them; GPU buffers unavailable"
        return
    if not config.enabled:
        gpu = "GPU buffers: pinned staging + os.pread/os.pwrite (enabled=false turns cuFile off)"
    elif not s.kvikio:
        gpu = "GPU buffers: pinned staging + os.pread/os.pwrite (KvikIO not installed)"
    elif s.compat_effective:
        gpu = "GPU buffers: KvikIO compat mode (POSIX + KvikIO bounce buffers; no GDS)"
    else:
        gpu = "GPU buffers: cuFile via KvikIO" + (
            " (GPUDirect Storage: nvidia-fs loaded)" if s.nvidia_fs else
            " (nvidia-fs not loaded: cuFile runs GDS through kernel P2PDMA if supported, else its own compat mode)")
    s.file_path = f"{gpu}; {host}"
    s.object_path = ("GPU buffers: ranged GETs into pinned staging, then copies to the GPU "
                     "(object storage has no GPUDirect path); host buffers: ranged GETs straight into them")


def format_status(s: Status) -> str:
    """The report as aligned text lines."""
    yes = {True: "yes", False: "no"}
    lines = [f"{'CUDA':<18}{s.cuda_why}"]
    for d in s.devices:
        lines.append(f"{'':<18}cuda:{d['index']} {d['name']} ({d['memory_gib']} GiB, sm {d['capability']})")
    lines.append(f"{'P2P':<18}{s.p2p_why}")
    for p in s.p2p:
        a, b = p["pair"]
        lines.append(f"{'':<18}cuda:{a} <-> cuda:{b}: {yes[p['ok']]} ({p['why']})")
    lines.append(f"{'KvikIO':<18}{s.kvikio_why}")
    lines.append(f"{'cuFile library':<18}{s.libcufile or 'not found'}")
    lines.append(f"{'nvidia-fs driver':<18}{'loaded' if s.nvidia_fs else 'not loaded'}")
    lines.append(f"{'KvikIO compat':<18}{s.compat_why}")
    lines.append(f"{'local files':<18}{s.file_path}")
    lines.append(f"{'S3 objects':<18}{s.object_path}")
    lines.append(f"config (file: {s.config_file or 'none'}; then TURBOFEED_GDS_* variables):")
    if s.config_error:
        lines.append(f"  INVALID: {s.config_error}")
    for key, value in s.config.items():
        shown = _size(value) if key in ("buffer_pool_size", "max_transfer_size") else value
        if key == "device_ids" and not value:
            shown = "all visible"
        lines.append(f"  {key:<18}{str(shown):<14}{s.config_sources.get(key, 'default')}")
    return "\n".join(lines)


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


__all__ = ["Status", "format_status", "probe"]
