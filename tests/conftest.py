"""Fixtures for the whole suite: a deterministic seed for every test, inputs for the tiny encoders, the real task
data folder (`data_dir`) and the shipped demo data (`demo_data_dir`), and a tiny random BERT saved with the shipped
tokenizer.

Tests that take `data_dir` need the real task data (../shared/data, or ADAPTERFUSION_TEST_DATA_DIR): without it they
are skipped and the run ends with a line saying how many, and under CI=true the run stops with a usage error instead,
so CI never passes by skipping them.

Fixtures live in conftest.py files (this one, and one per test folder for that folder's own): test modules take them
as parameters and never import them. Plain helpers live in modules beside this file (tiny_models.py,
tiny_experiments.py, task_data.py, tolerances.py), which test modules import by name; never import from `conftest`,
as every folder's conftest.py is a module named `conftest`."""

from __future__ import annotations

import os
from pathlib import Path

import huggingface_hub
import pytest
import torch
import transformers

import adapterfusion as af
from adapterfusion import file_digests
from adapterfusion.demo import demo_data_dir as _demo_data_dir
from adapterfusion.experiments import figures
from task_data import DATA_DIR, real_data_present
from tiny_models import tiny_inputs

# Under pytest-xdist (`-n 2`) each worker gets its share of the cores, so two workers do not fight over torch's
# threads (twice as many threads as cores slowed the matmul-heavy tests more than the split gained).
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _no_hub_lookups(monkeypatch) -> None:
    """No test asks the real Hub whether a model exists (io/hub.reach's one look-up): every Hub id is known, so a
    test's made-up id ('some-org/some-encoder') fails, if at all, where it would with the network on. Tests of the
    look-up itself replace this."""
    monkeypatch.setattr(huggingface_hub, "model_info", lambda repo_id, **kwargs: None)


@pytest.fixture
def drawn(monkeypatch) -> list:
    """The figures the plot functions save, kept for inspection (the PNGs are still written)."""
    seen = []
    save = figures._save

    def recording(figure, path):
        seen.append(figure)
        return save(figure, path)

    monkeypatch.setattr(figures, "_save", recording)
    return seen


@pytest.fixture
def inputs() -> dict[str, torch.Tensor]:
    return tiny_inputs()


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    """The paths whose bytes file_digests.file_sha256 reads (not answered from what the process remembers), in order."""
    seen: list[str] = []
    read = file_digests._read_sha256

    def counting(path: str) -> str:
        seen.append(path)
        return read(path)

    monkeypatch.setattr(file_digests, "_read_sha256", counting)
    return seen


_REAL_DATA = (
    f"the real task data, not found at {DATA_DIR} (the 'shared/data' folder beside the repository, or the folder "
    "ADAPTERFUSION_TEST_DATA_DIR names)"
)
_SKIP_REASON = f"needs {_REAL_DATA}"


def pytest_collection_modifyitems(config, items) -> None:
    """Without the real task data, the tests that take `data_dir` are skipped (the summary counts them); under
    CI=true they are not, and the `data_dir` fixture fails each of them instead (CI must run them). A usage error
    would not do: pytest-xdist's workers collect, and an error there is an internal error without the message."""
    if real_data_present() or os.environ.get("CI"):
        return
    for item in items:
        if "data_dir" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.skip(reason=_SKIP_REASON))


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """Counted from the skip reports, which reach the main process under pytest-xdist too (collection runs in the
    workers there)."""
    reports = terminalreporter.stats.get("skipped", [])
    skipped = sum(1 for report in reports if isinstance(report.longrepr, tuple) and _SKIP_REASON in report.longrepr[2])
    if skipped:
        terminalreporter.write_line(
            f"{skipped} tests skipped: they need {_REAL_DATA}; CI runs them (and fails without the data)",
            yellow=True,
            bold=True,
        )


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The real task data (all tasks, full sizes). Tests that only need a demo-pack task take `demo_data_dir`."""
    if not real_data_present():  # reached under CI=true only (pytest_collection_modifyitems skips them otherwise)
        pytest.fail(f"CI is set and this test {_SKIP_REASON}", pytrace=False)
    return DATA_DIR


@pytest.fixture(scope="session")
def demo_data_dir() -> Path:
    """The demo data shipped in the package (rte, cb, mrpc, sick complete; slices of sst2 train and mnli): there in
    every clone, so tests that need no more than this run everywhere."""
    return _demo_data_dir()


@pytest.fixture(scope="session")
def tiny_encoder_dir(tmp_path_factory) -> Path:
    """A tiny random BERT (hidden 32, 2 layers) saved with the shipped tokenizer, for the training recipes."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(af.default_encoder_path())
    config = transformers.BertConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        vocab_size=tokenizer.vocab_size,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    model = transformers.BertModel(config)
    path = tmp_path_factory.mktemp("encoders") / "tiny-bert"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_float64_encoder_dir(tiny_encoder_dir, tmp_path_factory) -> Path:
    """The tiny BERT saved in float64: runs trained from it compare to the float64 row of tests/tolerances.py."""
    path = tmp_path_factory.mktemp("encoders") / "tiny-bert-float64"
    transformers.AutoModel.from_pretrained(tiny_encoder_dir).double().save_pretrained(path)
    transformers.AutoTokenizer.from_pretrained(tiny_encoder_dir).save_pretrained(path)
    return path
