"""Datasets as objects: what the data is and how it is read, apart from how batches are made.

``turbofeed.Dataset(data, format=..., fields=..., storage=...)`` describes one dataset;
``turbofeed.mix([Dataset(...), Dataset(...)], weights=[...])`` describes a weighted mix.
Both are light descriptions: they check their arguments when made and open nothing;
:class:`turbofeed.DataLoader` and :class:`turbofeed.Pipeline` open them (STYLE.md 13).

Not to be confused with :class:`turbofeed.io.IndexedDataset`, the *opened* dataset (its sources,
index and global sample ids) that a loader builds from one of these.

A front-end turns what it was given (a description, or a path with its own data
keywords, the short form) into its data keywords with :func:`data_args`; a mix maps onto
the parallel-list form the engine runs (``data=[paths of each dataset], weights=[...]``,
:func:`turbofeed.engine.layout.epoch_draw`), which needs every dataset of the mix to be
read the same way.
"""

from __future__ import annotations

import math
import os
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields as dataclass_fields
from typing import Any, NamedTuple, Union

from .base.renamed import accepts_renamed
from .decode.field_specs import FieldOptions
from .io import FORMATS, PathSpec, S3Config
from .io.arrays.common import parse_options
from .redact import redact_url

#: One dataset's paths: a path, a brace pattern, a glob, a folder, an ``s3://`` prefix, or a list of them.
Paths = Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]]

#: The options of :class:`Dataset` (all but ``data``), in signature order.
OPTIONS = ("format", "format_options", "storage", "cache_dir", "classes", "fields", "decoders", "index", "streaming")
#: The options of :func:`mix` (all but the datasets).
MIX_OPTIONS = ("weights", "epoch_size", "resample")
#: The data keywords the loaders took before :class:`Dataset` and :func:`mix` (``s3``: ``storage``'s old
#: name), accepted on them for one release with a DeprecationWarning (:func:`described`): DataLoader
#: took them all, Pipeline those of :data:`OPTIONS` but ``streaming``.
OLD_LOADER_KEYWORDS = (*OPTIONS, *MIX_OPTIONS, "s3")


def _is_path(item: object) -> bool:
    return isinstance(item, (str, os.PathLike)) and bool(os.fspath(item))


def _check_paths(data: object) -> str | os.PathLike | tuple[str | os.PathLike, ...]:
    """``data`` as stored: a path as given, a list as a tuple (a description does not change)."""
    if _is_path(data):
        return data  # type: ignore[return-value]
    if isinstance(data, (Dataset, Mix)):
        raise TypeError(f"Dataset(data=...) takes paths, not a {type(data).__name__}: pass {data!r:.80} "
                        "to the DataLoader or Pipeline itself")
    if isinstance(data, Sequence) and not isinstance(data, (str, bytes)) and data and all(map(_is_path, data)):
        return tuple(data)
    raise TypeError(f"Dataset(data=...) takes a path, a pattern, a folder, an s3:// prefix or a non-empty list of "
                    f"them (str or os.PathLike), got {type(data).__name__} {data!r:.80}")


def _check_classes(classes: Sequence[str] | None) -> tuple[str, ...] | None:
    if classes is None:
        return None
    if isinstance(classes, str) or not isinstance(classes, Sequence) or not all(isinstance(c, str) for c in classes):
        raise TypeError(f"classes must be a list of class names (str), got {classes!r:.80}")
    if len(set(classes)) != len(classes) or not classes:
        raise ValueError(f"classes must name each class once (and at least one), got {list(classes)!r:.80}")
    return tuple(classes)


def _check_mapping(name: str, value: Mapping | None, values: type | None = None) -> dict | None:
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise TypeError(f"{name} must be a dict with str keys, got {type(value).__name__} {value!r:.80}")
    if values is not None:
        bad = [k for k, v in value.items() if not isinstance(v, values)]
        if bad:
            raise TypeError(f"{name}[{bad[0]!r}] must be a {values.__name__}, got {value[bad[0]]!r:.80}")
    return dict(value)


@dataclass(frozen=True, repr=False)
class Dataset:
    """What a dataset is and how it is read: a light description, opened by a loader.

    Made once, it can be loaded many ways (train and val loaders, a
    :class:`turbofeed.Pipeline`, another rank count) and mixed with others
    (:func:`turbofeed.mix`). It opens nothing: its arguments are checked here, its files
    when a loader opens it. It pickles (with picklable ``decoders``) and compares equal
    to a Dataset made with the same arguments.

    Args:
        data: a path, a list, a brace pattern (``shard-{000000..000146}.tar``), a glob, a
            folder of ``.tar`` shards, an ImageFolder root, an ``s3://`` prefix, or
            HDF5/Zarr/.npy/Parquet/TFRecord files (see ``docs/formats.md``).
        format: what every path is (``"tar"``, ``"folder"``, ``"hdf5"``, ``"zarr"``, ``"npy"``,
            ``"parquet"``, ``"tfrecord"``) when its extension does not say.
        format_options: names of the images/labels/keys datasets, arrays or columns in
            HDF5, Zarr, .npy and Parquet sources (TFRecord: feature names), e.g.
            ``{"images": "img", "labels": "y"}``.
        storage: where the object stores are and how to reach them: endpoint, credentials,
            cache and retry settings for ``s3://`` paths, and (its ``gcs``/``azure``/``http``
            fields) for ``gs://``, ``az://`` and ``https://`` ones (a :class:`turbofeed.S3Config`,
            which configures every store; default: each ecosystem's variables). Was ``s3=``,
            accepted for one release with a ``DeprecationWarning``.
        cache_dir: where tar indexes are cached (default ``~/.cache/turbofeed``).
        classes: class names in id order, for labels given by name (``.txt``, JSON
            strings, ImageFolder folders): ``classes[i]`` gets id ``i`` whatever names the
            data holds, so train and val agree.
        fields: general samples, e.g. ``{"image": "jpg;png", "caption": "txt", "meta": "json?"}``:
            dict batches (see docs/samples.md); without it, ``(images, labels)``.
        decoders: ``{ext: fn(bytes)}`` overriding how a field's member is decoded (with ``fields``).
        index: the dataset index written by ``turbofeed index DATA``: None (default) finds
            it next to the data or in the index cache; a path or ``s3://`` URL names one;
            False builds it in memory and writes nothing (see docs/index.md).
        streaming: read the shards block by block (docs/streaming.md); None (default):
            when the ``s3://`` shards exceed the node cache.

    Raises:
        TypeError: an argument of the wrong type (named).
        ValueError: a value no loader could use (an unknown ``format`` or
            ``format_options`` name, a bad field spec, a class named twice).

    Example::

        train = turbofeed.Dataset("s3://bucket/laion/{00000..00099}.tar",
                                  fields={"image": "jpg;png", "caption": "txt"}, storage=S3Config(...))
        loader = turbofeed.DataLoader(train, batch_size=256, shuffle=True)
    """

    data: Paths
    format: str | None = field(default=None, kw_only=True)
    format_options: dict[str, Any] | None = field(default=None, kw_only=True)
    storage: S3Config | None = field(default=None, kw_only=True)
    cache_dir: str | os.PathLike | None = field(default=None, kw_only=True)
    classes: Sequence[str] | None = field(default=None, kw_only=True)
    fields: dict[str, str] | None = field(default=None, kw_only=True)
    decoders: dict[str, Callable[[bytes], Any]] | None = field(default=None, kw_only=True)
    index: str | os.PathLike | bool | None = field(default=None, kw_only=True)
    streaming: bool | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)  # frozen: set once, here

        put("data", _check_paths(self.data))
        if self.format is not None and self.format not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS} or None (by extension), got {self.format!r}")
        put("format_options", _check_mapping("format_options", self.format_options))
        parse_options(self.format_options)  # an unknown name fails now, not at the first read
        if self.storage is not None and not isinstance(self.storage, S3Config):
            raise TypeError(f"storage must be a turbofeed.S3Config, got {type(self.storage).__name__}")
        if self.cache_dir is not None and not _is_path(self.cache_dir):
            raise TypeError(f"cache_dir must be a path (str or os.PathLike), got {self.cache_dir!r:.80}")
        put("classes", _check_classes(self.classes))
        put("fields", _check_mapping("fields", self.fields, str))
        put("decoders", _check_mapping("decoders", self.decoders))
        for ext, fn in (self.decoders or {}).items():
            if not callable(fn):
                raise TypeError(f"decoders[{ext!r}] must be a callable fn(bytes), got {fn!r:.80}")
        # the field specs and decoders as a loader checks them (no paired/map: those are the loader's)
        FieldOptions.make(self.fields, decoders=self.decoders, paired=(), map=None, classes=self.classes,
                          has_transform=False)
        if not (self.index is None or isinstance(self.index, bool) or _is_path(self.index)):
            raise TypeError(f"index must be None, False or a path/URL of a dataset index, got {self.index!r:.80}")
        if self.streaming is not None and not isinstance(self.streaming, bool):
            raise TypeError(f"streaming must be None, True or False, got {self.streaming!r:.80}")

    def options(self) -> dict[str, Any]:
        """The options other than ``data``, by name (defaults included), as a loader takes them."""
        out = {name: getattr(self, name) for name in OPTIONS}
        if out["classes"] is not None:
            out["classes"] = list(out["classes"])
        return out

    def __repr__(self) -> str:
        """The data (URLs without userinfo or query string) and the options given (the
        store config with its credentials redacted)."""
        given = [f"{name}={value!r}" for name, value in self.options().items() if value is not None]
        data = [_shown(d) for d in self.data] if isinstance(self.data, tuple) else _shown(self.data)
        return f"Dataset({', '.join([repr(data), *given])})"


# s3=, the old name of storage=, accepted for one release (base/renamed.py)
setattr(Dataset, "__init__", accepts_renamed(Dataset.__init__))  # the dataclass's own __init__, wrapped


def _shown(item: Any) -> Any:
    """A path as a repr may show it: a URL without its userinfo or query string."""
    return redact_url(item) if isinstance(item, str) and "://" in item else item


@dataclass(frozen=True, repr=False)
class Mix:
    """Several :class:`Dataset` objects drawn together into every epoch (made by :func:`mix`).

    Attributes:
        datasets: the datasets, in order.
        weights: each dataset's share of every epoch, or None (every sample of each once).
        epoch_size: samples per epoch, or None (every sample once, or the weights' sizes).
        resample: draw with replacement.
    """

    datasets: tuple[Dataset, ...]
    weights: tuple[float, ...] | None = None
    epoch_size: int | None = None
    resample: bool = False

    def __repr__(self) -> str:
        more = "".join(f", {f.name}={getattr(self, f.name)!r}" for f in dataclass_fields(self)[1:]
                       if getattr(self, f.name) != f.default)
        return f"mix({list(self.datasets)!r}{more})"


def mix(datasets: Sequence[Dataset], weights: Sequence[float] | None = None, *, epoch_size: int | None = None,
        resample: bool = False) -> Mix:
    """Mix datasets: each gets its share of every epoch's samples.

    Replaces the parallel lists of ``DataLoader([a, b], weights=[...])``; the loader draws
    the same epochs from ``mix([Dataset(a), Dataset(b)], weights=[...])``.

    Args:
        datasets: :class:`Dataset` objects (at least one). A loader reads them with one
            engine, so their options (``format``, ``fields``, ``storage``, ...) must agree for
            now: a mix whose datasets differ in one raises ``NotImplementedError`` when a
            loader is given it.
        weights: one per dataset, finite, >= 0, with a positive sum: each dataset gets
            exactly that share of every epoch (largest remainder; in expectation with
            ``resample``), its samples repeating only when its share exceeds its size.
            None: every sample of every dataset once per epoch (their concatenation).
        epoch_size: samples per epoch (default: every sample once); with ``resample``,
            the length of each "epoch" of an infinite stream.
        resample: draw with replacement, lazily per position (docs/streaming.md,
            "Mixing and resampling").

    Returns:
        a :class:`Mix`, for :class:`turbofeed.DataLoader` (and :class:`turbofeed.Pipeline`
        without weights, ``epoch_size`` or ``resample``).

    Raises:
        TypeError: an item that is not a :class:`Dataset` (its position named).
        ValueError: no dataset, weights not one per dataset or not finite >= 0 with a
            positive sum, a bad ``epoch_size``.

    Example::

        laion = turbofeed.Dataset("s3://bucket/laion/", fields={"image": "jpg", "caption": "txt"})
        coco = turbofeed.Dataset("s3://bucket/coco/", fields={"image": "jpg", "caption": "txt"})
        loader = turbofeed.DataLoader(turbofeed.mix([laion, coco], weights=[0.8, 0.2], epoch_size=1_000_000),
                                      batch_size=256, shuffle=True)
    """
    if isinstance(datasets, (str, os.PathLike, Dataset)) or not isinstance(datasets, Sequence):
        raise TypeError(f"mix() takes a list of turbofeed.Dataset, got {type(datasets).__name__} {datasets!r:.80}")
    for i, item in enumerate(datasets):
        if not isinstance(item, Dataset):
            hint = f": wrap it, turbofeed.Dataset({item!r})" if _is_path(item) else ""
            raise TypeError(f"mix(): item {i} is a {type(item).__name__}, not a turbofeed.Dataset{hint}")
    if not datasets:
        raise ValueError("mix() needs at least one turbofeed.Dataset")
    if weights is not None:
        if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence) or len(weights) != len(datasets):
            raise ValueError(f"mix(): weights must be one number per dataset ({len(datasets)}), got {weights!r:.80}")
        bad = [f"weights[{i}] = {w!r}" for i, w in enumerate(weights)
               if isinstance(w, bool) or not isinstance(w, (int, float)) or not (math.isfinite(w) and w >= 0)]
        if bad or sum(weights) <= 0:
            why = ", ".join(bad) + " not a finite number >= 0" if bad else "none is positive"
            raise ValueError(f"mix(): weights must be finite, >= 0, with a positive sum: {why}")
        weights = tuple(float(w) for w in weights)
    if epoch_size is not None and (isinstance(epoch_size, bool) or not isinstance(epoch_size, int) or epoch_size < 1):
        raise ValueError(f"mix(): epoch_size must be a positive int, got {epoch_size!r}")
    if not isinstance(resample, bool):
        raise TypeError(f"mix(): resample must be True or False, got {resample!r:.80}")
    return Mix(tuple(datasets), weights, epoch_size, resample)


class DataArgs(NamedTuple):
    """A front-end's data keywords, as its constructor names them."""

    data: PathSpec
    format: str | None = None
    format_options: dict | None = None
    storage: S3Config | None = None
    cache_dir: str | None = None
    classes: list[str] | None = None
    fields: dict[str, str] | None = None
    decoders: dict[str, Callable[[bytes], Any]] | None = None
    # the keyword's name, though it hides tuple.index (unused: the fields are read by name or unpacked)
    index: str | os.PathLike | bool | None = None  # type: ignore[assignment]
    streaming: bool | None = None
    weights: Sequence[float] | None = None
    epoch_size: int | None = None
    resample: bool = False


def data_args(data: Any, caller: str, **given: Any) -> DataArgs:
    """The data keywords of ``caller`` (``"DataLoader"``, ``"Pipeline"``) from what it was
    given: a :class:`Dataset`, a :class:`Mix`, or anything else (paths) with its own
    keywords (``given``: the keyword values it received, only those it has), unchanged.

    Raises:
        TypeError: a description and one of the keywords it holds (named), as a call
            that gives one argument twice.
        NotImplementedError: a mix whose datasets differ in an option (named), which one
            engine cannot read yet; a mix ``caller`` cannot draw (Pipeline with weights).
    """
    unknown = set(given) - set(DataArgs._fields)
    assert not unknown, unknown  # a front-end passes its own data keywords only
    if not isinstance(data, (Dataset, Mix)):
        return DataArgs(data, **given)
    _refuse_held(data, given, caller)
    first = data if isinstance(data, Dataset) else data.datasets[0]
    for name, value in first.options().items():
        if name not in given and value is not None:
            raise NotImplementedError(f"{caller}() cannot use a Dataset's {name}={value!r:.60} yet; "
                                      "use turbofeed.DataLoader")
    options = {name: value for name, value in first.options().items() if name in given}
    if isinstance(data, Dataset):
        return DataArgs(data.data, **{**given, **options})
    for i, other in enumerate(data.datasets[1:], 1):
        for name in OPTIONS:
            a, b = getattr(first, name), getattr(other, name)
            if a != b:
                raise NotImplementedError(
                    f"{caller}(): the datasets of this mix differ in {name} (dataset 0: {a!r:.60}, dataset {i}: "
                    f"{b!r:.60}); turbofeed reads a mix with one set of options for now: give every dataset the "
                    "same, or load them with separate loaders")
    if caller != "DataLoader" and (data.weights is not None or data.epoch_size is not None or data.resample):
        raise NotImplementedError(f"{caller}() reads every sample once: it cannot draw a mix by weights, "
                                  "epoch_size or resample yet; use turbofeed.DataLoader, or mix() without them")
    # nested: one entry per dataset (its paths), as the parallel-list form's data list
    paths = [list(d.data) if isinstance(d.data, tuple) else d.data for d in data.datasets]
    mixing = {"weights": data.weights, "epoch_size": data.epoch_size, "resample": data.resample}
    return DataArgs(paths, **{**given, **options, **{k: v for k, v in mixing.items() if k in given}})


def _refuse_held(data: Dataset | Mix, given: Mapping[str, Any], caller: str) -> None:
    """TypeError for a keyword set beside the description that holds it: given twice."""
    held = set(OPTIONS) | (set(MIX_OPTIONS) if isinstance(data, Mix) else {"weights"})
    for name, value in given.items():
        if name in held and (value is not False if name == "resample" else value is not None):
            owner = "turbofeed.Dataset(..., " if name in OPTIONS else "turbofeed.mix([Dataset(...), ...], "
            raise TypeError(f"{caller}() got a {type(data).__name__} and {name}={value!r:.60}: {name} belongs to the "
                            f"data's description; pass {owner}{name}=...) instead")


def described(data: Any, keywords: dict[str, Any], caller: str, names: Sequence[str]) -> Any:
    """``data`` with the old data keywords a loader got (``keywords``, the ``**`` of its
    constructor, each one of ``names``) folded into the :class:`Dataset` or :func:`mix` they
    describe, with one DeprecationWarning naming that description to write instead; ``data``
    itself when there are none.

    Raises:
        TypeError: a keyword not in ``names`` (Python's unexpected-keyword error), one
            given under its old and new name, or one beside a description holding it.
    """
    for name in keywords:
        if name not in names:
            raise TypeError(f"{caller}.__init__() got an unexpected keyword argument {name!r}")
    if not keywords:
        return data
    shown = ", ".join(f"{name}=" for name in keywords) + (" describes" if len(keywords) == 1 else " describe")
    keywords = dict(keywords)
    if "s3" in keywords:
        if "storage" in keywords:
            raise TypeError(f"{caller}() got both s3= and storage=: s3 is the old name of storage; pass storage=")
        keywords["storage"] = keywords.pop("s3")
    options = {name: keywords[name] for name in OPTIONS if name in keywords}
    given = {name: value for name, value in keywords.items() if value is not (False if name == "resample" else None)}
    mixing = {name: given[name] for name in MIX_OPTIONS if name in given}
    if isinstance(data, (Dataset, Mix)):
        _refuse_held(data, given, caller)
        description = data
    elif mixing.get("weights") is not None:  # the parallel-list form: one dataset per entry
        description = mix([Dataset(item, **options) for item in ([data] if _is_path(data) else data)], **mixing)
    else:
        description = Dataset(data, **options)
    if mixing and isinstance(description, Dataset):
        description = mix([description], **mixing)
    warnings.warn(f"{caller}(): {shown} the data: pass {_as_code(description)} "
                  f"as the data instead (the {caller}'s data keywords go in the next release)",
                  DeprecationWarning, stacklevel=_user_stacklevel())
    return description


def _as_code(description: Dataset | Mix) -> str:  # the line that makes it, redacted as its repr is
    if isinstance(description, Dataset):
        return f"turbofeed.{description!r}"
    inner = ", ".join(map(_as_code, description.datasets))
    return f"turbofeed.{description!r}".replace(repr(list(description.datasets)), f"[{inner}]", 1)


def _user_stacklevel() -> int:  # the first frame outside turbofeed: the user's line, whoever passed it on
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] == "turbofeed":
        frame, level = frame.f_back, level + 1  # type: ignore[assignment]
    return level