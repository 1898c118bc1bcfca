"""What the GPU decoder really does with odd input (the GPU check's first row, a few seconds):
the questions the CPU stand-in decoder cannot answer (docs/gpu.md; the stand-in refuses
image by image and never raises, nvJPEG fails whole batches).

For torchvision's batched nvJPEG: does one truncated image fail the whole batch; does a
truncated JPEG alone raise or decode with a made-up tail (compared with the whole image's
CPU decode, top and bottom halves); CMYK (compared with Pillow's conversion); a PNG. For
turbofeed's GpuDecoder: which of [good, empty, garbage, truncated, CMYK, good] come back
None.

And, in a process of its own run after every other row (``python bench/gpu_probe.py
--switch --data DIR``, one JSON line on stdout: :func:`switch_probe`), whether
alternating ``device="cuda"`` / ``"cuda:0"`` grows device memory: torchvision re-creates
its process-wide decoder on each switch, losing about 13 MiB each time on an H100, and
one re-creation that fails would leave every later decode in that process failing
(gpu-review S6), so it must not share a process with the rows it could poison.

In a dry run the same questions go to the CPU stand-in (answers about the CPU, not nvJPEG).
"""

from __future__ import annotations

import argparse
import glob
import io
import json
import os
import sys
import tarfile
from typing import Any, Callable

import numpy as np
import torch
from PIL import Image


def odd_images(good: bytes) -> dict[str, bytes]:
    """Odd inputs made from one real JPEG of the benchmark data."""
    def encode(image: Image.Image, fmt: str = "JPEG") -> bytes:
        buf = io.BytesIO()
        image.save(buf, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
        return buf.getvalue()

    with Image.open(io.BytesIO(good)) as im:
        rgb = im.convert("RGB")
    return {"good": good, "truncated": good[: len(good) // 2], "cmyk": encode(rgb.convert("CMYK")),
            "png": encode(rgb, "PNG"), "garbage": b"this is not an image" * 20, "empty": b""}


def _outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "decoded", fn()
    except Exception as exc:  # noqa: BLE001 - the question is whether (and what) it raises
        return f"raised {type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}", None


def _diff(image: Any, ref: np.ndarray) -> dict:
    got = image.cpu().numpy().astype(int)
    if got.shape != ref.shape:
        return {"shape": list(got.shape), "reference_shape": list(ref.shape)}
    half = ref.shape[1] // 2
    return {"shape": list(got.shape), "mean_diff_top_half": float(np.abs(got[:, :half] - ref[:, :half]).mean()),
            "mean_diff_bottom_half": float(np.abs(got[:, half:] - ref[:, half:]).mean())}


def probe(good: bytes, dry_run: bool, stand_in: Any = None) -> dict:
    """The answers, as a JSON-able dict (see the module docstring)."""
    from turbofeed.decode import decode

    odd = odd_images(good)
    ref = decode(good).transpose(2, 0, 1).astype(int)
    with Image.open(io.BytesIO(odd["cmyk"])) as im:
        cmyk_ref = np.asarray(im.convert("RGB")).transpose(2, 0, 1).astype(int)
    out: dict[str, Any] = {"backend": "CPU stand-in (dry run)" if dry_run else "torchvision.io.decode_jpeg"}

    if dry_run:
        def batch(names: list[str]) -> list:
            images = stand_in.decode([odd[n] for n in names])
            if any(i is None for i in images):
                raise ValueError("the stand-in refused an image")
            return images
    else:
        from torchvision.io import ImageReadMode, decode_jpeg

        def batch(names: list[str]) -> list:  # the device as GpuDecoder names it: no switch
            tensors = [torch.frombuffer(bytearray(odd[n]), dtype=torch.uint8) for n in names]
            return list(decode_jpeg(tensors, mode=ImageReadMode.RGB, device=f"cuda:{torch.cuda.current_device()}"))

    what, _ = _outcome(lambda: batch(["good", "truncated"]))
    out["batch_good_truncated"] = what
    what, images = _outcome(lambda: batch(["truncated"]))
    out["truncated_alone"] = {"outcome": what, **(_diff(images[0], ref) if images else {})}
    what, images = _outcome(lambda: batch(["cmyk"]))
    out["cmyk"] = {"outcome": what, **({"mean_diff_vs_pillow": float(np.abs(
        images[0].cpu().numpy().astype(int) - cmyk_ref).mean())} if images and
        tuple(images[0].shape) == cmyk_ref.shape else {})}
    out["png"], _ = _outcome(lambda: batch(["png"]))

    names = ["good", "empty", "garbage", "truncated", "cmyk", "good"]
    if dry_run:
        decoder = stand_in
    else:
        from turbofeed.decode.gpu import GpuDecoder

        decoder = GpuDecoder("cuda")
        out["gpu_decoder"] = decoder.description
    what, images = _outcome(lambda: decoder.decode([odd[n] for n in names]))
    out["gpudecoder_mixed_batch"] = {"outcome": what, "none": [n for n, i in zip(names, images or []) if i is None]}
    return out


def switch_probe(good: bytes, dry_run: bool, switches: int = 20) -> dict:
    """Device memory lost by decoding ``good`` ``switches`` times, alternating
    ``"cuda:0"`` and ``"cuda"``; the dry run answers without a device (nothing to lose)."""
    out: dict[str, Any] = {"switches": switches, "process": os.getpid()}
    if dry_run:
        out["device_alternation_mib_lost"] = None
        out["note"] = "dry run: no device, nothing switched"
        return out
    from torchvision.io import ImageReadMode, decode_jpeg

    tensor = torch.frombuffer(bytearray(good), dtype=torch.uint8)
    torch.cuda.synchronize()
    before = torch.cuda.mem_get_info()[0]
    for i in range(switches):
        decode_jpeg([tensor], mode=ImageReadMode.RGB, device="cuda" if i % 2 else "cuda:0")
    torch.cuda.synchronize()
    out["device_alternation_mib_lost"] = (before - torch.cuda.mem_get_info()[0]) / 2**20
    return out


def first_jpeg(data: str) -> bytes:
    """The first JPEG of the first shard in folder ``data``."""
    for shard in sorted(glob.glob(os.path.join(data, "*.tar"))):
        with tarfile.open(shard) as tar:
            for m in tar:
                if m.name.endswith(".jpg"):
                    return tar.extractfile(m).read()
    raise FileNotFoundError(f"no JPEG in the shards of {data}")


def main() -> int:
    ap = argparse.ArgumentParser(description="the device-switch probe, in a process of its own")
    ap.add_argument("--switch", action="store_true", help="run the device-switch probe (the only mode)")
    ap.add_argument("--data", required=True, help="folder of shard-*.tar")
    ap.add_argument("--switches", type=int, default=20)
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    if not args.switch:
        ap.error("--switch is the only mode")
    print(json.dumps(switch_probe(first_jpeg(args.data), args.dry_run, args.switches)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
