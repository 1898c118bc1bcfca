"""Streaming s3:// shards on two nodes (issue #17), for real: two torchrun launches of two
processes each on 127.0.0.1, one moto server, and per node its own node cache and its own
counting FaultProxy, so every byte and GET is attributed to the node that sent it.

The node cache holds about 40% of the data, so each node must stream: fetch its blocks of
shards whole, read them, evict them. Per epoch the test checks that each shard was read
by the ranks of one node only and fetched by that node alone, whole and once (its two
ranks share the download; in epoch 1 a node may still hold a shard it fetched before),
that every sample was delivered exactly once across the four ranks, and that all ranks
took the same number of steps. The ranks stop at a barrier after construction and after
each epoch (tests/streaming_worker.py) while the test reads and resets the proxies, so
bytes are counted per epoch; within an epoch they all-reduce once per step, as DDP does.
The dataset is indexed before the nodes start (``turbofeed index``), so construction
downloads no shard.

Bounded in time: every wait has a deadline, and the launches are killed on any failure.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path

import pytest
from builders import free_port

pytest.importorskip("moto")
boto3 = pytest.importorskip("boto3")

from turbofeed._datagen import make_imagenet_like  # noqa: E402
from turbofeed.testing import FaultProxy, LocalS3Server  # noqa: E402

WORKER = str(Path(__file__).resolve().parents[2] / "streaming_worker.py")
BUCKET, PREFIX = "tf-stream", "shards"
NODES, PROCS, EPOCHS, BATCH = 2, 2, 2, 4
SHARDS, PER_SHARD = 8, 24
DEADLINE_S = 300.0
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> dict:
    """8 shards of 24 JPEGs, uploaded to a moto server of this process, and indexed once
    (see :func:`index_once`)."""
    out = tmp_path_factory.mktemp("stream-shards")
    paths = make_imagenet_like(str(out), count=SHARDS * PER_SHARD, per_shard=PER_SHARD, classes=5, seed=4,
                               progress=False)
    shard_of, sizes = {}, {}
    for path in sorted(paths):
        name = os.path.basename(path)
        sizes[f"{BUCKET}/{PREFIX}/{name}"] = os.path.getsize(path)
        with tarfile.open(path) as tar:
            for m in tar:
                if m.name.endswith(".jpg"):
                    shard_of[f"{name}/{m.name.rsplit('.', 1)[0]}"] = f"{BUCKET}/{PREFIX}/{name}"
    with LocalS3Server() as server:
        s3 = boto3.client("s3", endpoint_url=server.endpoint, aws_access_key_id="test",
                          aws_secret_access_key="test", region_name="us-east-1")
        s3.create_bucket(Bucket=BUCKET)
        for path in paths:
            s3.upload_file(path, BUCKET, f"{PREFIX}/{os.path.basename(path)}")
        seed_cache = index_once(server.endpoint, tmp_path_factory.mktemp("index-cache"))
        yield {"server": server, "sizes": sizes, "shard_of": shard_of, "seed_cache": seed_cache}


def index_once(endpoint: str, cache: Path) -> Path | None:
    """Index the dataset before any node starts, so that a node's construction downloads no
    shard and every byte a proxy counts in a phase is that phase's: ``turbofeed index`` (the
    index object next to the shards, found by every loader) when the command exists, else
    one loader's construction here, whose cached per-shard indexes seed each node's cache
    (returned: copy it into a node's cache dir)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test",
               AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true", TURBOFEED_CACHE_DIR=str(cache))
    has_index = subprocess.run([sys.executable, "-m", "turbofeed", "index", "--help"], capture_output=True,
                               timeout=120).returncode == 0
    cmd = [sys.executable, "-m", "turbofeed", "index", f"s3://{BUCKET}/{PREFIX}/"] if has_index else [
        sys.executable, "-c", "import sys, turbofeed; turbofeed.DataLoader(sys.argv[1]).close()",
        f"s3://{BUCKET}/{PREFIX}/"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    if has_index:
        return None
    for name in ("s3", "s3-indexing"):  # the indexes only, no shard
        shutil.rmtree(cache / name, ignore_errors=True)
    return cache


def node_cache(dataset: dict, path: Path) -> Path:
    """A fresh node cache, holding the indexes of :func:`index_once` if it made any."""
    if dataset["seed_cache"] is not None:
        shutil.copytree(dataset["seed_cache"], path)
    return path


def node_env(proxy: FaultProxy, cache: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return {**env, "AWS_ENDPOINT_URL": proxy.endpoint, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true",
            "TURBOFEED_CACHE_DIR": str(cache), "OMP_NUM_THREADS": "1"}


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # torchrun and its workers
            except ProcessLookupError:
                pass
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            pass


def run_two_nodes(dataset: dict, tmp_path: Path, cache_bytes: int) -> tuple[dict, list, list]:
    """Both launches, started together; returns each phase's traffic per node, and per rank
    the key log and the S3 counters after each phase."""
    sync, log = tmp_path / "sync", tmp_path / "keys"
    sync.mkdir()
    port = free_port()
    proxies = [FaultProxy(dataset["server"].endpoint) for _ in range(NODES)]
    procs: list[subprocess.Popen] = []
    outputs = [tmp_path / f"node{n}.out" for n in range(NODES)]
    phases = ["built"] + [f"epoch{e}" for e in range(EPOCHS)]
    traffic: dict[str, list[dict]] = {}

    def failure(why: str) -> str:
        return why + "".join(f"\n--- node {n} ---\n{o.read_text()[-4000:]}" for n, o in enumerate(outputs)
                             if o.exists())

    try:
        for n in range(NODES):
            cmd = [*TORCHRUN, f"--nnodes={NODES}", f"--node_rank={n}", f"--nproc_per_node={PROCS}",
                   "--master_addr=127.0.0.1", f"--master_port={port}", WORKER,
                   "--data", f"s3://{BUCKET}/{PREFIX}/", "--log-keys", str(log), "--sync", str(sync),
                   "--epochs", str(EPOCHS), "--batch-size", str(BATCH), "--cache-bytes", str(cache_bytes)]
            env = node_env(proxies[n], node_cache(dataset, tmp_path / f"cache-node{n}"))
            with open(outputs[n], "w") as out:
                procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                              env=env))
        deadline = time.monotonic() + DEADLINE_S
        for phase in phases:
            while not (sync / f"{phase}.done").exists():
                if any(p.poll() is not None for p in procs):
                    pytest.fail(failure(f"a launch exited before phase {phase} ended: "
                                        f"{[p.poll() for p in procs]}"))
                if time.monotonic() > deadline:
                    pytest.fail(failure(f"phase {phase} not done within {DEADLINE_S:.0f} s"))
                time.sleep(0.02)
            traffic[phase] = [proxy.reset_traffic() for proxy in proxies]
            (sync / f"{phase}.go").touch()
        for p in procs:
            p.wait(max(1.0, deadline - time.monotonic()))
        assert [p.returncode for p in procs] == [0] * NODES, failure("launch failed")
    except subprocess.TimeoutExpired:
        pytest.fail(failure(f"the launches did not exit within {DEADLINE_S:.0f} s"))
    finally:
        stop(procs)
        for proxy in proxies:
            proxy.close()
    logs = [read_jsonl(Path(f"{log}.rank{rank}.jsonl")) for rank in range(NODES * PROCS)]
    counters = [read_jsonl(Path(f"{log}.rank{rank}.s3.jsonl")) for rank in range(NODES * PROCS)]
    return traffic, logs, counters


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def short_key(key: str) -> str:
    return "/".join(key.rsplit("/", 2)[-2:])


def test_two_nodes_stream_disjoint_blocks_each_shard_fetched_once(dataset, tmp_path):
    sizes, shard_of = dataset["sizes"], dataset["shard_of"]
    cache_bytes = int(0.4 * sum(sizes.values()))
    assert cache_bytes < sum(sizes.values()) / NODES  # a node's share does not fit: it must stream
    traffic, logs, counters = run_two_nodes(dataset, tmp_path, cache_bytes)

    # Shards each node fetched whole before (construction included): its cache may still hold them.
    fetched_before = [{s for s, c in t["by_object"].items() if s in sizes and c["bytes"] >= sizes[s]}
                      for t in traffic["built"]]

    def history(shard: str) -> str:
        """The shard's traffic per phase and node, and each rank's S3 counters per phase."""
        fetched = "; ".join(f"{phase}: " + ", ".join(f"node {n} {t['by_object'].get(shard)}"
                                                     for n, t in enumerate(per_node))
                            for phase, per_node in traffic.items())
        keep = ("shards_downloaded", "cache_misses", "evictions", "requests")
        ranks = "; ".join(f"rank {r} " + ", ".join(f"{row['phase']} {({k: row['s3'][k] for k in keep})}"
                                                   for row in rows if row["s3"])
                          for r, rows in enumerate(counters))
        return f"{fetched}\nS3 counters (cumulative): {ranks}"

    for epoch in range(EPOCHS):
        rows = [[row for row in rank_log if row["epoch"] == epoch] for rank_log in logs]
        # Equal steps on all ranks; every sample exactly once across the four ranks.
        steps = [len(r) for r in rows]
        assert len(set(steps)) == 1 and steps[0] > 0, f"epoch {epoch}: steps per rank {steps}"
        delivered = Counter(short_key(k) for r in rows for row in r for k in row["keys"])
        assert set(delivered) == set(shard_of), f"epoch {epoch}: missing {sorted(set(shard_of) - set(delivered))}"
        repeated = {k: c for k, c in delivered.items() if c != 1}
        assert not repeated, f"epoch {epoch}: delivered more than once: {repeated}"
        # Each shard read by the ranks of one node only: nodes own disjoint blocks.
        readers: dict[str, set[int]] = {}
        for rank, r in enumerate(rows):
            for row in r:
                assert row["node"] == rank // PROCS
                for k in row["keys"]:
                    readers.setdefault(shard_of[short_key(k)], set()).add(row["node"])
        shared = {s: sorted(n) for s, n in readers.items() if len(n) > 1}
        assert not shared, f"epoch {epoch}: shards read on both nodes: {shared}"
        # Each shard fetched whole, once, by the node that read it and by no other (its two
        # ranks shared the download); in a later epoch a node may still hold it from before.
        by_node = [t["by_object"] for t in traffic[f"epoch{epoch}"]]
        for shard, size in sizes.items():
            (reader,) = readers[shard]
            got = [by_node[n].get(shard, {"bytes": 0, "gets": 0}) for n in range(NODES)]
            other = got[1 - reader]
            assert other["bytes"] == other["gets"] == 0, f"epoch {epoch}: {shard} fetched by node {1 - reader} " \
                                                         f"that did not read it ({history(shard)})"
            if shard not in fetched_before[reader]:
                assert got[reader]["bytes"] == size, \
                    f"epoch {epoch}: {shard} ({size} bytes) read on node {reader}: {history(shard)}"
            else:
                assert got[reader]["bytes"] in (0, size), f"epoch {epoch}: {shard} on node {reader}: {history(shard)}"
            if got[reader]["bytes"]:
                fetched_before[reader].add(shard)
        # Nothing but the shards (and listings) crossed the wire.
        for n in range(NODES):
            extra = {k: v for k, v in by_node[n].items() if k not in sizes and "/" in k}
            assert not extra, f"epoch {epoch}, node {n}: other objects fetched: {extra}"


def test_example_streams_on_one_node(dataset, tmp_path):
    """examples/distributed_ddp.py --streaming --cache-bytes: two ranks of one node, one
    epoch, each sample once, equal steps, each shard fetched once for the node."""
    sizes = dataset["sizes"]
    example = str(Path(__file__).resolve().parents[3] / "examples" / "distributed_ddp.py")
    log = tmp_path / "keys"
    with FaultProxy(dataset["server"].endpoint) as proxy:
        cmd = [*TORCHRUN, f"--nproc_per_node={PROCS}", f"--master_port={free_port()}", "--master_addr=127.0.0.1",
               example, "--data-path", f"s3://{BUCKET}/{PREFIX}/", "--gpus", "0", "--batch-size", str(BATCH),
               "--image-size", "32", "--workers", "1", "--log-keys", str(log), "--streaming",
               "--cache-bytes", str(int(0.4 * sum(sizes.values())))]
        out = tmp_path / "node.out"
        with open(out, "w") as f:
            launch = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True,
                                      env=node_env(proxy, node_cache(dataset, tmp_path / "cache")))
        try:
            launch.wait(DEADLINE_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"no exit within {DEADLINE_S:.0f} s\n{out.read_text()[-4000:]}")
        finally:
            stop([launch])
        assert launch.returncode == 0, out.read_text()[-4000:]
        fetched = proxy.traffic()["by_object"]
    rows = [[json.loads(line) for line in Path(f"{log}.rank{r}.jsonl").read_text().splitlines()]
            for r in range(PROCS)]
    assert len(rows[0]) == len(rows[1]) > 0
    delivered = Counter(short_key(k) for r in rows for row in r for k in row["keys"])
    assert set(delivered) == set(dataset["shard_of"]) and set(delivered.values()) == {1}
    # Construction (which may download a shard to index it) and the epoch together: each
    # shard fetched whole for the node, at most once for each, never once per rank.
    bad = {s: (fetched.get(s), size) for s, size in sizes.items() if not size <= fetched[s]["bytes"] <= 2 * size}
    assert not bad, f"(traffic, size) of shards fetched more than twice or less than once: {bad}"
