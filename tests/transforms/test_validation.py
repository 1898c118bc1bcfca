"""Transforms refuse nonsense at construction, naming the argument and the value, so a
size of 0 is reported where it was written, never later as "unreadable" images."""

from __future__ import annotations

import math

import pytest

from turbofeed.transforms import (CenterCrop, Compose, Normalize, RandomHorizontalFlip, RandomResizedCrop,
                                  Resize, ToDtype, imagenet_eval, imagenet_train)


@pytest.mark.parametrize("build,words", [
    (lambda: Resize(0), ["Resize", "size", "0"]),
    (lambda: Resize(-3), ["Resize", "size", "-3"]),
    (lambda: Resize((224, 0)), ["Resize", "size", "(224, 0)"]),
    (lambda: Resize((224,)), ["Resize", "size", "(224,)"]),
    (lambda: CenterCrop(0), ["CenterCrop", "size", "0"]),
    (lambda: CenterCrop((0, 5)), ["CenterCrop", "size", "(0, 5)"]),
    (lambda: RandomResizedCrop(0), ["RandomResizedCrop", "size", "0"]),
    (lambda: RandomResizedCrop(224, scale=(0.9, 0.1)), ["scale", "(0.9, 0.1)"]),
    (lambda: RandomResizedCrop(224, scale=(0.0, 1.0)), ["scale", "(0.0, 1.0)"]),
    (lambda: RandomResizedCrop(224, scale=(-0.5, 1.0)), ["scale", "(-0.5, 1.0)"]),
    (lambda: RandomResizedCrop(224, scale=(0.5,)), ["scale", "(0.5,)"]),
    (lambda: RandomResizedCrop(224, ratio=(2.0, 0.5)), ["ratio", "(2.0, 0.5)"]),
    (lambda: RandomResizedCrop(224, ratio=(0.0, 1.0)), ["ratio", "(0.0, 1.0)"]),
    (lambda: RandomResizedCrop(224, ratio=(math.nan, 1.0)), ["ratio", "nan"]),
    (lambda: RandomHorizontalFlip(1.5), ["RandomHorizontalFlip", "p", "1.5"]),
    (lambda: RandomHorizontalFlip(-0.1), ["p", "-0.1"]),
    (lambda: RandomHorizontalFlip(math.nan), ["p", "nan"]),
    (lambda: Normalize(mean=(0.5, 0.5)), ["Normalize", "mean", "(0.5, 0.5)"]),
    (lambda: Normalize(std=(0.2, 0.2)), ["Normalize", "std", "(0.2, 0.2)"]),
    (lambda: Normalize(std=(0.2, 0.0, 0.2)), ["std", "(0.2, 0.0, 0.2)"]),
    (lambda: Normalize(mean=(0.5, math.inf, 0.5)), ["mean", "inf"]),
    (lambda: ToDtype("int8"), ["dtype", "int8"]),
    (lambda: imagenet_train(0), ["size", "0"]),
    (lambda: imagenet_eval(0), ["size", "0"]),
    (lambda: imagenet_eval(224, resize=0), ["Resize", "size", "0"]),  # not taken as "no resize"
])
def test_nonsense_arguments_raise_value_error_naming_them(build, words):
    with pytest.raises(ValueError) as info:
        build()
    message = str(info.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message


@pytest.mark.parametrize("build", [
    lambda: Resize(224.0), lambda: Resize("224"), lambda: CenterCrop(True), lambda: RandomResizedCrop((224, 2.5)),
])
def test_sizes_must_be_integers(build):
    with pytest.raises(TypeError, match="size"):
        build()


def test_sensible_arguments_still_work():
    """The edges of the valid ranges are accepted (p of 0 and 1, a one-pixel output,
    scale above 1 as torchvision allows, sizes as lists), and ints stay short-side sizes."""
    Compose([Resize(1), CenterCrop([1, 1]), RandomHorizontalFlip(0.0), RandomHorizontalFlip(1), ToDtype()])
    Compose([RandomResizedCrop((8, 16), scale=(0.5, 1.5), ratio=(1.0, 1.0)), Normalize(std=(1, 2, 3))])
    assert Resize(256).size == 256 and Resize([256, 320]).size == (256, 320)
    assert imagenet_eval(224).size == (224, 224) and imagenet_train(8, normalize=True).size == (8, 8)
