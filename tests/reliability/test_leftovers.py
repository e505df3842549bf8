"""What a writer killed mid-write leaves behind (temp files of atomic writes, a store entry's temp folders) is
removed by the next writer that may remove it, and nothing else is."""
from __future__ import annotations

import os
from concurrent.futures import Future
from pathlib import Path

import adapterfusion as af
from adapterfusion.experiments import run_experiment
from adapterfusion.io.atomic import remove_stale_temp_files
from adapterfusion.training import AdapterStore

from conftest import tiny_encoder

EXPERIMENT = {"name": "tiny", "tasks": ["rte"], "setups": ["head"], "encoder": "some/hub-id",
              "training": {"max_steps": 1}}


def _touch(path: Path, text: str = "x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_sweep_removes_only_temp_names(tmp_path):
    stale = [_touch(tmp_path / ".metrics.json.k2j_x9q0.tmp"), _touch(tmp_path / "a" / ".seed-1.abcdefgh.tmp" / "f")]
    names = (".hidden", "notes.tmp", ".x.tmp", "metrics.json", ".a.b.tooolong1.tmp")
    kept = [_touch(tmp_path / name) for name in names]
    removed = remove_stale_temp_files(tmp_path)
    assert sorted(removed) == sorted([stale[0], stale[1].parent])
    assert not any(p.exists() for p in (stale[0], stale[1].parent)) and all(p.exists() for p in kept)


class _Done:
    capacity = 1

    def submit(self, payload):
        future = Future()
        future.set_result({"ok": True, "metrics": {"best": {"accuracy": 0.5}, "metric_for_best": "accuracy"}})
        return future

    def shutdown(self):
        pass


def test_the_runner_sweeps_its_output_dir_once_it_holds_the_lock(tmp_path):
    out = tmp_path / "out"
    leftovers = [_touch(out / ".experiment.json.abcd1234.tmp"), _touch(out / "report" / ".tables.md.zz_zz_zz.tmp"),
                 _touch(out / "adapters" / "v" / "enc" / "rte" / "st-a" / ".seed-1.q1w2e3r4.tmp" / "entry.json")]
    summary = run_experiment({**EXPERIMENT, "output_dir": str(out)}, executor=_Done(), progress=False, report=False)
    assert summary.ok and not any(p.exists() for p in leftovers)
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp") or p.name == "runner.lock"]


def test_a_store_entry_cleans_what_a_killed_writer_of_it_left(tmp_path):
    model = af.wrap(tiny_encoder())
    model.add_adapter("rte", "pfeiffer")
    store = AdapterStore(tmp_path)
    entry = store.path("enc", "rte", "st-a", 1)
    half = _touch(entry.parent / ".seed-1.abcdefgh.tmp" / "adapter" / "adapter.safetensors", "half")
    old = _touch(entry.parent / ".seed-1.0a1b2c3d.tmp" / "entry.json", "{}")  # killed between its two renames
    other = _touch(entry.parent / ".seed-10.abcdefgh.tmp" / "entry.json", "{}")  # another entry's: not ours to touch
    store.put_model(model, "rte", None, "enc", "rte", "st-a", 1)
    store.put_model(model, "rte", None, "enc", "rte", "st-a", 1, overwrite=True)
    assert not half.exists() and not old.exists() and other.exists()
    assert sorted(os.listdir(entry.parent)) == [".seed-10.abcdefgh.tmp", "seed-1"]
