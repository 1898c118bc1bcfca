#!/usr/bin/env bash
# The whole GPU check in one command, for a short window on a GPU machine with no internet
# (docs/gpu.md, "Running the GPU check"). Steps, each logged; a step that fails is reported
# and the next one runs (one failure must not waste the window):
#   install  glibc printed; each wheel of --wheels DIR (scripts/gpu_wheels.sh made them) matched
#            against this machine's tags (scripts/wheel_fit.py: the turbofeed wheel needs
#            glibc 2.34), and those that fit installed into WORK/site with pip --no-index
#            --no-deps --target (one call; one per wheel if pip refuses it), so a refused
#            wheel costs only itself; the checkout's src/ is copied to WORK/src with
#            the wheel's native decoder (turbofeed/decode/_crop.abi3.so, turbofeed.libs/)
#            beside it, so code edited in the window runs with the wheel's extension
#   env      nvidia-smi, Python, glibc, torch, CUDA, torchvision, `turbofeed doctor --json`,
#            `turbofeed gds-status --json`, each within GPU_CHECK_ENV_TIMEOUT (60 s)
#   tests    tests/gpu/test_on_gpu.py, tests/gds/test_cuda.py, tests/gds/test_status.py,
#            tests/test_doctor.py (the CUDA files first), pytest -rs, within a time budget;
#            before the data and the rows
#   data     ImageNet-like tar shards in WORK/data (make_imagenet_like.py, one process per core)
#   bench    bench/gpu_check.py: nvJPEG ceiling, GPU/hybrid/CPU loaders, ResNet-50, memory, GDS,
#            the device-switch probe last
# Into --out DIR: gpu_check.log (all of it), tests.log, gpu_results.json (every figure) and
# gpu_block.md (the <!-- gpu:begin --> block for bench/RESULTS.md:
# `python bench/gpu_check.py --record DIR/gpu_block.md` puts it there).
#
#   profile  (only when --only names it) bench/gpu_profile.py: where the GPU loader's time goes
#            and which device memory stays from epoch to epoch (gpu_profile.json, .txt)
#
# Usage: scripts/gpu_check.sh [--out DIR] [--only tests|bench|profile[,...]] [--dry-run] [--wheels DIR]
#                             [--work DIR] [--count N]
#   --dry-run   every step on the CPU: the wheels are only resolved for CPython 3.12 (pip
#               --dry-run), the environment here is used, tiny data, the CPU stand-in
#               decoder and CPU timings (tests/repo/test_gpu_check.py runs this in CI)
#               (GPU_CHECK_INSTALL=1: install them for real, for wheels made for this Python)
#   --count N   images to generate (default 8192: 32 batches an epoch; dry run 48)
# Environment: GPU_CHECK_PYTHON (default python3), GPU_CHECK_TESTS (test paths),
#   GPU_CHECK_TEST_BUDGET (seconds, default 130), GPU_CHECK_BENCH_BUDGET (default 240: the rows
#   time epoch 1 apart now, about 140-185 s), GPU_CHECK_PROFILE_BUDGET (default 150, only with --only profile; with
#   install, env and data, about 40 s, the run ends within 9 minutes at most),
#   GPU_CHECK_SECONDS (per benchmark row), GPU_CHECK_DATAGEN (the generator script),
#   GPU_CHECK_ENV_TIMEOUT (seconds per env command, default 60), GPU_CHECK_GLIBC (the dry
#   run's guess of the GPU machine's glibc, default 2.39).
# Exit status: 0 when every step passed, 1 when any failed, 2 for bad arguments.
set -uo pipefail
export PYTHONUNBUFFERED=1  # the log keeps the order things happened in

ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$ROOT/gpu-check-out
WHEELS=$ROOT/.whl
WORK=${TMPDIR:-/tmp}/turbofeed-gpu-check
ONLY=""
DRY=0
COUNT=""
usage() { echo "usage: scripts/gpu_check.sh [--out DIR] [--only tests|bench|profile[,...]] [--dry-run] [--wheels DIR] [--work DIR] [--count N]" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --out) [ $# -ge 2 ] || usage; OUT=$2; shift 2 ;;
        --wheels) [ $# -ge 2 ] || usage; WHEELS=$2; shift 2 ;;
        --work) [ $# -ge 2 ] || usage; WORK=$2; shift 2 ;;
        --count) [ $# -ge 2 ] || usage; COUNT=$2; shift 2 ;;
        --only) [ $# -ge 2 ] || usage; ONLY=$2; shift 2
                for part in ${ONLY//,/ }; do case "$part" in tests|bench|profile) ;; *) usage ;; esac; done ;;
        --dry-run) DRY=1; shift ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) usage ;;
    esac
done
mkdir -p "$OUT" "$WORK" || exit 2
OUT=$(cd "$OUT" && pwd); WORK=$(cd "$WORK" && pwd)
[ -d "$WHEELS" ] && WHEELS=$(cd "$WHEELS" && pwd)
PY=${GPU_CHECK_PYTHON:-python3}
if [ "$DRY" = 1 ]; then COUNT=${COUNT:-48}; PER_SHARD=8; else COUNT=${COUNT:-8192}; PER_SHARD=256; fi
# the files that need CUDA first, then the CUDA-aware status checks; the stand-in tests of
# tests/gpu run in CI and behave the same with CUDA present
TESTS=${GPU_CHECK_TESTS:-tests/gpu/test_on_gpu.py tests/gds/test_cuda.py tests/gds/test_status.py tests/test_doctor.py}
ENV_TIMEOUT=${GPU_CHECK_ENV_TIMEOUT:-60}
# dry run: two files that skip without CUDA, and one test that runs only without it
[ "$DRY" = 1 ] && TESTS=${GPU_CHECK_TESTS:-tests/gpu/test_on_gpu.py tests/gds/test_cuda.py \
    tests/gpu/test_gpu_path.py::test_without_a_gpu_gpu_decode_true_warns_once_and_uses_the_cpu}

declare -a RESULTS=()
FAILED=0
step() {  # step NAME FUNCTION: run it, log its time and status, never stop the script
    local name=$1 started=$SECONDS rc
    echo; echo "=== [$name] $(date -u +%H:%M:%S)"
    "$2"; rc=$?
    RESULTS+=("$(printf '%-8s %-6s %4ds' "$name" "$([ $rc = 0 ] && echo ok || echo FAILED)" $((SECONDS - started)))")
    [ $rc = 0 ] || { FAILED=1; echo "=== [$name] FAILED (exit $rc): going on"; }
    return 0
}

fit_wheels() {  # fit_wheels WHEEL...: FITS (array) from scripts/wheel_fit.py; 1 if any was refused
    local verdict path why judge=() refused=0
    [ "$DRY" = 1 ] && judge=(--python 3.12 --glibc "${GPU_CHECK_GLIBC:-2.39}")  # the GPU machine's, as guessed
    FITS=()
    while IFS=$'\t' read -r verdict path why; do
        case "$verdict" in
            fits) FITS+=("$path") ;;
            refused) echo "refused: $(basename "$path"): $why"; refused=1
                     case "$(basename "$path")" in turbofeed-*)
                         echo "  (the native decoder is missing: the CPU rows run the Python path)" ;; esac ;;
            *) echo "wheel_fit.py: $verdict $path $why"; refused=1 ;;
        esac
    done < <("$PY" "$ROOT/scripts/wheel_fit.py" "${judge[@]}" "$@")
    return $refused
}

pip_each() {  # pip_each PIP-ARGS... -- WHEEL...: one call for all; if pip refuses it, one per wheel
    local args=() wheel rc=0
    while [ "$1" != -- ]; do args+=("$1"); shift; done; shift
    [ $# = 0 ] && return 0
    "$PY" -m pip "${args[@]}" "$@" && return 0
    echo "pip failed on the $# wheels together: one at a time"
    for wheel in "$@"; do
        "$PY" -m pip "${args[@]}" "$wheel" || { echo "pip failed: $(basename "$wheel")"; rc=1; }
    done
    return $rc
}

do_install() {
    shopt -s nullglob
    local wheels=("$WHEELS"/*.whl) base=${PYTHONPATH:-} rc=0
    # The checkout's code, whatever happens below (a failed install still tests this tree)
    export PYTHONPATH=$ROOT/src${base:+:$base}
    echo "glibc: $(ldd --version 2>&1 | head -1) (the turbofeed wheel needs 2.34)"
    if [ ${#wheels[@]} = 0 ]; then
        echo "no wheels in $WHEELS: using the environment as it is (scripts/gpu_wheels.sh makes them)"
        [ "$DRY" = 1 ]; return  # a GPU run without the wheels misses simplejpeg, KvikIO, the native decoder
    fi
    # Each wheel's tags against this machine's first: one refused wheel costs only itself
    fit_wheels "${wheels[@]}" || rc=1
    echo "${#FITS[@]} of ${#wheels[@]} wheels fit"
    if [ "$DRY" = 1 ] && [ "${GPU_CHECK_INSTALL:-0}" != 1 ]; then
        # the wheels are cp312: resolve them as the GPU machine will, install nothing
        echo "dry run: resolving ${#FITS[@]} wheels for CPython 3.12 (pip --dry-run, no index)"
        local platforms=(--platform manylinux2014_x86_64) n  # pip matches each tag exactly
        for n in 17 24 27 28 31 34 35 39; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
        pip_each install -q --dry-run --disable-pip-version-check --no-index --no-deps --only-binary=:all: \
            --python-version 3.12 --implementation cp "${platforms[@]}" --target "$WORK/dry-site" -- "${FITS[@]}" || rc=1
        return $rc
    fi
    rm -rf "$WORK/site" "$WORK/src"
    pip_each install -q --disable-pip-version-check --no-index --no-deps --no-compile --no-cache-dir \
        --target "$WORK/site" -- "${FITS[@]}" || rc=1
    mkdir -p "$WORK/src"
    cp -r "$ROOT/src/turbofeed" "$WORK/src/turbofeed"
    find "$WORK/src" \( -name '*.so' -o -name __pycache__ \) -prune -exec rm -rf {} +
    local ext=("$WORK"/site/turbofeed/decode/_crop*.so)
    if [ ${#ext[@]} = 1 ] && [ -d "$WORK/site/turbofeed.libs" ]; then
        cp "${ext[0]}" "$WORK/src/turbofeed/decode/"
        cp -r "$WORK/site/turbofeed.libs" "$WORK/src/turbofeed.libs"
    else
        echo "the turbofeed wheel's native decoder is missing: the CPU rows run the Python path"
    fi
    export PYTHONPATH=$WORK/src:$WORK/site${base:+:$base}
    echo "PYTHONPATH=$PYTHONPATH"
    "$PY" -c "import turbofeed, turbofeed.decode.native as n; print('turbofeed', turbofeed.__file__, n.status()[:2])" || rc=1
    return $rc
}

limited() {  # limited WHAT COMMAND...: COMMAND within $ENV_TIMEOUT s; says so when it ran out
    local what=$1 rc; shift
    timeout --kill-after=5 "$ENV_TIMEOUT" "$@"; rc=$?
    if [ $rc = 124 ] || [ $rc = 137 ]; then echo "$what: timed out after ${ENV_TIMEOUT}s"; fi
    return $rc
}

do_env() {  # each command within $ENV_TIMEOUT s: a hang (cuFile starting under KvikIO) costs a minute, not the window
    local rc=0
    if command -v nvidia-smi >/dev/null; then limited nvidia-smi nvidia-smi || rc=1
    else echo "nvidia-smi: not found"; [ "$DRY" = 1 ] || rc=1; fi
    limited "the module probe" "$PY" - <<'EOF' || rc=1
import platform, sys
import torch
print("python", sys.version.split()[0], platform.platform(), "glibc", platform.libc_ver()[1])
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("device", torch.cuda.get_device_name(0), f"{p.total_memory / 2**30:.0f} GiB", "capability", p.major, p.minor)
for name in ("torchvision", "simplejpeg", "kvikio", "cupy", "nvidia.nvimgcodec"):
    try:
        module = __import__(name, fromlist=["_"])
        print(name, getattr(module, "__version__", "?"), module.__file__)
    except Exception as exc:
        print(name, "-", type(exc).__name__, exc)
EOF
    echo "\$ turbofeed doctor --json"; limited "turbofeed doctor" "$PY" -m turbofeed doctor --json || rc=1
    echo "\$ turbofeed gds-status --json"
    limited "turbofeed gds-status" "$PY" -m turbofeed gds-status --json || echo "(gds-status exit $?)"
    return $rc
}

find_datagen() {
    for candidate in "${GPU_CHECK_DATAGEN:-}" "$WHEELS/make_imagenet_like.py" "$ROOT/shared/bench/make_imagenet_like.py" \
                     "$ROOT/../shared/bench/make_imagenet_like.py"; do
        [ -n "$candidate" ] && [ -f "$candidate" ] && { echo "$candidate"; return; }
    done
}

generate() {  # generate PROCS PER GENERATOR: one process per part, in parallel; 0 if all succeeded
    local procs=$1 per=$2 gen=$3 pids=() i rc=0
    rm -rf "$WORK/data"; mkdir -p "$WORK/data"
    for ((i = 0; i < procs; i++)); do
        if [ -n "$gen" ]; then
            "$PY" "$gen" "$WORK/data/part-$i" --count "$per" --per-shard "$PER_SHARD" --seed "$i" >/dev/null &
        else
            "$PY" -c "import sys; from turbofeed._datagen import make_imagenet_like as m; \
m(sys.argv[1], count=int(sys.argv[2]), per_shard=int(sys.argv[3]), seed=int(sys.argv[4]), progress=False)" \
                "$WORK/data/part-$i" "$per" "$PER_SHARD" "$i" &
        fi
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || rc=1; done
    return $rc
}

do_data() {
    local data=$WORK/data marker="$WORK/data/.made-$COUNT"
    if [ -f "$marker" ]; then echo "$data: $COUNT images already there"; return 0; fi
    local procs; procs=$(nproc 2>/dev/null || echo 4); [ "$procs" -gt 16 ] && procs=16
    [ "$DRY" = 1 ] && procs=2
    local per=$(( (COUNT + procs - 1) / procs )) gen="" i
    # the shared generator (scikit-image, scikit-learn and matplotlib's photos: on the GPU
    # machine); the dry run, and a failing shared one, use turbofeed's copy of the recipe
    [ "$DRY" = 0 ] && gen=$(find_datagen)
    if ! generate "$procs" "$per" "$gen"; then
        [ -n "$gen" ] || { echo "a generator process failed"; return 1; }
        echo "$gen failed: turbofeed's own generator instead"; gen=""
        generate "$procs" "$per" "" || { echo "a generator process failed"; return 1; }
    fi
    for ((i = 0; i < procs; i++)); do  # one folder of uniquely named shards
        for shard in "$data/part-$i"/shard-*.tar; do
            mv "$shard" "$data/shard-$(printf '%02d' "$i")$(basename "$shard" | sed 's/^shard-//')"
        done
        rm -rf "$data/part-$i"
    done
    touch "$marker"
    echo "$data: $(ls "$data"/*.tar | wc -l) shards, $(du -sh "$data" | cut -f1), generator: ${gen:-turbofeed._datagen}"
}

do_tests() {
    local budget=${GPU_CHECK_TEST_BUDGET:-130} args=(-q -rs -p no:cacheprovider)
    "$PY" -c "import pytest_timeout" 2>/dev/null && args+=(--timeout 120)
    echo "\$ pytest ${args[*]} $TESTS   (budget ${budget}s)"
    # shellcheck disable=SC2086
    (cd "$ROOT" && timeout --kill-after=10 "$budget" "$PY" -m pytest "${args[@]}" $TESTS) 2>&1 | tee "$OUT/tests.log"
    local rc=${PIPESTATUS[0]}
    [ "$rc" = 124 ] && echo "the tests ran past their ${budget}s budget"
    return "$rc"
}

do_bench() {
    local budget=${GPU_CHECK_BENCH_BUDGET:-240} args=(--data "$WORK/data" --out "$OUT" --work "$WORK")
    [ "$DRY" = 1 ] && args+=(--dry-run)
    [ -n "${GPU_CHECK_SECONDS:-}" ] && args+=(--seconds "$GPU_CHECK_SECONDS")
    (cd "$ROOT" && PYTHONUNBUFFERED=1 timeout --kill-after=10 "$budget" "$PY" bench/gpu_check.py "${args[@]}")
}

do_profile() {
    (cd "$ROOT" && PYTHONUNBUFFERED=1 timeout --kill-after=10 "${GPU_CHECK_PROFILE_BUDGET:-150}" "$PY" \
        bench/gpu_profile.py --data "$WORK/data" --out "$OUT" ${GPU_PROFILE_STEPS:+--steps "$GPU_PROFILE_STEPS"})
}

wants() {  # wants PART: no --only, or --only names PART
    [ -z "$ONLY" ] && [ "$1" != profile ] && return 0
    case ",$ONLY," in *",$1,"*) return 0 ;; esac
    return 1
}

main() {
    echo "gpu_check.sh $(date -u +%Y-%m-%dT%H:%M:%SZ): root $ROOT, out $OUT, work $WORK, wheels $WHEELS," \
         "$([ "$DRY" = 1 ] && echo "DRY RUN on the CPU" || echo "GPU run"), only: ${ONLY:-everything}"
    step install do_install
    if [ -z "$ONLY" ] || wants tests || wants bench; then step env do_env; fi
    if wants tests; then step tests do_tests; fi  # the GPU tests first: they need no data
    if wants bench || wants profile; then step data do_data; fi
    if wants profile; then step profile do_profile; fi
    if wants bench; then step bench do_bench; fi
    echo; echo "=== summary ($SECONDS s)"; printf '%s\n' "${RESULTS[@]}"
    [ -f "$OUT/gpu_block.md" ] && echo "block for bench/RESULTS.md: $OUT/gpu_block.md"
    return $FAILED
}

main 2>&1 | tee "$OUT/gpu_check.log"
exit "${PIPESTATUS[0]}"
