"""What a sample's fields are: ``fields=`` and its companions parsed and checked.

``fields={"image": "jpg;png;webp", "caption": "txt", "meta": "json?"}`` names the
fields of a sample and, for each, the member extensions to look for (the first one the
sample has wins; a trailing ``?`` makes the field optional: ``None`` when missing).
``decoders=``, ``paired=``, ``map=`` and ``classes=`` go with it into one
:class:`FieldOptions`. Parsing opens nothing, so a :class:`turbofeed.Dataset` checks its
fields when made; the engine's stage that reads them is :mod:`turbofeed.engine.fields`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

IMAGE = "image"  # the field the transform applies to


@dataclass(frozen=True)
class FieldSpec:
    """One requested field: its name, the extensions to look for, whether it may be missing."""

    name: str
    exts: tuple[str, ...]
    optional: bool = False

    @classmethod
    def parse(cls, name: str, spec: str) -> FieldSpec:
        """``("meta", "json?")`` -> optional ``json``; ``"jpg;png;webp"`` -> three choices.

        Raises:
            ValueError: an empty name or spec, or a name of the reserved ``__x__`` form.
        """
        if not isinstance(name, str) or not name or name.startswith("__"):
            raise ValueError(f"fields: {name!r} is not a field name (non-empty, not starting with '__')")
        if not isinstance(spec, str):
            raise ValueError(f"fields[{name!r}] must be a string of extensions like 'jpg;png', got {spec!r}")
        text = spec.strip()
        optional = text.endswith("?")
        exts = tuple(e.strip().lower().lstrip(".") for e in text.rstrip("?").split(";") if e.strip())
        if not exts:
            raise ValueError(f"fields[{name!r}] = {spec!r} names no extension")
        return cls(name, exts, optional)


def parse_fields(fields: Mapping[str, str]) -> list[FieldSpec]:
    """The specs of ``fields``, in the order given.

    Raises:
        ValueError: a bad name or spec (see :meth:`FieldSpec.parse`), or no field at all.
    """
    if not fields:
        raise ValueError("fields: ask for at least one field, e.g. {'image': 'jpg;png'}")
    return [FieldSpec.parse(name, spec) for name, spec in fields.items()]


def check_paired(specs: list[FieldSpec], paired: Collection[str], has_transform: bool) -> frozenset[str]:
    """The fields that share the image's crop window and flip.

    Raises:
        ValueError: a paired name that is not a field, is the image itself, or no image
            field or no transform to take the window from.
    """
    names = {s.name for s in specs}
    for name in paired:
        if name not in names or name == IMAGE:
            raise ValueError(f"paired={list(paired)!r}: {name!r} is not one of the fields other than "
                             f"'image' ({sorted(names - {IMAGE})})")
    if paired and (IMAGE not in names or not has_transform):
        raise ValueError("paired fields take the crop window of the 'image' field: ask for an 'image' field "
                         "and give a transform")
    return frozenset(paired)


@dataclass(frozen=True)
class FieldOptions:
    """What a front-end asked of general samples (see :class:`turbofeed.DataLoader`).

    Attributes:
        specs: the fields, in order.
        decoders: ``{ext: fn(bytes)}`` overriding the decode of a member.
        paired: fields given the image's crop window and flip.
        map: ``fn(fields) -> fields`` on each sample's fields other than the image (with
            ``__key__`` and ``__url__``), in the worker threads, after decoding.
        classes: ``{name: id}``: a ``label`` field given by name becomes its id.
    """

    specs: list[FieldSpec]
    decoders: Mapping[str, Callable[[bytes], Any]] | None = None
    paired: frozenset[str] = frozenset()
    map: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    classes: Mapping[str, int] | None = None

    @classmethod
    def make(cls, fields: Mapping[str, str] | None, *, decoders: Mapping[str, Callable[[bytes], Any]] | None,
             paired: Collection[str], map: Callable[[dict[str, Any]], dict[str, Any]] | None,
             classes: Sequence[str] | None, has_transform: bool) -> FieldOptions | None:
        """The options, checked (None without ``fields``).

        Raises:
            ValueError: a bad field name or spec, or options without ``fields``.
        """
        if fields is None:
            if decoders or paired or map is not None:
                raise ValueError("decoders=, paired= and map= go with fields={...}")
            return None
        specs = parse_fields(fields)
        return cls(specs, decoders, check_paired(specs, paired, has_transform), map,
                   None if classes is None else {name: i for i, name in enumerate(classes)})

    def names(self) -> list[str]:
        return [s.name for s in self.specs]

    def image(self) -> FieldSpec | None:
        return next((s for s in self.specs if s.name == IMAGE), None)
