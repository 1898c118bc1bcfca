"""The GPU check's report: the issue's goals against the figures, and the
``<!-- gpu:begin -->`` ... ``<!-- gpu:end -->`` block for bench/RESULTS.md
(bench/gpu_check.py writes both)."""

from __future__ import annotations

import json
from typing import Any


def gpu_rows(results: dict) -> list[tuple[str, dict]]:
    """(name, row) of each GPU row that ran: the ones that record the decoder and its
    fallbacks (bench/gpu_check.py ``gpu_record``)."""
    loader = results.get("loader") or {}
    rows = [(f"gpu-loader {k}", v) for k, v in loader.items() if isinstance(v, dict)]
    rows += [("hybrid-loader", results.get("hybrid")), ("resnet50 fed", (results.get("resnet") or {}).get("turbofeed")),
             ("memory", results.get("memory"))]
    return [(name, row) for name, row in rows if isinstance(row, dict) and "valid" in row]


def invalid(node: Any) -> str:
    """Why a GPU row's figures may be CPU figures (``"valid": false``), or ""."""
    if isinstance(node, dict) and node.get("valid") is False:
        why = str(node.get("invalid", "not the GPU decoder")).replace("|", "/")  # one table cell
        return f"**INVALID** ({why})"
    return ""


def goals(results: dict) -> list[tuple[str, str, bool | None]]:
    """(goal, measured, met) for the issue's goals; None where a row is missing. A goal
    measured on an invalid GPU row is not met, whatever its figure."""
    def get(*keys: str) -> Any:
        node: Any = results
        for k in keys:
            node = node.get(k) if isinstance(node, dict) else None
        return node

    rows = []
    frac = get("loader", "train-uint8", "of_ceiling")
    bad = invalid(get("loader", "train-uint8"))
    rows.append(("GPU loader >= 0.9 of raw batched nvJPEG", (f"{frac:.2f}" if frac else "-") + (" invalid" if bad else ""),
                 None if frac is None else frac >= 0.9 and not bad))
    gpu, cpu16 = get("loader", "train-uint8", "images_per_s"), None
    cpu = get("cpu") or {}
    if cpu and "error" not in cpu:
        cpu16 = cpu[max(cpu, key=int)]["images_per_s"]
    ratio = gpu / cpu16 if gpu and cpu16 else None
    rows.append(("GPU loader >= 5x the CPU path at its most threads",
                 (f"{ratio:.1f}x" if ratio else "-") + (" invalid" if bad else ""),
                 None if ratio is None else ratio >= 5 and not bad))
    lin = cpu[max(cpu, key=int)].get("of_linear") if cpu16 else None
    rows.append(("CPU path >= 0.85 of linear at its most threads", f"{lin:.2f}" if lin else "-",
                 None if lin is None else lin >= 0.85))
    rn, bad = get("resnet", "of_synthetic"), invalid(get("resnet", "turbofeed"))
    rows.append(("ResNet-50 fed by turbofeed >= 0.95 of synthetic", (f"{rn:.2f}" if rn else "-") + (" invalid" if bad else ""),
                 None if rn is None else rn >= 0.95 and not bad))
    growth, bad = get("memory", "growth_mib"), invalid(get("memory"))
    rows.append(("memory flat over 3 epochs (growth < 64 MiB)",
                 (f"{growth:+.0f} MiB" if growth is not None else "-") + (" invalid" if bad else ""),
                 None if growth is None else growth < 64 and not bad))
    ran = gpu_rows(results)
    wrong = [name for name, row in ran if invalid(row)]
    rows.append(("every GPU row valid: the GPU decoder ran, no fallback, no failed call",
                 f"{len(ran) - len(wrong)} of {len(ran)} valid" + (f" (invalid: {', '.join(wrong)})" if wrong else ""),
                 None if not ran else not wrong))
    return rows


def block(report: dict) -> str:
    """The ``<!-- gpu:begin -->`` ... ``<!-- gpu:end -->`` block for bench/RESULTS.md."""
    r, env = report["results"], report["env"]
    lines = ["<!-- gpu:begin -->", "## GPU: nvJPEG ceiling, GPU loader, CPU scaling, ResNet-50, memory, GDS", "",
             f"`bash scripts/gpu_check.sh` on {report['date']}, {env['device']}, torch {env['torch']}, "
             f"CUDA {env['cuda']}, {env['cpus']} CPUs, batch {report['batch']}, {report['size']}px; "
             f"{report['images']} ImageNet-like JPEGs (`make_imagenet_like.py`). Loader rows: the first "
             f"epoch whole after its first batch (each JPEG's scan checked on the CPU), then later epochs "
             f"for a fixed {report['seconds']:g} s; images/s is the later epochs'."
             + (" **DRY RUN on the CPU: not GPU figures.**" if report["dry_run"] else ""), "",
             "| row | images/s | epoch 1 images/s | note |", "|---|---|---|---|"]

    def add(name: str, node: Any, note: str = "") -> None:
        if isinstance(node, dict) and "error" in node:
            lines.append(f"| {name} | failed | | {node['error'][:120]} |")
        elif isinstance(node, dict) and "images_per_s" in node:
            note = "; ".join(part for part in (invalid(node), note) if part)
            first = (node.get("epoch1") or {}).get("images_per_s")
            lines.append(f"| {name} | {node['images_per_s']:.0f} | {'' if first is None else f'{first:.0f}'} | {note} |")

    add("nvjpeg-raw (ceiling)", r.get("nvjpeg"), (r.get("nvjpeg") or {}).get("backend", ""))
    loader, h, cpu = r.get("loader") or {}, r.get("hybrid") or {}, r.get("cpu") or {}
    if "error" in loader:
        add("gpu-loader", loader)
    for name, node in (loader.items() if "error" not in loader else ()):
        add(f"gpu-loader {name}", node, f"{node['of_ceiling']:.2f} of ceiling" if "of_ceiling" in node else "")
    add("hybrid-loader", h, f"GPU share {h.get('hybrid_share') or 0:.2f}")
    if "error" in cpu:
        add("cpu-loader", cpu)
    for threads, node in (cpu.items() if "error" not in cpu else ()):
        add(f"cpu-loader {threads} threads", node, f"{node['of_linear']:.2f} of linear")
    rn = r.get("resnet") or {}
    if "error" in rn:
        add("resnet50 step", rn)
    elif rn:
        add(f"{rn['model']}, synthetic input", rn["synthetic"])
        add(f"{rn['model']}, fed by turbofeed", rn["turbofeed"], f"{rn['of_synthetic']:.2f} of synthetic")
    decoders = sorted({str(row.get("decoder")) for _, row in gpu_rows(r)})
    if decoders:
        lines += ["", "GPU rows decoded by: " + "; ".join(f"`{d}`" for d in decoders)
                  + ". A row that fell back to the CPU, had a decoder call fail or ran without the "
                    "GPU decoder is marked **INVALID**: its figures may be CPU figures."]
    mem, gds = r.get("memory") or {}, r.get("gds") or {}
    lines += ["", "| memory | " + " | ".join(f"epoch {i + 1}" for i in range(3)) + " |", "|---|---|---|---|"]
    if invalid(mem):
        lines.append(f"| {invalid(mem)} | | | |")
    if "epochs" in mem:
        for key in mem["epochs"][0]:
            if key != "images":
                lines.append(f"| {key} | " + " | ".join(f"{e[key]:.0f}" for e in mem["epochs"]) + " |")
    elif "error" in mem:
        lines.append(f"| failed: {mem['error'][:120]} | | | |")
    lines += ["", "| GDS read of one file | method | GB/s |", "|---|---|---|"]
    for name in ("kvikio", "staged", "plain"):
        if name in gds:
            lines.append(f"| {name} | {gds[name]['method']} | {gds[name]['gb_per_s']:.2f} |")
    if "error" in gds:
        lines.append(f"| failed | {gds['error'][:120]} | |")
    probe, switch = r.get("probe") or {}, r.get("switch") or {}
    lines += ["", f"| odd input ({probe.get('backend', '-')}) | outcome |", "|---|---|"]
    for key, value in probe.items():
        if key != "backend":
            lines.append(f"| {key} | {json.dumps(value) if isinstance(value, dict) else value} |")
    if "error" in switch:
        lines.append(f"| device switches (last, own process) | failed: {switch['error'][:120]} |")
    elif switch:
        lost = switch.get("device_alternation_mib_lost")
        lines.append(f"| {switch['switches']} device switches \"cuda\"/\"cuda:0\" (last, own process) | "
                     + (switch.get("note", "-") if lost is None else f"{lost:.0f} MiB lost") + " |")
    lines += ["", "| goal | measured | met |", "|---|---|---|"]
    for goal, measured, met in goals(r):
        lines.append(f"| {goal} | {measured} | {'-' if met is None else ('yes' if met else 'NO')} |")
    lines.append("<!-- gpu:end -->")
    return "\n".join(lines)
