"""Decoders: CPU (libjpeg-turbo, Pillow) and header probing."""

from .cpu import decode, decode_jpeg, decode_pillow
from .probe import ImageInfo, is_jpeg, probe

__all__ = sorted(["ImageInfo", "decode", "decode_jpeg", "decode_pillow", "is_jpeg", "probe"])
