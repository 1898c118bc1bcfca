#!/usr/bin/env python3
"""FFCV: the shards converted once to a .beton holding the original JPEG bytes (not
re-encoded), RandomResizedCropRGBImageDecoder (decodes and crops in one numba-compiled
step), flip, Loader with RANDOM order. The first epoch JIT-compiles: use --warmup >= 1."""

import io
import os
import sys

import numpy as np
from PIL import Image

sys.path.insert(0, os.path.dirname(__file__))
import _common as C  # noqa: E402

from ffcv.fields import IntField, RGBImageField  # noqa: E402
from ffcv.fields.basics import IntDecoder  # noqa: E402
from ffcv.fields.rgb_image import (IMAGE_MODES, CenterCropRGBImageDecoder,  # noqa: E402
                                   RandomResizedCropRGBImageDecoder)
from ffcv.loader import Loader, OrderOption  # noqa: E402
from ffcv.transforms import NormalizeImage, RandomHorizontalFlip, Squeeze, ToTensor, ToTorchImage  # noqa: E402
from ffcv.writer import DatasetWriter  # noqa: E402


class OriginalJpegField(RGBImageField):
    """Stores the JPEG bytes as they are (RGBImageField would decode and re-encode at q90)."""

    def encode(self, destination, item, malloc):
        data, height, width = item
        destination["mode"] = IMAGE_MODES["jpg"]
        destination["height"], destination["width"] = height, width
        destination["data_ptr"], storage = malloc(len(data))
        storage[:] = np.frombuffer(data, dtype=np.uint8)


class Samples:
    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        data, label = C.read(self.items[i]), self.items[i][3]
        width, height = Image.open(io.BytesIO(data)).size
        return (data, height, width), label


def beton(args) -> str:
    os.makedirs(args.cache, exist_ok=True)
    path = os.path.join(args.cache, f"{os.path.basename(os.path.normpath(args.data))}.beton")
    if not os.path.exists(path):
        writer = DatasetWriter(path + ".tmp", {"image": OriginalJpegField(write_mode="jpg"), "label": IntField()},
                               num_workers=args.workers)
        writer.from_indexed_dataset(Samples(C.members(C.shards(args.data))))
        os.replace(path + ".tmp", path)
    return path


def main():
    args = C.parse(__doc__)
    if args.pipeline == "eval":
        image = [CenterCropRGBImageDecoder((224, 224), ratio=224 / 256)]
    else:
        image = [RandomResizedCropRGBImageDecoder((224, 224)), RandomHorizontalFlip()]
    if args.pipeline == "train-float":
        image.append(NormalizeImage(np.array(C.MEAN) * 255, np.array(C.STD) * 255, np.float32))
    image += [ToTensor(), ToTorchImage()]
    # drop_last=False: FFCV drops the partial last batch by default, the other loaders deliver it.
    loader = Loader(beton(args), batch_size=args.batch_size, num_workers=args.workers, order=OrderOption.RANDOM,
                    os_cache=True, drop_last=False, custom_fields={"image": OriginalJpegField},
                    pipelines={"image": image, "label": [IntDecoder(), ToTensor(), Squeeze()]})
    C.run("ffcv", C.version("ffcv"), args, lambda e: loader)


if __name__ == "__main__":
    main()
