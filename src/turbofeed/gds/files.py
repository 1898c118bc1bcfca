"""Local files to and from host or GPU buffers, and atomic file writes.

Which path a transfer takes (``FileIO.method``):

- ``host``: the buffer is host memory; ``os.preadv``/``os.pwrite`` straight into/out of it.
- ``kvikio``: a GPU buffer, ``GDSConfig.enabled`` and KvikIO importable;
  ``CuFile.raw_read``/``raw_write``: cuFile DMA (GDS), or KvikIO's compat mode (POSIX
  plus its own bounce buffers) when KvikIO decided GDS is not usable.
- ``staged``: a GPU buffer otherwise; ``pread`` into a pinned staging buffer, then an
  async copy to the GPU (writes: the reverse, then ``pwrite``).

Every method moves ``max_transfer_size`` bytes per chunk, ``queue_depth`` chunks at once.
A write goes to ``.NAME.<pid>.<random>.tmp`` in the target's folder, is fsynced, then
renamed over ``NAME`` (and the folder fsynced): readers see the old file or the whole
new one, never a part; on any failure the temporary file is removed.
"""

from __future__ import annotations

import os
import secrets
from typing import Any

from .buffers import StagingPool
from .config import GDSConfig
from .errors import BufferTooSmallError, GDSError
from .memory import DeviceBuffer, HostBuffer
from .transfers import Transfers

_KVIKIO: dict[str, Any] = {}


def kvikio_module() -> tuple[Any, str | None]:
    """``(kvikio, None)`` or ``(None, why it cannot be imported)``; imported once."""
    if "module" not in _KVIKIO:
        try:
            import kvikio

            _KVIKIO["module"], _KVIKIO["why"] = kvikio, None
        except Exception as exc:  # noqa: BLE001 - a broken install (missing libcudart) is "absent"
            _KVIKIO["module"], _KVIKIO["why"] = None, f"{type(exc).__name__}: {exc}"
    return _KVIKIO["module"], _KVIKIO["why"]


class FileIO:
    """Reads and atomic writes of local files for one client.

    Args:
        config: chunk size, depth, whether cuFile may be used.
        pool: staging buffers for GPU transfers that do not go through KvikIO.
        transfers: the client's chunk threads and in-flight bound.
    """

    def __init__(self, config: GDSConfig, pool: StagingPool, transfers: Transfers) -> None:
        self.config = config
        self._pool = pool
        self._transfers = transfers

    def method(self, buf: HostBuffer | DeviceBuffer) -> str:
        """``"host"``, ``"kvikio"`` or ``"staged"`` (module table)."""
        if not buf.on_device:
            return "host"
        if self.config.enabled and kvikio_module()[0] is not None:
            return "kvikio"
        return "staged"

    # ----- reads ----------------------------------------------------------------------
    def read(self, path: str, buf: HostBuffer | DeviceBuffer, offset: int = 0, size: int | None = None) -> int:
        """Read ``size`` bytes (default: to the end) from ``offset`` into the buffer's start.

        Returns:
            The number of bytes read.

        Raises:
            BufferTooSmallError: the range is longer than the buffer.
            GDSError: the range is outside the file, or the file shrank while read.
            OSError: the file cannot be opened.
        """
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            file_size = os.fstat(fd).st_size
            n = _range(path, file_size, offset, size)
            if n > buf.nbytes:
                raise BufferTooSmallError(path, n, buf.nbytes, buf.what)
            if n == 0:
                return 0
            method = self.method(buf)
            if method == "kvikio" and buf.on_device:
                self._kvikio(path, "r", buf, offset, n)
            else:
                def chunk(pos: int, k: int) -> None:
                    if not buf.on_device:  # method "host"
                        _pread_exact(fd, buf.view[pos:pos + k], offset + pos, path)
                        return
                    with self._pool.acquire() as staging:
                        _pread_exact(fd, staging.view[:k], offset + pos, path)
                        buf.upload(pos, staging.tensor, k)
                self._transfers.run(chunk, n, self.config.max_transfer_size)
            return n
        finally:
            os.close(fd)

    # ----- writes ---------------------------------------------------------------------
    def write(self, path: str, buf: HostBuffer | DeviceBuffer, size: int | None = None) -> int:
        """Replace ``path`` with the buffer's first ``size`` bytes (default: all), atomically.

        Returns:
            The number of bytes written.

        Raises:
            GDSError: ``size`` is larger than the buffer.
            OSError: the folder is not writable, the disk is full, ...; ``path`` is then
                unchanged and no temporary file is left.
        """
        n = buf.nbytes if size is None else size
        if n < 0 or n > buf.nbytes:
            raise GDSError(f"{path}: cannot write {n} bytes from a buffer of {buf.nbytes} ({buf.what})")
        folder, name = os.path.split(os.path.abspath(path))
        tmp = os.path.join(folder, f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
        done = False
        try:
            if n:
                method = self.method(buf)
                if method == "kvikio" and buf.on_device:
                    self._kvikio(tmp, "w", buf, 0, n)
                else:
                    def chunk(pos: int, k: int) -> None:
                        if not buf.on_device:  # method "host"
                            _pwrite_all(fd, buf.view[pos:pos + k], pos)
                            return
                        with self._pool.acquire() as staging:
                            buf.download(pos, staging.tensor, k)
                            _pwrite_all(fd, staging.view[:k], pos)
                    self._transfers.run(chunk, n, self.config.max_transfer_size)
            os.fsync(fd)  # the data is on disk before the name points at it
            os.close(fd)
            fd = -1
            os.replace(tmp, path)
            done = True
            _fsync_folder(folder)
            return n
        finally:
            if fd >= 0:
                os.close(fd)
            if not done:
                try:
                    os.unlink(tmp)
                except FileNotFoundError:
                    pass

    # ----- KvikIO ---------------------------------------------------------------------
    def _kvikio(self, path: str, flags: str, buf: DeviceBuffer, offset: int, n: int) -> None:
        """Chunks through one ``kvikio.CuFile``: ``raw_read``/``raw_write`` run cuFile (or
        KvikIO's POSIX compat path) in the calling thread, so our workers bound the depth
        instead of KvikIO's process-wide pool (one thread unless KVIKIO_NTHREADS is set)."""
        kvikio, _ = kvikio_module()
        buf.wait_ready()  # cuFile is not stream-ordered: the caller's kernels must be done
        with kvikio.CuFile(path, flags) as f:
            def chunk(pos: int, k: int) -> None:
                view = buf.cuda_view(pos, k)
                with buf.current_context():  # workers may have no CUDA context of their own
                    done = f.raw_read(view, k, offset + pos) if flags == "r" else f.raw_write(view, k, offset + pos)
                if done != k:
                    verb = "read" if flags == "r" else "wrote"
                    raise GDSError(f"{path}: cuFile {verb} {done} of {k} bytes at offset {offset + pos}")
            self._transfers.run(chunk, n, self.config.max_transfer_size)


def _range(path: str, file_size: int, offset: int, size: int | None) -> int:
    if offset < 0 or offset > file_size:
        raise GDSError(f"{path}: offset {offset} is outside the file ({file_size} bytes)")
    n = file_size - offset if size is None else size
    if n < 0 or offset + n > file_size:
        raise GDSError(f"{path}: bytes {offset}..{offset + n} asked for, but the file has {file_size}")
    return n


def _pread_exact(fd: int, out: memoryview, offset: int, path: str) -> None:
    done = 0
    while done < len(out):
        got = os.preadv(fd, [out[done:]], offset + done)
        if got == 0:
            raise GDSError(f"{path}: the file ended at byte {offset + done} while being read "
                           "(shortened by another process?)")
        done += got


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    done = 0
    while done < len(data):
        done += os.pwrite(fd, data[done:], offset + done)


def _fsync_folder(folder: str) -> None:
    """Make the rename durable; some filesystems cannot fsync a folder, which is fine."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


__all__ = ["FileIO", "kvikio_module"]
