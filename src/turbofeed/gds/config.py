"""Settings of the GPUDirect-style client: a dataclass, a YAML file, ``TURBOFEED_GDS_*`` variables.

Precedence, lowest first (each layer replaces only the keys it names):

==========  ==========================================================================
layer       where
==========  ==========================================================================
default     the field defaults of :class:`GDSConfig`
file        a YAML file: ``load_config(path)``, else ``$TURBOFEED_GDS_CONFIG``
env         ``TURBOFEED_GDS_<KEY>`` (``TURBOFEED_GDS_MAX_TRANSFER_SIZE=16M``)
argument    ``load_config(..., overrides={"queue_depth": 4})``
==========  ==========================================================================

The YAML file is a mapping of the keys below, at the top level or under ``gds:``::

    gds:
      buffer_pool_size: 512M
      max_transfer_size: 16M
      queue_depth: 8
      device_ids: [0, 1]
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .. import units
from .errors import GDSConfigError

ENV_PREFIX = "TURBOFEED_GDS_"
ENV_FILE = "TURBOFEED_GDS_CONFIG"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class GDSConfig:
    """How the client moves bytes. Sizes are bytes (``"16M"`` style in files and variables).

    Args:
        enabled: use cuFile (GPUDirect Storage, through KvikIO) for local files and GPU
            buffers when KvikIO is installed. False always takes the pinned-staging path;
            handy to compare the two or to sidestep a misbehaving driver.
        buffer_pool_size: bytes of host staging memory (pinned when CUDA is present) the
            client may hold; it is cut into buffers of ``max_transfer_size``, so
            ``buffer_pool_size // max_transfer_size`` transfers can be staged at once
            (at most ``queue_depth``). Allocated on first use, kept until ``close()``.
        max_transfer_size: bytes per transfer: one ranged GET, one ``pread``/``pwrite``,
            one staging copy, one KvikIO task.
        queue_depth: transfers in flight per client (ranged GETs, multipart parts, file
            chunks), and async operations running at once.
        enable_async: ``async_*`` methods run on the client's threads and return at once.
            False runs them in the caller's thread and returns a finished future
            (deterministic order, simpler stack traces when debugging).
        device_ids: CUDA devices the client may touch; a buffer on another device is an
            error. Empty: every visible device.
        enable_p2p: expect peer-to-peer access between every pair of ``device_ids``; the
            client warns once at start for a pair without it, and ``turbofeed gds-status``
            checks each pair. Storage transfers never need P2P; copies between devices
            that you make with torch use it when the pair supports it.

    Example of how pool, transfer size and depth interact: ``buffer_pool_size=64M``,
    ``max_transfer_size=16M``, ``queue_depth=8`` reads a 1 GiB object into a GPU
    buffer as 64 ranged GETs of 16 MiB, 8 in flight, but at most 4 staged in pinned
    memory at once: the other 4 wait for a staging buffer.
    """

    enabled: bool = True
    buffer_pool_size: int = 256 << 20
    max_transfer_size: int = 16 << 20
    queue_depth: int = 8
    enable_async: bool = True
    device_ids: tuple[int, ...] = ()
    enable_p2p: bool = False

    def __post_init__(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, _PARSERS[f.name](getattr(self, f.name), f.name, None))
        _check_pool(self.buffer_pool_size, self.max_transfer_size, {})

    @property
    def staging_buffers(self) -> int:
        """Staging buffers the pool may hold: ``min(queue_depth, pool // transfer)``."""
        return max(1, min(self.queue_depth, self.buffer_pool_size // self.max_transfer_size))


@dataclass(frozen=True)
class LoadedConfig:
    """A :class:`GDSConfig` and where each value came from.

    Attributes:
        config: the effective settings.
        sources: key -> ``"default"``, ``"file /etc/gds.yaml"``,
            ``"env TURBOFEED_GDS_QUEUE_DEPTH"`` or ``"argument"``.
        path: the YAML file read, or None.
    """

    config: GDSConfig
    sources: dict[str, str] = field(default_factory=dict)
    path: str | None = None


def load_config(path: str | os.PathLike | None = None, *, env: Mapping[str, str] | None = None,
                overrides: Mapping[str, Any] | None = None) -> LoadedConfig:
    """Build the effective config from defaults, a YAML file, the environment and overrides.

    Args:
        path: a YAML file; default ``$TURBOFEED_GDS_CONFIG``; no file when neither is set.
        env: the environment to read (default ``os.environ``).
        overrides: values that win over everything else.

    Raises:
        GDSConfigError: an unknown key, a bad value (the message names the key and its
            source), or a file that cannot be read or is not a mapping.
    """
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    sources = {f.name: "default" for f in fields(GDSConfig)}
    file_path = os.fspath(path) if path is not None else (env.get(ENV_FILE) or None)
    if file_path is not None:
        source = f"file {file_path}"
        named_by = "argument" if path is not None else f"env {ENV_FILE}"
        for key, raw in _read_yaml(file_path, named_by).items():
            values[key] = _parse(key, raw, source)
            sources[key] = source
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX) or name == ENV_FILE:
            continue
        key = name[len(ENV_PREFIX):].lower()
        source = f"env {name}"
        values[key] = _parse(key, env[name], source)
        sources[key] = source
    for key, raw in (overrides or {}).items():
        values[key] = _parse(key, raw, "argument")
        sources[key] = "argument"
    defaults = GDSConfig()
    _check_pool(values.get("buffer_pool_size", defaults.buffer_pool_size),
                values.get("max_transfer_size", defaults.max_transfer_size), sources)
    return LoadedConfig(replace(defaults, **values), sources, file_path)


def _read_yaml(path: str, named_by: str) -> dict[str, Any]:
    from ..extras import require

    yaml = require("yaml", "gds", f"GDS config file {path}")
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except OSError as exc:
        raise GDSConfigError("file", f"cannot read {path}: {exc.strerror or exc}", named_by) from exc
    except yaml.YAMLError as exc:
        raise GDSConfigError("file", f"{path} is not valid YAML: {' '.join(str(exc).split())}",
                             named_by) from exc
    if doc is None:
        return {}
    if isinstance(doc, dict) and set(doc) == {"gds"}:
        doc = doc["gds"] or {}
    if not isinstance(doc, dict):
        raise GDSConfigError("file", f"{path} must hold a mapping of settings, got {type(doc).__name__}",
                             named_by)
    return {str(k): v for k, v in doc.items()}


def _parse(key: str, raw: Any, source: str | None) -> Any:
    parser = _PARSERS.get(key)
    if parser is None:
        near = difflib.get_close_matches(key, list(_PARSERS), n=1)
        hint = f"; did you mean {near[0]!r}?" if near else f"; known keys: {', '.join(_PARSERS)}"
        raise GDSConfigError(key, f"unknown setting{hint}", source)
    return parser(raw, key, source)


def _bool(raw: Any, key: str, source: str | None) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise GDSConfigError(key, f"must be true or false (1/0, yes/no, on/off), got {raw!r}", source)


def parse_size(raw: Any, key: str = "size", source: str | None = None) -> int:
    """``16777216``, ``"16M"``, ``"16MiB"``, ``"16MB"``, ``"1.5G"`` -> bytes (binary units;
    see :func:`turbofeed.units.parse_size`).

    Raises:
        GDSConfigError: not a size, or not > 0.
    """
    try:
        return units.parse_size(raw, key, source)
    except units.SizeError as exc:
        raise GDSConfigError(key, exc.reason, source) from None


def _positive_int(raw: Any, key: str, source: str | None) -> int:
    try:
        value = int(str(raw).strip()) if not isinstance(raw, bool) else None
    except ValueError:
        value = None
    if value is None or value < 1:
        raise GDSConfigError(key, f"must be an integer >= 1, got {raw!r}", source)
    return value


def _device_ids(raw: Any, key: str, source: str | None) -> tuple[int, ...]:
    if raw is None:
        return ()
    if isinstance(raw, str):
        text = raw.strip().lower()
        items: list[Any] = [] if text in ("", "all") else [p for p in text.replace(" ", "").split(",")]
    elif isinstance(raw, int) and not isinstance(raw, bool):
        items = [raw]
    elif isinstance(raw, (list, tuple)):
        items = list(raw)
    else:
        raise GDSConfigError(key, f"must be a list of device numbers like [0, 1] or '0,1', got {raw!r}", source)
    out: list[int] = []
    for item in items:
        try:
            number = int(item) if not isinstance(item, bool) else -1
        except (TypeError, ValueError):
            number = -1
        if number < 0 or str(item).strip() != str(number):
            raise GDSConfigError(key, f"device numbers must be integers >= 0, got {item!r} in {raw!r}", source)
        if number in out:
            raise GDSConfigError(key, f"device {number} is listed twice in {raw!r}", source)
        out.append(number)
    return tuple(out)


_PARSERS: dict[str, Callable[[Any, str, str | None], Any]] = {
    "enabled": _bool,
    "buffer_pool_size": parse_size,
    "max_transfer_size": parse_size,
    "queue_depth": _positive_int,
    "enable_async": _bool,
    "device_ids": _device_ids,
    "enable_p2p": _bool,
}


def _check_pool(pool: int, transfer: int, sources: Mapping[str, str]) -> None:
    """The pool must hold at least one transfer, or nothing could ever be staged."""
    if pool < transfer:
        raise GDSConfigError(
            "buffer_pool_size",
            f"{pool} bytes cannot hold one transfer of max_transfer_size {transfer} bytes"
            + (f" ({sources['max_transfer_size']})" if "max_transfer_size" in sources else ""),
            sources.get("buffer_pool_size"))


__all__ = ["ENV_FILE", "ENV_PREFIX", "GDSConfig", "LoadedConfig", "load_config", "parse_size"]
