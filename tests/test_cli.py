"""The `turbofeed` command as a user runs it: a real subprocess per command."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest


def run_cli(*args: str, cwd: str | None = None, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "turbofeed", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env=env)


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> str:
    out = str(tmp_path_factory.mktemp("cli") / "ds")
    done = run_cli("make-dataset", out, "--count", "24", "--per-shard", "10", "--classes", "3")
    assert done.returncode == 0, done.stderr
    assert "wrote 3 shards" in done.stdout
    return out


def test_make_dataset_writes_complete_shards(made):
    assert sorted(os.listdir(made)) == ["shard-000000.tar", "shard-000001.tar", "shard-000002.tar"]


def test_inspect_reports_counts_classes_and_sizes(made):
    done = run_cli("inspect", made, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["samples"] == 24 and report["sources"] == 3
    assert 1 <= report["classes"] <= 3 and report["formats"] == {"jpeg": 24}
    assert 200 <= min(report["height_median"], report["width_median"]) <= 600  # ImageNet-like
    assert 40 < report["kib_mean"] < 200


def test_bench_streams_and_prints_throughput(made):
    done = run_cli("bench", made, "--epochs", "1", "--warmup", "0", "--batch-size", "8", "--workers", "2")
    assert done.returncode == 0, done.stderr
    assert "24 samples, 3 batches of 8" in done.stdout
    rate = float(done.stdout.split("median ")[1].split(" images/s")[0])
    assert rate > 0
    assert "decode.cpu" in done.stdout  # the stage profile


def test_bench_eval_and_float_pipelines(made):
    for pipeline in ("eval", "train-float"):
        done = run_cli("bench", made, "--epochs", "1", "--warmup", "0", "--pipeline", pipeline)
        assert done.returncode == 0 and "images/s" in done.stdout, done.stderr


def test_make_dataset_converts_an_image_folder(tmp_path):
    folder = str(tmp_path / "folder")
    assert run_cli("make-dataset", folder, "--count", "12", "--classes", "3", "--layout", "folder").returncode == 0
    shards = str(tmp_path / "shards")
    done = run_cli("make-dataset", shards, "--from-folder", folder, "--per-shard", "5")
    assert done.returncode == 0, done.stderr
    report = json.loads(run_cli("inspect", shards, "--json").stdout)
    folder_report = json.loads(run_cli("inspect", folder, "--json").stdout)
    assert report["samples"] == folder_report["samples"] == 12
    assert report["classes"] == folder_report["classes"]


def test_errors_are_one_line_with_exit_code_2(tmp_path):
    done = run_cli("inspect", str(tmp_path / "missing.tar"))
    assert done.returncode == 2
    assert done.stderr.strip() == f"turbofeed: error: no such file or directory: {tmp_path / 'missing.tar'}"


# --- First contact (issue 19): every error is one line, exit 2; help shows every default ---

def _one_line_error(done: subprocess.CompletedProcess) -> str:
    """The whole stderr, checked to be one ``turbofeed: error:`` line (no traceback, no usage)."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert len(lines) == 1 and lines[0].startswith("turbofeed: error: "), done.stderr
    return lines[0]


def test_python_m_turbofeed_and_version():
    import turbofeed

    done = run_cli("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"turbofeed {turbofeed.__version__}\n"


@pytest.mark.parametrize("argv,named", [
    (["bench", "{data}", "--batch-size", "0"], ["--batch-size", "0"]),
    (["bench", "{data}", "--workers", "-1"], ["--workers", "-1"]),
    (["bench", "{data}", "--size", "0"], ["--size", "0"]),
    (["bench", "{data}", "--epochs", "0"], ["--epochs", "0"]),
    (["bench", "{data}", "--warmup", "-1"], ["--warmup", "-1"]),
    (["bench", "--count", "0"], ["--count", "0"]),  # before making any demo set
    (["bench", "{data}", "--batch-size", "lots"], ["--batch-size", "lots"]),
    (["convert", "{data}", "{out}", "--to", "npy", "--size", "0"], ["--size", "0"]),
    (["convert", "{data}", "{out}", "--to", "npy", "--workers", "0"], ["--workers", "0"]),
    (["convert", "{data}", "{out}", "--to", "tar", "--per-shard", "0"], ["--per-shard", "0"]),
    (["convert", "{data}", "{out}", "--to", "tar", "-o", "images"], ["--option", "images"]),
    (["inspect", "{data}", "--probe", "-5"], ["--probe", "-5"]),
    (["make-dataset", "{out}", "--classes", "0"], ["--classes", "0"]),
    (["make-dataset", "{out}", "--count", "-5"], ["--count", "-5"]),
    (["make-dataset", "{out}", "--per-shard", "0"], ["--per-shard", "0"]),
    (["make-dataset", "{out}", "--seed", "-1"], ["--seed", "-1"]),
    (["make-dataset", "{out}", "--from-folder", "{missing}"], ["{missing}"]),
    (["bench", "{data}", "--no-such-option"], ["--no-such-option"]),
    ([], ["COMMAND"]),
])
def test_nonsense_arguments_are_one_line_errors(made, tmp_path, argv, named):
    """Each names the option and the value it refuses, and nothing is written."""
    fill = {"data": made, "out": str(tmp_path / "out"), "missing": str(tmp_path / "nonexistent")}
    done = run_cli(*[a.format(**fill) for a in argv])
    line = _one_line_error(done)
    for word in named:
        assert word.format(**fill) in line
    assert not os.path.exists(tmp_path / "out")
    assert "wrote" not in done.stdout


def test_os_errors_are_one_line(tmp_path):
    """An OSError (here: the output lies below a plain file) is reported, not raised."""
    (tmp_path / "file").write_text("x")
    line = _one_line_error(run_cli("make-dataset", str(tmp_path / "file" / "ds"), "--count", "2"))
    assert str(tmp_path / "file") in line


def test_make_dataset_refuses_a_used_folder_and_force_replaces_it(tmp_path):
    """A second run into the same folder would leave the first run's extra shards behind
    (they would silently join the dataset): it is refused; --force replaces them."""
    out = str(tmp_path / "ds")
    assert run_cli("make-dataset", out, "--count", "8", "--per-shard", "2", "--classes", "2").returncode == 0
    assert len(os.listdir(out)) == 4
    assert run_cli("inspect", out, "--json").returncode == 0  # a loader: the dataset index and its lock
    assert len(os.listdir(out)) == 6
    line = _one_line_error(run_cli("make-dataset", out, "--count", "4", "--per-shard", "4"))
    assert out in line and "--force" in line
    assert len(os.listdir(out)) == 6  # untouched
    done = run_cli("make-dataset", out, "--count", "4", "--per-shard", "4", "--force")
    assert done.returncode == 0, done.stderr
    assert os.listdir(out) == ["shard-000000.tar"]
    assert json.loads(run_cli("inspect", out, "--json").stdout)["samples"] == 4


def test_make_dataset_force_never_deletes_files_it_did_not_write(tmp_path):
    out = tmp_path / "ds"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    line = _one_line_error(run_cli("make-dataset", str(out), "--count", "2", "--force"))
    assert "notes.txt" in line
    assert os.listdir(out) == ["notes.txt"]


def test_bench_demo_set_follows_count(tmp_path):
    """Without DATA, bench makes a demo set of --count images, once per count: a second
    run with another --count streams that many, not the cached set of the first."""
    env = {**os.environ, "TURBOFEED_CACHE_DIR": str(tmp_path / "cache")}
    for count in ("8", "12", "8"):
        done = run_cli("bench", "--count", count, "--batch-size", "4", "--workers", "1",
                             "--epochs", "1", "--warmup", "0", env=env)
        assert done.returncode == 0, done.stderr
        assert f"{count} samples, " in done.stdout


def test_help_is_plain_text_with_every_option_explained():
    """No reStructuredText markup; every option of every command has help and shows its
    default, or says it is required (argparse prints options as ``  -x, --long ...``, help
    continued indented)."""
    top = run_cli("--help")
    assert top.returncode == 0 and "``" not in top.stdout
    assert "--version" in top.stdout
    commands = ["make-dataset", "convert", "index", "inspect", "bench", "gds-status", "doctor"]
    for name in commands:
        assert name in top.stdout
    for name in commands:
        done = run_cli(name, "--help")
        assert done.returncode == 0, done.stderr
        assert "``" not in done.stdout
        positionals = done.stdout.partition("\npositional arguments:\n")[2].partition("\n\n")[0]
        for entry in re.split(r"\n(?=  \S)", positionals.strip("\n")) if positionals else []:
            assert re.search(r"\S(\s{2,}|\n\s+)\S", entry), f"turbofeed {name}: no help: {entry}"
        options = done.stdout.split("\noptions:\n", 1)[1]
        for entry in re.split(r"\n(?=  -)", options.strip("\n")):
            flat = " ".join(entry.split())
            if not flat.startswith("-h, --help"):
                assert "default" in flat or flat.endswith("(required)"), f"turbofeed {name}: {flat}"


def test_index_writes_one_file_that_loaders_then_use(tmp_path):
    data = str(tmp_path / "ds")
    assert run_cli("make-dataset", data, "--count", "12", "--per-shard", "4", "--classes", "3").returncode == 0
    done = run_cli("index", data)
    assert done.returncode == 0, done.stderr
    found = re.fullmatch(r"wrote (\S+): 3 shards, 12 samples, [\d.]+ KiB \(([\d.]+) bytes/sample\) in [\d.]+ s\n",
                         done.stdout)
    assert found and found.group(1) == os.path.join(data, "turbofeed.index"), done.stdout
    assert float(found.group(2)) == pytest.approx(os.path.getsize(found.group(1)) / 12, abs=0.1)
    report = json.loads(run_cli("inspect", data, "--json", "--probe", "0").stdout)
    assert report["samples"] == 12 and report["sources"] == 3  # the index is no shard
    assert report["dataset_index"] == found.group(1)
    out = str(tmp_path / "other" / "ds.index")
    done = run_cli("index", os.path.join(data, "shard-00000{0,1}.tar"), "--out", out, "--threads", "1")
    assert done.returncode == 0 and done.stdout.startswith(f"wrote {out}: 2 shards, 8 samples"), done.stderr
    assert f"turbofeed.Dataset(..., index={out!r})" in done.stdout  # what loaders take (test_index_trust.py)


def test_index_of_something_else_than_tar_shards_is_a_one_line_error(tmp_path):
    made = run_cli("make-dataset", str(tmp_path / "images"), "--count", "4", "--layout", "folder")
    assert made.returncode == 0, made.stderr
    done = run_cli("index", str(tmp_path / "images"))
    assert done.returncode == 2 and done.stdout == ""
    assert re.fullmatch(r"turbofeed: error: \S+: the dataset index describes tar shards .*\n", done.stderr), done.stderr


def test_doctor_is_a_command():
    done = run_cli("doctor", "--help")
    assert done.returncode == 0, done.stderr
    assert "--json" in done.stdout


def test_bench_profile_lists_only_stages_that_ran(made):
    """On the CPU path the GPU decode stage never runs: no row of 0.000 s for it."""
    done = run_cli("bench", made, "--epochs", "1", "--warmup", "0", "--batch-size", "8", "--workers", "1")
    assert done.returncode == 0, done.stderr
    profile = done.stdout.split("stage profile (seconds in the worker threads; then the consumer's wait):\n", 1)[1]
    assert "decode.cpu" in profile and "decode.gpu" not in profile
    # the consumer's wait is no worker stage (#27): its own last line, no share of the workers' time
    rows = profile.split("bad samples:")[0].strip().splitlines()
    assert rows[-1].startswith("wait ") and "not a worker" in rows[-1], rows
    assert sum(float(r.split()[3].rstrip("%")) for r in rows[:-1]) == pytest.approx(100, abs=0.5)


def test_a_closed_pipe_is_not_a_traceback(made):
    """``turbofeed inspect DATA --json | head -c0``: the reader is gone before the first
    write; the command ends quietly with the shell's SIGPIPE status."""
    proc = subprocess.Popen([sys.executable, "-m", "turbofeed", "inspect", made, "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # before the child has even imported turbofeed
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert stderr == ""


def test_ctrl_c_is_one_line_with_exit_130(tmp_path):
    out = tmp_path / "ds"
    proc = subprocess.Popen([sys.executable, "-m", "turbofeed", "make-dataset", str(out), "--count", "100000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            # a shell's background job inherits SIGINT ignored; Python then never raises
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while not (out.is_dir() and os.listdir(out)) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert stderr.strip() == "turbofeed: error: interrupted"
    assert not [n for n in os.listdir(out) if n.endswith(".tmp")]  # no half-written shard left


def test_unexpected_exceptions_are_one_line_too(monkeypatch, capsys):
    """A bug still ends in one line (exit 2); TURBOFEED_TRACEBACK=1 shows the traceback."""
    from turbofeed import cli

    def broken(args):
        raise RuntimeError("boom")

    monkeypatch.setattr(cli, "cmd_inspect", broken)
    assert cli.main(["inspect", "x"]) == 2
    assert capsys.readouterr().err == "turbofeed: error: internal error: RuntimeError: boom " \
                                      "(set TURBOFEED_TRACEBACK=1 to see where)\n"
    monkeypatch.setenv("TURBOFEED_TRACEBACK", "1")
    with pytest.raises(RuntimeError):
        cli.main(["inspect", "x"])


def test_inspect_names_an_index_built_in_memory_as_such(tmp_path):
    """A pattern's index goes to the index cache; a cache others can write is not believed,
    so the index is built in memory, and inspect says so instead of naming a file."""
    made = str(tmp_path / "ds")  # its own data: no index beside it from another test
    assert run_cli("make-dataset", made, "--count", "24", "--per-shard", "10", "--classes", "3").returncode == 0
    cache = tmp_path / "shared-cache"
    cache.mkdir()
    os.chmod(cache, 0o777)
    env = {**os.environ, "TURBOFEED_CACHE_DIR": str(cache)}
    done = run_cli("inspect", os.path.join(made, "shard-*.tar"), "--json", "--probe", "0", env=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["samples"] == 24 and report["dataset_index"] == "(built in memory)", report
    assert "indexing the shards in memory" in done.stderr
