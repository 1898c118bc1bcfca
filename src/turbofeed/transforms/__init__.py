"""Augmentations. The crop window is chosen from the image header before decoding, and
each image is resampled once into its batch slot."""

from .buckets import BucketResize
from .compose import Compose
from .draws import Draws, uniforms
from .geometry import CenterCrop, RandomHorizontalFlip, RandomResizedCrop, Resize
from .output import IMAGENET_MEAN, IMAGENET_STD, Normalize, ToDtype
from .presets import imagenet_eval, imagenet_train
from .render import hwc_pixels, nearest, resample, write_slot
from .views import Window, Windows

__all__ = [
    "BucketResize", "CenterCrop", "Compose", "Draws", "IMAGENET_MEAN", "IMAGENET_STD", "Normalize",
    "RandomHorizontalFlip", "RandomResizedCrop", "Resize", "ToDtype", "Window", "Windows", "hwc_pixels",
    "imagenet_eval", "imagenet_train", "nearest", "resample", "uniforms", "write_slot",
]
