"""io.local.tarscan on shards written by real tar programs, not Python's ``tarfile``: GNU
tar in each of its formats, bsdtar (libarchive) and busybox tar where installed. Every
shard indexes to ``tarfile``'s members, and the plain ones (ustar, v7, GNU headers
without long-name records) take the fast walk, or a shard of 20,000 samples would index
at tarfile's speed again. Patched headers (base-256 numbers, malformed numeric fields
under a checksum fixed to match) are handed to tarfile and give its answer.

Tests that need a program skip, naming it, where it is missing; ``scripts/setup.sh``
installs bsdtar and busybox in CI."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from builders import small_jpeg
from tar_compare import scan_both, tarfile_members, walked


BLOCK = 512
SHORT = ["d/k000.jpg", "d/k000.cls", "d/k001.jpg", "d/k001.cls", "d/empty.cls", "d/k002.bin", "d/k003.bin"]
NAME_100 = "d/" + "n" * 94 + ".cls"  # exactly 100 bytes: fills the name field, no NUL after it
LONG = "d/" + "p" * 70 + "/" + "q" * 60 + ".jpg"  # 137 bytes: ustar's prefix + name, or a long-name record
PREFIX_1 = "d/" + "r" * 96 + ".jpg"  # 102 bytes: in ustar a prefix of one byte ("d") and a name of 100
UTF8 = "d/é-ü.cls"  # bytes >= 0x80: the unsigned and the signed header sums differ (GNU tar writes unsigned)


def payload(name: str, i: int) -> bytes:
    if name.endswith(".jpg"):
        return small_jpeg(i)
    if name.endswith("empty.cls"):
        return b""
    if name.endswith(".bin"):  # one exactly a block, one a byte more: both paddings
        return bytes(range(256)) * 2 + (b"!" if name.endswith("k003.bin") else b"")
    return str(i).encode()


def make_tree(root: Path, names: list[str]) -> Path:
    for i, name in enumerate(names):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(payload(name, i))
    return root


def need(program: str) -> str:
    found = shutil.which(program)
    if found is None:
        pytest.skip(f"{program} is not installed (bash scripts/setup.sh installs it in CI)")
    return found


def write_with(tool: str, fmt: str | None, src: Path, out: Path, *extra: str) -> Path:
    """Run the real program over ``src/d`` into ``out``."""
    if tool == "gnu":
        cmd = [need("tar"), f"--format={fmt}", "--sort=name", "--owner=0", "--group=0", "--numeric-owner",
               "--mtime=@0", *extra, "-cf", str(out), "-C", str(src), "d"]
    elif tool == "bsdtar":
        cmd = [need("bsdtar"), "--format", fmt, *extra, "-cf", str(out), "-C", str(src), "d"]
    else:
        cmd = [need("busybox"), "tar", *extra, "-cf", str(out), "-C", str(src), "d"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (cmd, done.stderr)
    return out


# (tool, format, names, whether the fast walk reads it: plain headers only)
CASES = [
    ("gnu", "gnu", SHORT, True), ("gnu", "gnu", SHORT + [NAME_100, UTF8], True), ("gnu", "gnu", SHORT + [LONG], False),
    ("gnu", "oldgnu", SHORT, True), ("gnu", "oldgnu", SHORT + [NAME_100], False),  # a ././@LongLink record
    ("gnu", "ustar", SHORT + [NAME_100, LONG, PREFIX_1, UTF8], True),  # long names split into prefix and name
    ("gnu", "posix", SHORT + [NAME_100, LONG], False),  # a pax header before every member
    ("gnu", "v7", SHORT + [NAME_100], True),  # old-style headers: no magic, type NUL
    ("bsdtar", "ustar", SHORT + [NAME_100, LONG, PREFIX_1], True),
    ("bsdtar", "paxr", SHORT + [NAME_100], True),  # "restricted pax": plain ustar where it can
    ("bsdtar", "pax", SHORT + [NAME_100], False),
    ("bsdtar", "gnutar", SHORT + [NAME_100], True),
    ("bsdtar", "v7tar", SHORT, True),  # its directories are type NUL with a trailing slash
    ("busybox", None, SHORT, True), ("busybox", None, SHORT + [NAME_100], False),  # GNU long-name record
]


@pytest.mark.parametrize("tool,fmt,names,plain", CASES,
                         ids=[f"{t}-{f or 'default'}-{len(n)}" for t, f, n, _ in CASES])
def test_shards_written_by_tar_programs_index_as_tarfile_reads_them(tmp_path, monkeypatch, tool, fmt, names, plain):
    src = make_tree(tmp_path / "src", names)
    shard = write_with(tool, fmt, src, tmp_path / "s.tar")
    expected = tarfile_members(shard)
    assert sorted(m[0] for m in expected) == sorted(names)  # the program wrote what we gave it
    with tarfile.open(shard) as tf:
        for name, offset, size in expected:
            assert tf.extractfile(name).read() == payload(name, names.index(name))
    fast, slow = scan_both(shard, monkeypatch)
    assert fast == slow == (expected, None)
    assert (walked(shard) == expected) if plain else (walked(shard) is None)


def test_a_uid_too_large_for_octal_is_base256_or_pax_and_indexed_by_tarfile(tmp_path, monkeypatch):
    """GNU tar writes a uid too large for 7 octal digits in base-256 (``gnu``) or a pax
    record (``posix``). tarfile reads both: so does the index."""
    src = make_tree(tmp_path / "src", SHORT)
    for fmt in ("gnu", "posix"):
        shard = write_with("gnu", fmt, src, tmp_path / f"{fmt}.tar", "--owner=3000000", "--group=2097152")
        with open(shard, "rb") as f:
            first = f.read(BLOCK)
        if fmt == "gnu":
            assert first[108] & 0x80 and first[116] & 0x80  # base-256 uid and gid
        with tarfile.open(shard) as tf:
            assert {m.uid for m in tf} == {3000000}
        expected = tarfile_members(shard)
        fast, slow = scan_both(shard, monkeypatch)
        assert fast == slow == (expected, None) and len(expected) == len(SHORT)
        assert walked(shard) is None  # not octal: the fast walk hands it on


@pytest.fixture(scope="module")
def many_members(tmp_path_factory) -> Path:
    """A GNU tar shard of 10,000 members (5,000 samples), so the header check runs in a
    batch (8,192 headers) and again over the rest."""
    root = tmp_path_factory.mktemp("many")
    d = root / "src" / "d"
    d.mkdir(parents=True)
    for i in range(5000):
        (d / f"{i:05d}.cls").write_bytes(str(i % 10).encode())
        (d / f"{i:05d}.txt").write_bytes(b"x" * (i % 700))
    need("tar")
    return write_with("gnu", "gnu", root / "src", root / "many.tar")


def test_a_shard_of_10000_members_takes_the_fast_walk(many_members, monkeypatch):
    expected = tarfile_members(many_members)
    assert len(expected) == 10_000
    assert walked(many_members) == expected
    fast, slow = scan_both(many_members, monkeypatch)
    assert fast == slow == (expected, None)


@pytest.mark.parametrize("member", [3, 8190, 8191, 9999])
def test_a_bad_header_before_or_after_the_batch_boundary_goes_to_tarfile(many_members, tmp_path, monkeypatch,
                                                                          member):
    """One header's mode field made non-octal, its checksum fixed so the header still
    "looks right": in the first batch of 8,192 headers, at its edge, or in the last
    partial one, the fast walk refuses the shard and tarfile stops there, as in
    ``_scan`` without the fast walk."""
    data = bytearray(many_members.read_bytes())
    offsets = [offset - BLOCK for _, offset, _ in tarfile_members(many_members)]
    header = offsets[member]
    patch_field(data, header, 100, b"0000x44\0")
    path = tmp_path / "bad.tar"
    path.write_bytes(data)
    assert walked(path) is None
    fast, slow = scan_both(path, monkeypatch)
    assert fast == slow
    assert fast[1] is not None and fast[1].offset == header  # the damage is where the patch is


def checksum(header: bytes) -> bytes:
    """The unsigned header checksum, written as GNU tar writes it (6 octal digits, NUL, space)."""
    total = sum(header[:148]) + 8 * ord(" ") + sum(header[156:BLOCK])
    return b"%06o\0 " % total


def patch_field(data: bytearray, header: int, at: int, value: bytes) -> None:
    """Write ``value`` at ``header + at`` and fix the header's checksum to match."""
    data[header + at:header + at + len(value)] = value
    data[header + 148:header + 156] = checksum(bytes(data[header:header + BLOCK]))


# (field offset, new bytes, whether tarfile and the fast walk still accept the header)
PATCHES = [
    (100, b"0000644 ", True),      # mode: trailing space instead of NUL
    (100, b"  00644\0", True),     # mode: leading spaces
    (108, b"\0\0\0\0\0\0\0\0", True),  # uid: empty (0)
    (136, b"14371573000 ", True),  # mtime: a space where GNU tar writes the NUL
    (124, b"000000000001", True),  # size: 12 digits, no NUL (the member's real size, 1)
    (100, b"00 0644\0", False),    # mode: a space between digits
    (108, b"0000089\0", False),    # uid: not octal
    (116, b"\x80\0\0\0\0\0\0\x07", None),  # gid: base-256 7 (tarfile reads it; the walk hands it on)
    (124, b"\x80" + bytes(10) + b"\x01", None),  # size: base-256 1, the member's real size
    (124, b"0000000000x\0", False),  # size: not octal
    (329, b"000000x\0", False),    # devmajor: not octal (tarfile parses it too)
    (337, b"0 0\0\0\0\0\0", False),  # devminor: a space between digits
]


@pytest.mark.parametrize("at,value,accepted", PATCHES, ids=[f"{a}-{v!r}" for a, v, _ in PATCHES])
@pytest.mark.parametrize("which", [0, 1], ids=["first-member", "second-member"])
def test_malformed_numeric_fields_under_a_valid_checksum(tmp_path, monkeypatch, at, value, accepted, which):
    """A GNU tar shard with one numeric field patched and the checksum recomputed: what
    tarfile accepts the fast walk reads the same way; what it refuses (or reads as
    base-256) goes to tarfile, and the index says what tarfile says."""
    src = make_tree(tmp_path / "src", ["d/a.cls", "d/bb.cls"])
    shard = write_with("gnu", "gnu", src, tmp_path / "s.tar")
    data = bytearray(shard.read_bytes())
    header = [offset - BLOCK for _, offset, _ in tarfile_members(shard)][which]
    if at == 124 and accepted is None:
        assert data[header + 124:header + 136] == b"00000000001\0"  # the base-256 1 is the same size
    patch_field(data, header, at, value)
    path = tmp_path / "patched.tar"
    path.write_bytes(data)
    fast, slow = scan_both(path, monkeypatch)
    assert fast == slow
    if accepted is None or accepted:
        assert fast == (tarfile_members(path), None) and len(fast[0]) == 2
    assert (walked(path) is not None) == bool(accepted)


def test_a_signed_checksum_as_old_tars_wrote_is_accepted(tmp_path, monkeypatch):
    """Some old tars summed the header as signed bytes: a name with bytes >= 0x80 then
    has another checksum. tarfile accepts either; so does the fast walk."""
    name = "d/é.cls"
    src = make_tree(tmp_path / "src", [name, "d/b.cls"])
    shard = write_with("gnu", "ustar", src, tmp_path / "s.tar")
    data = bytearray(shard.read_bytes())
    header = tarfile_members(shard)[0][1] - BLOCK if tarfile_members(shard)[0][0] == name else \
        tarfile_members(shard)[1][1] - BLOCK
    block = bytes(data[header:header + BLOCK])
    signed = sum(b - 256 if b > 127 else b for b in block[:148] + block[156:]) + 8 * ord(" ")
    assert signed != int(block[148:154], 8)  # the name's high bytes make the two differ
    data[header + 148:header + 156] = b"%06o\0 " % signed
    path = tmp_path / "signed.tar"
    path.write_bytes(data)
    expected = tarfile_members(path)
    assert sorted(m[0] for m in expected) == sorted([name, "d/b.cls"])
    assert walked(path) == expected
    fast, slow = scan_both(path, monkeypatch)
    assert fast == slow == (expected, None)
    data[header + 148:header + 156] = b"%06o\0 " % (signed + 1)  # neither sum: damage, as tarfile says
    path.write_bytes(data)
    assert walked(path) is None
    fast, slow = scan_both(path, monkeypatch)
    assert fast == slow and fast[1] is not None


# the numeric fields of a tar header: (offset, length), as POSIX ustar lays them out
NUMERIC_FIELDS = {"mode": (100, 8), "uid": (108, 8), "gid": (116, 8), "size": (124, 12), "mtime": (136, 12),
                  "devmajor": (329, 8), "devminor": (337, 8)}


@pytest.mark.parametrize("end", ["first", "last"])
@pytest.mark.parametrize("field", sorted(NUMERIC_FIELDS))
def test_a_non_octal_byte_at_either_end_of_a_numeric_field(tmp_path, monkeypatch, field, end):
    """A ``9`` in the first or the last byte of any numeric field (checksum fixed):
    tarfile refuses the header, so the fast walk must too, whichever field and byte."""
    src = make_tree(tmp_path / "src", ["d/a.cls", "d/bb.cls"])
    shard = write_with("gnu", "ustar", src, tmp_path / "s.tar")
    data = bytearray(shard.read_bytes())
    header = tarfile_members(shard)[1][1] - BLOCK
    at, length = NUMERIC_FIELDS[field]
    patch_field(data, header, at if end == "first" else at + length - 1, b"9")
    path = tmp_path / "patched.tar"
    path.write_bytes(data)
    assert walked(path) is None
    fast, slow = scan_both(path, monkeypatch)
    assert fast == slow and fast[1] is not None and fast[1].offset == header


def test_an_empty_name_field_reads_as_tarfile_reads_it(tmp_path, monkeypatch):
    """A header whose name field is all NULs (checksum fixed): an empty name, in both
    readers, not 100 NUL characters."""
    src = make_tree(tmp_path / "src", ["d/a.cls", "d/bb.cls"])
    shard = write_with("gnu", "gnu", src, tmp_path / "s.tar")
    data = bytearray(shard.read_bytes())
    header = tarfile_members(shard)[1][1] - BLOCK
    patch_field(data, header, 0, bytes(100))
    path = tmp_path / "noname.tar"
    path.write_bytes(data)
    expected = tarfile_members(path)
    assert [m[0] for m in expected] == ["d/a.cls", ""]
    assert walked(path) == expected
    fast, slow = scan_both(path, monkeypatch)
    assert fast == slow == (expected, None)


def test_an_all_nul_size_and_mixed_checksum_spellings_take_the_fast_walk(tmp_path, monkeypatch):
    """What tarfile reads as plain, the fast walk reads too: an empty member whose size
    field is all NULs (0), and checksums spelt as each writer spells them in one shard
    (GNU ``%06o NUL SP``, 7 digits and a NUL, leading spaces as V7 tar wrote them)."""
    src = make_tree(tmp_path / "src", ["d/a.cls", "d/b.cls", "d/c.cls", "d/empty.cls"])
    shard = write_with("gnu", "ustar", src, tmp_path / "s.tar")
    data = bytearray(shard.read_bytes())
    headers = {name: offset - BLOCK for name, offset, _ in tarfile_members(shard)}
    patch_field(data, headers["d/empty.cls"], 124, bytes(12))
    for name, spell in (("d/b.cls", b"%07o\0"), ("d/c.cls", b"%6o\0 ")):  # "0011610\0", " 11610\0 "
        at = headers[name]
        current = int(bytes(data[at + 148:at + 154]), 8)
        assert len(spell % current) == 8
        data[at + 148:at + 156] = spell % current
    path = tmp_path / "spelt.tar"
    path.write_bytes(data)
    expected = tarfile_members(path)
    assert [m[0] for m in expected] == ["d/a.cls", "d/b.cls", "d/c.cls", "d/empty.cls"]
    assert walked(path) == expected
    fast, slow = scan_both(path, monkeypatch)
    assert fast == slow == (expected, None)


def test_a_full_prefix_field_ends_where_the_header_pads(tmp_path, monkeypatch):
    """A ustar prefix of all 155 bytes has no NUL: the name ends at the field's end, not
    at a stray byte in the padding after it (tarfile reads the 155 bytes)."""
    folder = "d/" + "s" * 153
    src = make_tree(tmp_path / "src", [folder + "/f.cls"])
    shard = tmp_path / "s.tar"  # the file alone: its folder's own entry would not fit ustar
    subprocess.run([need("tar"), "--format=ustar", "--no-recursion", "-cf", str(shard), "-C", str(src),
                    folder + "/f.cls"], check=True, capture_output=True, timeout=120)
    data = bytearray(shard.read_bytes())
    header = tarfile_members(shard)[0][1] - BLOCK
    assert data[header + 345:header + 500] == folder.encode()
    patch_field(data, header, 500, b"X")
    path = tmp_path / "pad.tar"
    path.write_bytes(data)
    expected = tarfile_members(path)
    assert [m[0] for m in expected] == [folder + "/f.cls"]
    assert walked(path) == expected
    fast, slow = scan_both(path, monkeypatch)
    assert fast == slow == (expected, None)
