"""turbofeed on a local Ray cluster of two nodes (``ray.cluster_utils.Cluster``: a head
with two logical CPUs and a worker with one, each its own raylet): decoding placed on the worker node by a
custom resource gives the DataLoader's pixels; a decode actor killed mid-epoch loses and
repeats nothing; a TorchTrainer of two workers on gloo gets every sample once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="turbofeed[ray] is not installed")

import turbofeed  # noqa: E402
import turbofeed.ray as tray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402
from turbofeed import transforms as T  # noqa: E402

SEED, EPOCH, SIZE = 3, 1, 24


@pytest.fixture(scope="module")
def two_nodes():
    # the head: this process, the read tasks (one CPU each) and the train workers, so two
    # logical CPUs: with one, two train workers of 0.25 left no whole CPU for a read task
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    worker = cluster.add_node(num_cpus=1, resources={"decode": 1})
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    yield cluster, worker
    ray.shutdown()
    cluster.shutdown()


def reference(shards) -> dict[str, tuple[np.ndarray, int]]:
    loader = turbofeed.DataLoader(shards, batch_size=20, shuffle=True, seed=SEED, transform=T.imagenet_train(SIZE),
                                  return_keys=True)
    loader.set_epoch(EPOCH)
    return {k: (x.numpy().copy(), int(y)) for images, labels, keys in loader for k, x, y in zip(keys, images, labels)}


def decode_actor_nodes() -> set[str]:
    """The nodes every decode actor so far ran on (Ray names their class ``MapWorker...``),
    from the cluster's own table: ``ray._private.state.actors`` (the public
    ``ray.util.state`` asks the dashboard, which this cluster does not run)."""
    return {info["Address"]["NodeID"] for info in ray._private.state.actors().values()
            if "MapWorker" in info.get("ActorClassName", "")}


def test_decoding_on_the_worker_node_gives_the_dataloaders_pixels(two_nodes, shards):
    _, worker = two_nodes
    rows = tray.read(shards, seed=SEED, epoch=EPOCH, transform=T.imagenet_train(SIZE), decoders=1,
                     actor_options={"resources": {"decode": 1}})
    got: dict = {}
    for images, labels, keys in tray.loader(rows, batch_size=16, epoch=EPOCH, return_keys=True):
        for k, x, y in zip(keys, images, labels):
            assert k not in got
            got[k] = (x.numpy().copy(), int(y))
    assert decode_actor_nodes() == {worker.node_id}
    want = reference(shards)
    assert sorted(got) == sorted(want)
    for key, (pixels, label) in want.items():
        assert got[key][1] == label
        np.testing.assert_array_equal(got[key][0], pixels, err_msg=key)


def decode_actor_pids(raylet: int) -> list[int]:
    """The processes of the running decode actors (Ray names them ``ray::MapWorker...``)
    that the raylet ``raylet`` started: this cluster's, not another Ray's on the machine."""
    out = subprocess.run(["pgrep", "-f", "-P", str(raylet), "ray::MapWorker"], capture_output=True, text=True,
                         check=False).stdout
    return [int(pid) for pid in out.split()]


def test_a_decode_actor_killed_mid_epoch_loses_and_repeats_nothing(two_nodes, shards):
    """Its process killed (SIGKILL) after the third batch: Ray restarts the actor and
    retries its task; the trainer still gets each sample once. The pipeline is held to a
    few batches ahead (a small object-store budget), so the actor is still at work."""
    _, worker = two_nodes
    raylet = worker.all_processes["raylet"][0].process.pid
    from ray.data import DataContext

    limits = DataContext.get_current().execution_options.resource_limits
    DataContext.get_current().execution_options.resource_limits = limits.copy(object_store_memory=200_000)
    try:
        rows = tray.read(shards, seed=SEED, epoch=EPOCH, transform=T.imagenet_train(SIZE), decoders=1,
                         rows_per_task=10, actor_options={"resources": {"decode": 1}})
        loader = tray.loader(rows, batch_size=10, epoch=EPOCH, return_keys=True)
        keys: list[str] = []
        killed = False
        for i, (_, _, batch_keys) in enumerate(loader):
            keys += batch_keys
            if i == 2:
                pids = decode_actor_pids(raylet)
                assert pids
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                killed = True
    finally:
        DataContext.get_current().execution_options.resource_limits = limits
    assert killed
    assert len(keys) == len(set(keys)) == 120
    assert loader.state_dict()["consumed"] == [[0, 120]]


def _train_loop(config: dict) -> None:
    from ray import train

    loader = tray.loader(train.get_dataset_shard("train"), batch_size=8, epoch=EPOCH, return_keys=True)
    keys = [k for _, _, batch_keys in loader for k in batch_keys]
    rank = train.get_context().get_world_rank()
    with open(os.path.join(config["out"], f"rank{rank}.json"), "w") as f:
        json.dump({"keys": keys, "state": loader.state_dict()}, f)


def test_a_torch_trainer_of_two_workers_gets_every_sample_once(two_nodes, shards, tmp_path):
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    rows = tray.read(shards, seed=SEED, epoch=EPOCH, transform=T.imagenet_train(SIZE), decoders=1,
                     actor_options={"resources": {"decode": 1}, "num_cpus": 0.5})
    trainer = TorchTrainer(_train_loop, train_loop_config={"out": str(tmp_path)},
                           scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.25}),
                           torch_config=TorchConfig(backend="gloo"), datasets={"train": rows},
                           run_config=RunConfig(storage_path=str(tmp_path / "runs")))
    finished = threading.Event()

    def fit() -> None:
        trainer.fit()
        finished.set()

    runner = threading.Thread(target=fit, daemon=True)
    runner.start()
    runner.join(300)  # a hang fails the test (the fixture's shutdown then stops the run)
    assert finished.is_set(), "the TorchTrainer did not finish within 300 s"
    ranks = [json.load(open(tmp_path / f"rank{r}.json")) for r in (0, 1)]
    keys = ranks[0]["keys"] + ranks[1]["keys"]
    assert ranks[0]["keys"] and ranks[1]["keys"]
    assert len(keys) == len(set(keys)) == 120
    merged = tray.merged([r["state"] for r in ranks], EPOCH)
    assert merged.runs() == [(0, 120)]
