"""Parquet image tables (pyarrow, the ``parquet`` extra), as Hugging Face ``datasets`` exports them.

The image column holds encoded images, decoded like a tar member: either a binary
column or a struct ``{bytes: binary, path: string}`` (the Hugging Face ``Image``
feature). The label column holds integers (``ClassLabel``) or class names. Default
names: images ``image``/``img``/``jpg``/``png``/``webp``, labels ``label``/``labels``/``cls``/
``class``/``target``, keys ``__key__``/``key``; ``format_options`` names others.

Parquet stores a column in row groups and reads at least a whole column chunk of a row
group: one sample costs its row group's image column. Row groups go through the shared
block cache (:mod:`turbofeed.io.arrays.blocks`), so a shuffled epoch reads each row group once
when the cache holds the images. Files written with one huge row group read it whole
on the first sample: write them with ``row_group_size`` of about 100 images (as
``datasets`` does) for random access.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import numpy as np

from ...errors import DatasetError
from ...extras import require
from ..local.files import indexed_file
from ..source import Source
from .common import BlockReads, as_keys, as_labels, make_table, parse_options, pick_name, rereads_warning

log = logging.getLogger("turbofeed")

IMAGE_COLUMNS = ("image", "img", "jpg", "jpeg", "png", "webp")
LABEL_COLUMNS = ("label", "labels", "cls", "class", "target")
KEY_COLUMNS = ("__key__", "key")


class ParquetSource(Source):
    """One Parquet file.

    Args:
        path: the ``.parquet`` file.
        options: ``format_options``: ``images``, ``labels``, ``keys`` (column names;
            ``labels``/``keys`` may be None).

    Raises:
        DatasetError: not a Parquet file, a missing column (the message lists the columns
            with their types), an image column that holds no bytes, labels that are not
            integers or names.
        MissingExtra: pyarrow is not installed.
    """

    def __init__(self, path: str, options: dict | None = None) -> None:
        opts = parse_options(options)
        pq = require("pyarrow.parquet", "parquet", f"Parquet file {path}")
        pa = require("pyarrow", "parquet", f"Parquet file {path}")
        self.path = path
        self.file = indexed_file(path)  # before opening: a later change shows
        self._pq = pq
        self._local = threading.local()  # one reader per thread: pyarrow readers are not shared safely
        try:
            pf = pq.ParquetFile(path)
        except (pa.ArrowException, OSError) as exc:
            raise DatasetError(f"{path}: not a readable Parquet file ({exc})") from None
        schema = pf.schema_arrow
        columns = list(schema.names)

        def described() -> list[str]:
            return [f"{f.name}: {f.type}" for f in schema]
        name = pick_name(path, opts["images"], IMAGE_COLUMNS, columns, "image column", required=True,
                         option="images", described=described)
        kind = schema.field(name).type
        if pa.types.is_struct(kind) and kind.get_field_index("bytes") >= 0 and self._is_binary(
                pa, kind.field("bytes").type):
            self._column = f"{name}.bytes"
        elif self._is_binary(pa, kind):
            self._column = name
        else:
            raise DatasetError(f"{path}: image column {name!r} is {kind}; turbofeed reads a binary "
                               "column or a struct {bytes, path} of encoded images")
        self.images_name = name
        labels_name = pick_name(path, opts["labels"], LABEL_COLUMNS, columns, "label column",
                                required=False, option="labels", described=described)
        keys_name = pick_name(path, opts["keys"], KEY_COLUMNS, columns, "key column", required=False,
                              option="keys", described=described)
        n = pf.metadata.num_rows
        try:
            labels = as_labels(path, labels_name, self._column_values(pf, labels_name), n) \
                if labels_name else None
            keys = as_keys(path, keys_name, self._column_values(pf, keys_name) if keys_name else None, n)
        except (pa.ArrowException, OSError) as exc:
            raise DatasetError(f"{path}: cannot read the label/key column ({exc})") from None
        self.table = make_table(keys, labels, name)
        meta = pf.metadata
        rows = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
        starts = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
        self._blocks = BlockReads(starts, self._load_row_group, self._bytes_at)
        column_bytes = sum(self._column_size(meta.row_group(g)) for g in range(meta.num_row_groups))
        note = rereads_warning(path, name, n / max(1, len(rows)), column_bytes)
        if note:
            log.warning("turbofeed: %s", note)
        self._local.file = pf

    @staticmethod
    def _is_binary(pa: Any, kind: Any) -> bool:
        return pa.types.is_binary(kind) or pa.types.is_large_binary(kind) or \
            getattr(pa.types, "is_binary_view", lambda _: False)(kind)

    def _column_size(self, row_group: Any) -> int:
        prefix = self.images_name
        return sum(row_group.column(c).total_uncompressed_size for c in range(row_group.num_columns)
                   if row_group.column(c).path_in_schema.split(".")[0] == prefix)

    @staticmethod
    def _column_values(pf: Any, name: str) -> list:
        return pf.read(columns=[name], use_threads=False).column(0).to_pylist()

    def _file(self) -> Any:
        pf = getattr(self._local, "file", None)
        if pf is None:
            pf = self._local.file = self._pq.ParquetFile(self.path)
        return pf

    def _load_row_group(self, g: int) -> tuple[Any, int]:
        table = self._file().read_row_group(g, columns=[self._column], use_threads=False)
        column = table.column(0).combine_chunks()
        if "." in self._column:  # struct {bytes, path}: keep the bytes child
            column = self._struct_bytes(column)
        return column, column.nbytes

    @staticmethod
    def _struct_bytes(column: Any) -> Any:
        """The ``bytes`` child of a struct array, null where the struct itself is null."""
        import pyarrow as pa
        import pyarrow.compute as pc

        child = column.field("bytes")
        if column.null_count == 0:
            return child
        return pc.if_else(column.is_valid(), child, pa.scalar(None, child.type))

    @staticmethod
    def _bytes_at(column: Any, j: int) -> bytes:
        value = column[j].as_py()
        if value is None:
            raise ValueError("no image bytes (null in the image column)")
        return value

    def read(self, i: int) -> bytes:
        """Encoded image bytes of row ``i`` (its row group's image column is read once and cached)."""
        return self._blocks.read(i)

    def io_stats(self) -> dict[str, Any]:
        return {"read_mode": "row groups", **self._blocks.stats()}

    def close(self) -> None:
        self._blocks.close()
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"ParquetSource({self.path!r}, samples={len(self.table)}, row_groups={self._blocks.blocks})"
