"""Decoders: CPU (libjpeg-turbo, Pillow) and header probing, under a pixel limit."""

from ..errors import ImageTooLarge
from .cpu import decode, decode_jpeg, decode_pillow
from .fields import FIELD_TYPES, FieldError, decode_field, decode_mask
from .limits import check_pixels, max_pixels
from .formats import IMAGE_FORMATS, ImageFormat, format_of, image_format, is_jpeg
from .probe import ImageInfo, probe

__all__ = ["FIELD_TYPES", "FieldError", "IMAGE_FORMATS", "ImageFormat", "ImageInfo", "ImageTooLarge", "check_pixels",
           "decode", "decode_field", "decode_jpeg", "decode_mask", "decode_pillow", "format_of", "image_format",
           "is_jpeg", "max_pixels", "probe"]
