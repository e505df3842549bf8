"""clear_run_dir, which the experiment runner calls before a job runs again, removes only what a run wrote."""

from __future__ import annotations

from pathlib import Path

import transformers

import adapterfusion as af
from adapterfusion.training.run import RUN_ENTRIES, Run, clear_run_dir, remove_run_entry, save_encoder, written_by_run
from tiny_decoders import tiny_decoder
from tiny_models import tiny_encoder

# A file of each kind a run writes inside its folders (training/run.py written_by_run).
WRITTEN = (
    "adapter/adapter.safetensors",
    "fusion/fusion_config.json",
    "head/head.safetensors",
    "checkpoints/checkpoint-8/optimizer.pt",
    "encoder/model.safetensors",
    "encoder/vocab.txt",
    "tasks/rte/adapter/adapter_config.json",
)
# The user's files inside those folders: no run writes them, so no removal of a run touches them.
USERS = ("adapter/notes.txt", "checkpoints/best-by-hand/model.safetensors", "encoder/README.md", "tasks/rte/plot.png")


def _run_folder(tmp_path: Path) -> Path:
    run = tmp_path / "seed-1"
    for name in RUN_ENTRIES:
        if "." in name:
            (run / name).parent.mkdir(parents=True, exist_ok=True)
            (run / name).write_text("{}")
    for name in WRITTEN:
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_bytes(b"x")
    (run / "job.log").write_text("log")
    (run / "notes.txt").write_text("what the user wrote beside the run")
    (run / "plots").mkdir()
    (run / "plots" / "mine.png").write_bytes(b"png")
    return run


def test_clear_run_dir_removes_the_run_files_and_keeps_what_the_user_put_there(tmp_path):
    run = _run_folder(tmp_path)
    clear_run_dir(run, also=("job.log",))
    assert sorted(p.relative_to(run).as_posix() for p in run.rglob("*")) == ["notes.txt", "plots", "plots/mine.png"]


def test_clear_run_dir_for_a_resume_keeps_checkpoints_and_config(tmp_path):
    run = _run_folder(tmp_path)
    clear_run_dir(run, keep_checkpoints=True)
    left = sorted(p.name for p in run.iterdir())
    assert left == sorted(["checkpoints", "config.json", "job.log", "notes.txt", "plots"])


def test_clear_run_dir_of_a_missing_folder_does_nothing(tmp_path):
    clear_run_dir(tmp_path / "absent")
    assert not (tmp_path / "absent").exists()


def _files(run: Path) -> list[str]:
    return sorted(p.relative_to(run).as_posix() for p in run.rglob("*") if p.is_file())


def test_clear_run_dir_keeps_the_users_files_inside_the_runs_folders(tmp_path):
    run = _run_folder(tmp_path)
    for name in USERS:
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text(f"the user's {name}")
    clear_run_dir(run, also=("job.log",))
    assert _files(run) == sorted(["notes.txt", "plots/mine.png", *USERS])
    assert all((run / name).read_text() == f"the user's {name}" for name in USERS)


def test_removing_checkpoints_keeps_the_users_files_and_the_folder_behind_a_link(tmp_path):
    """What start_over (overwrite=True) and the end of a run without keep_checkpoints remove."""
    run, elsewhere = _run_folder(tmp_path), tmp_path / "elsewhere"
    (run / "checkpoints" / "how-i-trained.md").write_text("mine")
    elsewhere.mkdir()
    (elsewhere / "model.safetensors").write_bytes(b"mine")
    (run / "checkpoints" / "checkpoint-9").symlink_to(elsewhere)
    Run(run, seed=1, encoder="unused").start_over()
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["checkpoint-9", "how-i-trained.md"]
    assert (elsewhere / "model.safetensors").read_bytes() == b"mine"  # we never write a link: the user's, kept
    (run / "checkpoints" / "how-i-trained.md").unlink()
    (run / "checkpoints" / "checkpoint-9").unlink()
    remove_run_entry(run, "checkpoints")
    assert not (run / "checkpoints").exists()


def _written_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_every_file_save_encoder_writes_counts_as_the_runs_and_odd_names_do_not(tmp_path):
    tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
    tokenizer.add_tokens(["<added>"])
    tokenizer.chat_template = "{{ messages }}"
    save_encoder(af.wrap(tiny_encoder("bert")), tokenizer, tmp_path / "encoder")
    tiny_decoder("llama").save_pretrained(tmp_path / "sharded", max_shard_size="20KB")  # model-0000k-of-n + index
    written = [*_written_files(tmp_path / "encoder"), *_written_files(tmp_path / "sharded")]
    assert "chat_template.jinja" in written and "model.safetensors.index.json" in written
    assert sum("-of-" in name for name in written) > 1
    assert [name for name in written if not written_by_run(f"encoder/{name}")] == []
    odd = ("vocab.jinja", "config.txt", "pytorch_model.bin", "model-1-of-2.bin", "notes.json", "model.safetensors.bak")
    assert [name for name in odd if written_by_run(f"encoder/{name}")] == []
    assert written_by_run("encoder/mt_a.json") and not written_by_run("adapter/mt_a.json")
