"""Data-parallel training through the HF Trainer: `torchrun --nproc_per_node 2` on CPU (gloo) trains one run in
step on two ranks, each seeing half of every epoch, and only rank 0 writes the run folder and the store."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

import adapterfusion as af
from training_helpers import fresh_model


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_torchrun_two_ranks_split_each_epoch_and_rank_zero_alone_writes(tmp_path, tiny_encoder_dir, demo_data_dir):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WORLD_SIZE": "", "RANK": ""}
    env = {k: v for k, v in env.items() if v != ""}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(_free_port()),
        "-m",
        "adapterfusion.cli",
        "train-adapter",
        "--task",
        "rte",
        "--encoder",
        str(tiny_encoder_dir),
        "--data-dir",
        str(demo_data_dir),
        "--max-examples",
        "64",
        "--epochs",
        "1",
        "--batch-size",
        "8",
        "--max-length",
        "32",
        "--output-dir",
        str(tmp_path / "runs"),
        "--store",
        str(tmp_path / "store"),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = tmp_path / "runs" / "rte" / "st-a" / "seed-42"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["global_step"] == 64 // (8 * 2)  # one process alone would take 8 steps
    assert done.stdout.count("run folder:") == 1  # rank 1 reports nothing and writes nothing
    assert len(list((tmp_path / "store").rglob("adapter_config.json"))) == 1
    model = fresh_model(tiny_encoder_dir)
    name = model.load_adapter(run_dir / "adapter")
    assert name in model.adapter_names
    assert isinstance(model, af.AdaptedModel)
