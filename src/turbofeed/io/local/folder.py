"""ImageFolder trees: ``root/<class>/**/<image>``, labels from sorted class folder names."""

from __future__ import annotations

import os

import numpy as np

from ...errors import DatasetError, StorageError
from ..source import Source
from ..table import IMAGE_EXTENSIONS, SampleTable, split_key


def _is_image(name: str) -> bool:
    return name.rsplit(".", 1)[-1].lower() in IMAGE_EXTENSIONS


def _images_under(top: str) -> list[str]:
    """Image files below ``top``, relative to it, in a stable (sorted) order."""
    found = []
    for dirpath, dirnames, filenames in os.walk(top, followlinks=True):
        dirnames.sort()
        rel = os.path.relpath(dirpath, top)
        for name in sorted(filenames):
            if _is_image(name) and not name.startswith("."):
                found.append(name if rel == "." else f"{rel}/{name}".replace(os.sep, "/"))
    return found


class FolderSource(Source):
    """An image folder, the torchvision ``ImageFolder`` way.

    Class ids are the positions of the class folder names in sorted order, as torchvision
    assigns them, except that hidden folders (``.ipynb_checkpoints``) are not classes; with
    ``classes``, their positions in that list (a split missing a class then keeps the ids
    of the others). Images directly in ``root`` (no class folders) get no label. The sample
    key is the path below ``root`` without its extension.

    Raises:
        DatasetError: no images, or a class folder not in ``classes``.
    """

    classes: list[str]  # the labels in ``table`` are ids into these (the Source capability)

    def __init__(self, root: str, classes: list[str] | None = None) -> None:
        self.path = root
        found = sorted(e.name for e in os.scandir(root) if e.is_dir() and not e.name.startswith("."))
        if classes is not None and found:
            unknown = [c for c in found if c not in classes]
            if unknown:
                raise DatasetError(f"{root}: class folders not among the {len(classes)} classes given: "
                                   f"{unknown[:5]}; add them to classes=[...] or move them out")
        self.classes = list(classes) if classes is not None and found else found
        ids = {name: i for i, name in enumerate(self.classes)}
        table = SampleTable()
        if found:
            pairs = [(f"{cls}/{rel}", ids[cls]) for cls in found for rel in _images_under(os.path.join(root, cls))]
            table.image_names = [name for name, _ in pairs]
            table.labels = [label for _, label in pairs]
        else:
            table.image_names = [n for n in sorted(os.listdir(root)) if _is_image(n)]
            table.labels = [None] * len(table.image_names)
        table.keys = [split_key(n)[0] for n in table.image_names]
        table.offsets = np.zeros(len(table.keys), dtype=np.int64)
        table.sizes = np.full(len(table.keys), -1, dtype=np.int64)
        if not table.keys:
            raise DatasetError(f"{root}: no images found (looked for {', '.join(IMAGE_EXTENSIONS)} "
                               "files, in class sub-folders or directly)")
        self.table = table

    def read(self, i: int) -> bytes:
        """The bytes of image ``i``.

        Raises:
            StorageError: the file vanished since the folder was listed (a new loader
                lists it again).
        """
        return self._read(i, -1)

    def head(self, i: int, size: int) -> bytes:
        """The first ``size`` bytes of image ``i`` (raises as :meth:`read`)."""
        return self._read(i, size)

    def _read(self, i: int, size: int) -> bytes:
        """Image ``i``'s first ``size`` bytes (-1: all of it)."""
        path = os.path.join(self.path, self.table.image_names[i])
        try:
            f = open(path, "rb")
        except FileNotFoundError as exc:
            raise StorageError(path, "vanished since the folder was listed (deleted or moved); "
                               "a new loader lists the folder again") from exc
        with f:
            return f.read(size)

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"FolderSource({self.path!r}, samples={len(self.table)}, classes={len(self.classes)})"
