"""The table of image formats: which one a sample's first bytes announce, and what takes it.

Every place that picks a decoder asks this table (``IMAGE_FORMATS[image_format(data)]``,
or :func:`format_of`), never a format's magic bytes itself: the CPU decode
(``decode/cpu.py``), the per-sample crop-window decode (``engine/work.py``), what goes to
the GPU decoder (``decode/gpu.py``) and the scan check before it (``engine/gpu.py``).

- JPEG: ``libjpeg-turbo`` on the CPU (Pillow for the variants it refuses), the native
  crop-window decoder, the GPU decoder, the scan check.
- PNG, GIF, BMP, TIFF, WebP, PPM: Pillow, on the CPU only.
- None (bytes that announce none of these): Pillow, whose other plugins may read them.

``cpu`` names the strict decoder :func:`turbofeed.decode.decode` tries first (Pillow reads
what it refuses, and what neither decodes is ``bad <format>``); ``"pillow"`` is the
general path. A new natively decoded format (say a native PNG) is one :class:`ImageFormat`
here (and its signature in :data:`SIGNATURES` if it is new), its decoder in
``decode/cpu.py``'s ``STRICT_DECODERS`` and, for the crop path, in the native extension.

The sniff is a few byte comparisons: the first two bytes pick the candidates
(:data:`SIGNATURES`), almost always one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ImageFormat:
    """What decodes one image format.

    Attributes:
        name: Pillow's name of the format (``"JPEG"``), or ``"other"`` for bytes that
            announce none of the formats here.
        cpu: the CPU decoder tried first: ``"libjpeg-turbo"`` (strict, Pillow as the
            fallback for variants it refuses) or ``"pillow"`` (the general path).
        native_crop: the native crop-window decoder takes it (``decode/native.py``,
            ``crop_resize``; the per-sample CPU path and the chunked one).
        gpu: the GPU decoder (nvJPEG) takes it; others are decoded on the CPU.
        scan_check: its entropy-coded data is checked for damage before a decoder that
            would fill damage with grey (``decode/scan.py``).
    """

    name: str
    cpu: str = "pillow"
    native_crop: bool = False
    gpu: bool = False
    scan_check: bool = False


#: Image format name (as :func:`image_format` gives it; None: none of them) -> what takes it.
IMAGE_FORMATS: dict[str | None, ImageFormat] = {f.name: f for f in (
    ImageFormat("JPEG", cpu="libjpeg-turbo", native_crop=True, gpu=True, scan_check=True),
    ImageFormat("PNG"),
    ImageFormat("GIF"),
    ImageFormat("BMP"),
    ImageFormat("TIFF"),
    ImageFormat("WEBP"),
    ImageFormat("PPM"),
)}
IMAGE_FORMATS[None] = ImageFormat("other")

_SPACE = tuple(bytes([c]) for c in b" \t\n\r\x0b\x0c")  # bytes.isspace()

#: The first two bytes of an image -> ``(offset, bytes, format)`` candidates: the format
#: whose bytes are found at that offset (the first that matches).
SIGNATURES: dict[bytes, tuple[tuple[int, bytes, str], ...]] = {
    b"\xff\xd8": ((0, b"\xff\xd8\xff", "JPEG"),),
    b"\x89P": ((0, b"\x89PNG\r\n\x1a\n", "PNG"),),
    b"GI": ((0, b"GIF87a", "GIF"), (0, b"GIF89a", "GIF")),
    b"BM": ((0, b"BM", "BMP"),),
    b"II": ((0, b"II*\x00", "TIFF"),),
    b"MM": ((0, b"MM\x00*", "TIFF"),),
    b"RI": ((0, b"RIFF", "WEBP"),),  # and "WEBP" at 8, checked below
    **{b"P" + n: tuple((2, s, "PPM") for s in _SPACE) for n in (b"1", b"2", b"3", b"4", b"5", b"6")},
}
HEAD = 12  # bytes of an image the signatures read


def image_format(data: object) -> str | None:
    """Pillow's name of the image format ``data`` starts with (``"JPEG"``, ``"PNG"``,
    ``"GIF"``, ``"BMP"``, ``"TIFF"``, ``"WEBP"``, ``"PPM"``), or None: not bytes (an
    array, None) or none of these formats. A key of :data:`IMAGE_FORMATS` either way."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        return None
    head = bytes(data[:HEAD])
    for offset, magic, name in SIGNATURES.get(head[:2], ()):
        if head[offset:offset + len(magic)] == magic:
            if name == "WEBP" and head[8:12] != b"WEBP":
                return None
            return name
    return None


def format_of(data: object) -> ImageFormat:
    """The :class:`ImageFormat` row of ``data`` (``IMAGE_FORMATS[image_format(data)]``)."""
    return IMAGE_FORMATS[image_format(data)]


def is_jpeg(data: object) -> bool:
    """``data`` is bytes (or a bytearray or memoryview of them) that start like a JPEG."""
    return image_format(data) == "JPEG"
