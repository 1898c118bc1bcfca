"""TFRecord framing and the little of the protobuf wire format a ``tf.train.Example`` needs,
without TensorFlow or protobuf.

A TFRecord file is a sequence of records, little-endian::

    uint64 length
    uint32 masked_crc32c(length)     (the 8 bytes above)
    bytes  data[length]              (here: a serialized tf.train.Example)
    uint32 masked_crc32c(data)

with ``masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2**32)`` over the
CRC-32C (Castagnoli) checksum. An Example is ``features (1): Features``; Features is
``feature (1): map<string, Feature>`` (entries ``key (1)``, ``value (2)``); a Feature is
one of ``bytes_list (1)``, ``float_list (2)``, ``int64_list (3)``, each ``value (1)``
repeated (packed or not for the numbers). Unknown fields are skipped.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import BinaryIO

import google_crc32c

from ..local.index import TarDamage


_HEADER = struct.Struct("<QI")
_CRC = struct.Struct("<I")
_FLOAT = struct.Struct("<f")


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of ``data``, by the C library google-crc32c (about 5 us for
    110 KB: cheap enough to check every record as it is read)."""
    return google_crc32c.value(data)


def mask(crc: int) -> int:
    """TFRecord's mask of a CRC: rotated right by 15 plus a constant (mod 2**32)."""
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """The checksum TFRecord stores: :func:`crc32c` masked (:func:`mask`)."""
    return mask(google_crc32c.value(data))


class Records:
    """The records of an open TFRecord file, in order, as ``(data offset, data, stored
    data CRC)``; the scan stops at the first damage, which ``damage`` then holds (a
    :class:`~turbofeed.io.local.index.TarDamage` at the record's start: a cut header or
    payload, or a length CRC that does not match: the records after it cannot be
    found). The data CRC is left to the caller: a record with damaged data is one bad
    sample, the records after it are intact.

    Args:
        f: the file, opened in binary mode, positioned at 0.
        size: its size in bytes.
    """

    def __init__(self, f: BinaryIO, size: int) -> None:
        self._f = f
        self._size = size
        self.count = 0
        self.damage: TarDamage | None = None

    def __iter__(self) -> Iterator[tuple[int, bytes, int]]:
        pos, size = 0, self._size
        while pos < size:
            header = self._f.read(12)
            n = self.count
            if len(header) < 12:
                self.damage = TarDamage(pos, f"record {n}: header cut short ({len(header)} of 12 bytes)")
                return
            length, length_crc = _HEADER.unpack(header)
            if masked_crc32c(header[:8]) != length_crc:
                self.damage = TarDamage(pos, f"record {n}: length checksum mismatch (corrupt header)")
                return
            end = pos + 12 + length + 4
            if end > size:
                self.damage = TarDamage(pos, f"record {n} needs bytes up to {end} but the file ends "
                                        f"at {size}")
                return
            data = self._f.read(length)
            stored = self._f.read(4)
            if len(data) != length or len(stored) != 4:  # the file shrank while being read
                self.damage = TarDamage(pos, f"record {n}: short read ({len(data)} of {length} bytes)")
                return
            yield pos + 12, data, _CRC.unpack(stored)[0]
            self.count += 1
            pos = end


class WireError(ValueError):
    """Bytes that are not a well-formed protobuf message."""


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise WireError("varint runs past the end")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise WireError("varint longer than 10 bytes")


def fields(buf: bytes, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int, int, int]]:
    """The fields of the message in ``buf[start:end]``: ``(number, wire type, a, b)`` with
    ``(a, b)`` the value's span for length-delimited fields (wire type 2), ``(value, 0)``
    for varints (0); fixed 32/64-bit values (5, 1) give their span. Groups are refused.

    Raises:
        WireError: malformed bytes.
    """
    end = len(buf) if end is None else end
    pos = start
    while pos < end:
        tag, pos = _varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield number, 0, value, 0
            continue
        if wire == 2:
            length, pos = _varint(buf, pos)
            stop = pos + length
        elif wire == 5:
            stop = pos + 4
        elif wire == 1:
            stop = pos + 8
        else:
            raise WireError(f"unsupported wire type {wire} (field {number})")
        if stop > end:
            raise WireError(f"field {number} runs past the end of its message")
        yield number, wire, pos, stop
        pos = stop


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _values(buf: bytes, kind: int, start: int, end: int) -> list:
    """The ``value`` list of a BytesList (spans), FloatList or Int64List."""
    out: list = []
    for number, wire, a, b in fields(buf, start, end):
        if number != 1:
            continue
        if kind == 1 and wire == 2:
            out.append((a, b))
        elif kind == 3 and wire == 0:
            out.append(_signed(a))
        elif kind == 3 and wire == 2:  # packed
            pos = a
            while pos < b:
                value, pos = _varint(buf, pos)
                out.append(_signed(value))
        elif kind == 2 and wire == 5:
            out.append(_FLOAT.unpack_from(buf, a)[0])
        elif kind == 2 and wire == 2:  # packed
            out.extend(v for (v,) in _FLOAT.iter_unpack(buf[a:b]))
        else:
            raise WireError(f"wire type {wire} for a value of feature kind {kind}")
    return out


#: Feature kinds, by field number of the Feature oneof.
KINDS = {1: "bytes", 2: "float", 3: "int64"}


def parse_example(buf: bytes) -> dict[str, tuple[str, list]]:
    """The features of a serialized ``tf.train.Example``: name -> (kind, values), kind
    ``"bytes"`` (values are ``(start, end)`` spans of ``buf``, nothing copied),
    ``"float"`` or ``"int64"``. A feature with no kind set is left out.

    Raises:
        WireError: ``buf`` is not a well-formed Example.
    """
    out: dict[str, tuple[str, list]] = {}
    for number, wire, a, b in fields(buf):
        if number != 1 or wire != 2:
            continue
        for fnum, fwire, ea, eb in fields(buf, a, b):  # Features.feature: map entries
            if fnum != 1 or fwire != 2:
                continue
            name, feature = None, None
            for knum, kwire, ka, kb in fields(buf, ea, eb):
                if knum == 1 and kwire == 2:
                    name = buf[ka:kb].decode("utf-8", "replace")
                elif knum == 2 and kwire == 2:
                    feature = (ka, kb)
            if name is None:
                raise WireError("a feature map entry without a name")
            if feature is None:
                continue
            for kind, vwire, va, vb in fields(buf, *feature):
                if kind in KINDS and vwire == 2:
                    out[name] = (KINDS[kind], _values(buf, kind, va, vb))
    return out
