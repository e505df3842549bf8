"""The command line as a shell uses it: a reader that stops early (`status | head`) ends it quietly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import adapterfusion as af
from adapterfusion.cli import EXIT_BROKEN_PIPE
from adapterfusion.experiments import ResultsStore
from adapterfusion.experiments.plan import plan_jobs
from adapterfusion.experiments.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]


def run_with_closed_stdout(*argv: str) -> subprocess.CompletedProcess:
    """`adapterfusion ARGV` writing into a pipe whose reader is already gone (`| head` that has read enough): the
    read end is closed before the command starts, so its first write fails, every time."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run(
            [sys.executable, "-m", "adapterfusion.cli", *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    finally:
        os.close(write_end)


@pytest.mark.slow
def test_status_into_a_closed_pipe_exits_quietly(tmp_path):
    spec = load_spec(
        {
            "name": "tiny",
            "encoder": "some-org/some-encoder",
            "tasks": ["rte", "cb"],
            "setups": ["head", "st-a"],
            "output_dir": str(tmp_path / "out"),
        }
    )
    with ResultsStore(spec.output_dir) as store:
        store.bind(spec, plan_jobs(spec))
    result = run_with_closed_stdout("status", spec.output_dir)
    assert result.returncode == EXIT_BROKEN_PIPE and result.stderr == ""


def test_the_command_starts_without_the_training_stack():
    """Every command imports the training modules, but transformers' Trainer module (datasets, accelerate,
    torch.distributed, sympy: about 2 s) and its modeling_utils load only when a run trains or a model loads, so
    `adapterfusion --help` starts in about half the time."""
    heavy = ("transformers.trainer", "transformers.modeling_utils", "datasets", "sympy", "torch.distributed.tensor")
    code = f"import sys, adapterfusion.cli; print(sorted(set({heavy!r}) & set(sys.modules)))"
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300, cwd=ROOT
    ).stdout
    assert loaded.strip() == "[]"


def test_info_lists_each_architecture_with_its_kind_sites_and_adapterhub_support(capsys) -> None:
    from adapterfusion.cli import main

    assert main(["info"]) == 0
    out = capsys.readouterr().out
    listed = [line.split() for line in out.splitlines() if line.startswith("  ")]
    lines = {words[0]: words[1:] for words in listed}
    assert set(lines) == set(af.ARCHITECTURES)
    falcon = [" ".join(words) for words in listed if words[0] == "falcon"]  # a line per block its config can choose
    assert len(falcon) == 4 and "sequential (Falcon-RW) blocks where parallel_attn=False" in falcon[0]
    assert lines["llama"][:2] == ["decoder", "pre_norm"] and lines["t5"][0] == "encoder-decoder"
    assert lines["bert"][:2] == ["encoder", "post_ln_output"] and "own" in lines["phi3"]


def test_json_replaces_only_a_result_of_ours(tmp_path, capsys):
    """--json replaced whatever file it was given (a lone saved piece's config, the user's own JSON); now only a
    result an earlier evaluate or prune --json wrote, as its mark says, and nothing that appears there meanwhile."""
    from adapterfusion.cli_outputs import json_writer

    result, run = tmp_path / "result.json", str(tmp_path / "run")
    json_writer(str(result), run, "evaluate")({"metrics": {"accuracy": 0.5}})
    first = result.read_bytes()
    json_writer(str(result), run, "prune")({"kept": ["a"]})  # our own result: replaced, as asked
    assert json.loads(result.read_text()) == {"kept": ["a"], "written_by": "adapterfusion prune --json"}

    result.write_bytes(first.replace(b"adapterfusion evaluate --json", b"someone else"))
    before = result.read_bytes()
    with pytest.raises(af.ConfigError, match="no adapterfusion evaluate or prune --json wrote"):
        json_writer(str(result), run, "evaluate")
    link = tmp_path / "link.json"
    link.symlink_to(result)  # to a result of ours: the link is no file we wrote
    with pytest.raises(af.ConfigError, match="is a symbolic link that no adapterfusion"):
        json_writer(str(link), run, "evaluate")

    late = tmp_path / "late.json"
    write = json_writer(str(late), run, "evaluate")
    late.write_text("{}\n")  # the user's, put there while the evaluation ran
    with pytest.raises(af.ConfigError, match="since the command began"):
        write({"metrics": {}})
    assert late.read_text() == "{}\n" and result.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["late.json", "link.json", "result.json"]
