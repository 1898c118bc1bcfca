"""The sample table every source produces, and WebDataset-style grouping of members."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

# Preferred image member when a sample holds several (first match wins).
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "bmp", "ppm", "pgm", "pbm", "tif", "tiff", "gif")
LABEL_EXTENSIONS = ("cls", "txt", "json")
_JSON_LABEL_FIELDS = ("label", "cls", "class", "target")

Label = int | str | None


def split_key(name: str) -> tuple[str, str]:
    """Split a member name into (key, extension) the WebDataset way.

    The key is the directory prefix plus the file name up to its first dot; the
    extension is the rest, lower-cased::

        n01440764/n01440764_10026.JPEG -> ("n01440764/n01440764_10026", "jpeg")
        a/b.seg.png                    -> ("a/b", "seg.png")
    """
    slash = name.rfind("/") + 1
    dot = name.find(".", slash)
    if dot < 0:
        return name, ""
    return name[:dot], name[dot + 1:].lower()


def parse_label(ext: str, payload: bytes) -> Label:
    """Turn a ``.cls``/``.txt``/``.json`` payload into an int label or a class name; None
    for a JSON object without a label field (img2dataset/LAION metadata: an unlabelled
    sample, delivered with label -1, not a bad one).

    Raises:
        ValueError: the payload is not a label (empty, bad JSON, a label of another type).
    """
    text = payload.decode("utf-8").strip()
    if ext == "json":
        value = json.loads(text)
        if isinstance(value, dict):
            found = [value[f] for f in _JSON_LABEL_FIELDS if f in value]
            if not found or found[0] is None:
                return None
            value = found[0]
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ValueError(f"JSON label {value!r} is neither an integer nor a class name")
        return value
    if not text:
        raise ValueError("empty label")
    try:
        return int(text)
    except ValueError:
        if ext == "cls":
            raise ValueError(f".cls label {text[:40]!r} is not an integer") from None
        return text  # a .txt class name


@dataclass
class SampleTable:
    """Samples of one source, in storage order.

    Attributes:
        keys: sample key per sample.
        image_names: member or file name holding the image.
        offsets: int64 byte offset of the image payload (0 for plain files).
        sizes: int64 payload size in bytes (-1 when unknown until read).
        labels: raw label per sample: int, class name, or None.
        problems: (key, reason) for samples dropped while indexing (no image, bad label).
    """

    keys: list[str] = field(default_factory=list)
    image_names: list[str] = field(default_factory=list)
    offsets: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    sizes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    labels: list[Label] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.keys)


def group_members(names: list[str]) -> dict[str, dict[str, int]]:
    """Map each key to {extension: member index}, keys in order of first appearance."""
    groups: dict[str, dict[str, int]] = {}
    for i, name in enumerate(names):
        key, ext = split_key(name)
        groups.setdefault(key, {}).setdefault(ext, i)
    return groups


def pick_image(members: dict[str, int]) -> int | None:
    """Index of the preferred image member of one sample, or None if it has none."""
    for ext in IMAGE_EXTENSIONS:
        if ext in members:
            return members[ext]
    return None


def pick_label_member(members: dict[str, int]) -> tuple[str, int] | None:
    """(extension, index) of the label member of one sample, or None."""
    for ext in LABEL_EXTENSIONS:
        if ext in members:
            return ext, members[ext]
    return None
