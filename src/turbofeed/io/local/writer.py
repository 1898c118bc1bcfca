"""Writing WebDataset tar shards, published atomically (a half-written shard is never
visible under its final name)."""

from __future__ import annotations

import io
import os
import tarfile


class ShardWriter:
    """Write samples into ``pattern % shard_number`` tars of ``per_shard`` samples each.

    Each shard is written as ``<name>.tmp`` and renamed when complete. Numbering starts
    at ``first`` (a resumed conversion writes only the shards still missing).

    Example::

        with ShardWriter(os.path.join(out, "shard-%06d.tar"), per_shard=1000) as w:
            w.write("00000001", {"jpg": jpeg_bytes, "cls": b"7"})
    """

    def __init__(self, pattern: str, per_shard: int = 1000, first: int = 0) -> None:
        if per_shard < 1:
            raise ValueError(f"per_shard must be >= 1, got {per_shard}")
        self.pattern = pattern
        self.per_shard = per_shard
        self.first = first
        self.shards: list[str] = []
        self._tar: tarfile.TarFile | None = None
        self._in_shard = 0

    def write(self, key: str, members: dict[str, bytes]) -> None:
        """Add one sample: ``members`` maps extension (``jpg``, ``cls``) to payload."""
        if self._tar is None or self._in_shard == self.per_shard:
            self._open_next()
        tar = self._tar
        assert tar is not None  # opened just above
        for ext, payload in members.items():
            info = tarfile.TarInfo(f"{key}.{ext}")
            info.size, info.mtime, info.mode = len(payload), 0, 0o644
            tar.addfile(info, io.BytesIO(payload))
        self._in_shard += 1

    def _open_next(self) -> None:
        self._publish()
        path = self.pattern % (self.first + len(self.shards))
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self._tar = tarfile.open(path + ".tmp", "w", format=tarfile.USTAR_FORMAT)
        self.shards.append(path)
        self._in_shard = 0

    def _publish(self) -> None:
        if self._tar is not None:
            self._tar.close()
            os.replace(self.shards[-1] + ".tmp", self.shards[-1])
            self._tar = None

    def close(self) -> None:
        self._publish()

    def __enter__(self) -> "ShardWriter":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is None:
            self.close()
        elif self._tar is not None:  # leave no partial shard behind on failure
            self._tar.close()
            os.remove(self.shards.pop() + ".tmp")
            self._tar = None
