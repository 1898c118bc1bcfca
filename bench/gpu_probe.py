"""What the GPU decoder really does with odd input (the GPU check's first row, a few seconds):
the questions the CPU stand-in decoder cannot answer (docs/gpu.md; the stand-in refuses
image by image and never raises, nvJPEG fails whole batches).

For torchvision's batched nvJPEG: does one truncated image fail the whole batch; does a
truncated JPEG alone raise or decode with a made-up tail (compared with the whole image's
CPU decode, top and bottom halves); CMYK (compared with Pillow's conversion); a PNG. For
turbofeed's GpuDecoder: which of [good, empty, garbage, truncated, CMYK, good] come back
None. And whether alternating ``device="cuda"`` / ``"cuda:0"`` grows device memory
(torchvision re-creates its process-wide decoder on each switch).

In a dry run the same questions go to the CPU stand-in (answers about the CPU, not nvJPEG).
"""

from __future__ import annotations

import io
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
        def batch(names: list[str], device: str = "cpu") -> list:
            images = stand_in.decode([odd[n] for n in names])
            if any(i is None for i in images):
                raise ValueError("the stand-in refused an image")
            return images
    else:
        from torchvision.io import ImageReadMode, decode_jpeg

        def batch(names: list[str], device: str = "cuda") -> list:
            tensors = [torch.frombuffer(bytearray(odd[n]), dtype=torch.uint8) for n in names]
            return list(decode_jpeg(tensors, mode=ImageReadMode.RGB, device=device))

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

    if not dry_run:  # torchvision's decoder is re-created on every device switch: does memory grow?
        torch.cuda.synchronize()
        before = torch.cuda.mem_get_info()[0]
        for i in range(20):
            batch(["good"], device="cuda" if i % 2 else "cuda:0")
        torch.cuda.synchronize()
        out["device_alternation_mib_lost"] = (before - torch.cuda.mem_get_info()[0]) / 2**20
    return out
