"""Bad-input cases found by the twelfth and thirteenth sessions' sweeps: names that end in a newline (a `$` in the
name patterns matched before it), AdapterHub export of a model on the meta device, labels under a Parallel block
counted per copy of the batch, a fusion of the target's own adapter alone, and an encoder-decoder's adapter loaded
into another split of the same number of layers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

import adapterfusion as af
from adapterfusion.interop import export_adapterhub
from adapterfusion.tasks.errors import TaskError
from adapterfusion.tasks.spec import TaskSpec
from catalogue import Action, BadInput, adapters_a_and_b, cli
from tiny_decoders import tiny_decoder

B = BadInput
GROUP = "pieces"


def _on_model(act: Callable[[af.AdaptedModel], object]) -> Callable[[Path], Action]:
    def prepare(folder: Path) -> Action:
        model = adapters_a_and_b("h")
        return lambda: act(model)

    return prepare


def _meta_export(folder: Path) -> Action:
    model = adapters_a_and_b("h").to("meta")
    return lambda: export_adapterhub(model, "adapter", "a", folder / "exported")


def _parallel_labels(model: af.AdaptedModel) -> object:
    model.activate(af.Parallel("a", "b"), head="h")
    return model(input_ids=torch.randint(1, 50, (4, 7)), labels=torch.tensor([0, 1, 0, 1, 1, 0, 1, 0]))


def _fuse_own_alone(folder: Path) -> Action:
    """adapterfusion fuse --task cb --sources cb: the target's own adapter as the only source."""
    runs, store = str(folder / "runs"), str(folder / "store")
    return lambda: cli("fuse", "--task", "cb", "--sources", "cb", "--output-dir", runs, "--store", store)


def _cli(*argv: str) -> Callable[[Path], Action]:
    """The command `adapterfusion *argv`, '{folder}' in an argument replaced by the case's folder."""
    return lambda folder: lambda: cli(*(arg.replace("{folder}", str(folder)) for arg in argv))


def _other_split(folder: Path) -> Action:
    """An adapter saved from a T5 of 2 encoder + 2 decoder layers, loaded into one of 3 + 1 (4 layers both)."""
    saved = af.wrap(tiny_decoder("t5"))
    saved.add_adapter("a")
    saved.save_adapter("a", folder / "a")
    other = af.wrap(tiny_decoder("t5", num_layers=3, num_decoder_layers=1))
    return lambda: other.load_adapter(folder / "a")


def _parallel_embeds(model: af.AdaptedModel) -> str:
    model.activate(af.Parallel("a", "b"), head="h")
    shape = tuple(model(inputs_embeds=torch.randn(3, 7, model.hidden_size)).logits.shape)
    return f"Parallel over inputs_embeds gives logits {shape}"


def _tiny_reduction(model: af.AdaptedModel) -> object:
    return model.add_adapter("wide", af.AdapterConfig.pfeiffer(reduction_factor=1e-9))


CASES: tuple[BadInput, ...] = (
    B(
        "name-trailing-newline",
        GROUP,
        "model.add_adapter('a\\n', ...) (accepted: the name pattern's $ matched before the newline; saved as a folder "
        "'a\\n')",
        af.ConfigError,
        ("invalid adapter name", "letters, digits"),
        _on_model(lambda model: model.add_adapter("a\n", af.AdapterConfig.pfeiffer(reduction_factor=4))),
    ),
    B(
        "task-name-trailing-newline",
        "tasks",
        "TaskSpec(name='reviews\\n', ...) (accepted, as adapter names were)",
        TaskError,
        ("task name 'reviews\\n' is invalid", "letters, digits"),
        lambda folder: lambda: TaskSpec(name="reviews\n", kind="single", text_fields=("text",), label_names=("a", "b")),
    ),
    B(
        "export-adapterhub-meta",
        GROUP,
        "export_adapterhub(model.to('meta'), 'adapter', 'a', folder) (NotImplementedError: Cannot copy out of meta "
        "tensor)",
        af.ConfigError,
        ("adapter 'a'", "meta device", "nothing to export"),
        _meta_export,
    ),
    B(
        "parallel-labels-per-copy",
        "blocks",
        "model(input_ids of 4 rows, labels of 8) under af.Parallel('a', 'b') (told '16 labels for a batch of 8')",
        af.ConfigError,
        ("8 labels for a batch of 4 examples", "Parallel block of 2 children", "one label per input example (4)"),
        _on_model(_parallel_labels),
    ),
    B(
        "fuse-own-adapter-alone",
        "silent acceptances",
        "adapterfusion fuse --task cb --sources cb (trained a one-adapter 'fusion': attention 1.0 everywhere)",
        af.ConfigError,
        ("the fusion of 'cb' would fuse its own adapter alone", "at least one source task besides the target"),
        _fuse_own_alone,
        cli=True,
    ),
    B(
        "prune-json-inside-output",
        "silent acceptances",
        "adapterfusion prune RUN --keep 1 --output p --json p/pruning.json (the result replaced the prune's record)",
        af.ConfigError,
        ("--json", "is inside --output", "pruning.json is its record"),
        _cli("prune", "{folder}/run", "--keep", "1", "--output", "{folder}/p", "--json", "{folder}/p/pruning.json"),
        cli=True,
    ),
    B(
        "analyze-no-plot-with-output",
        "silent acceptances",
        "adapterfusion analyze-fusion RUN --no-plot --output x.png (--output ignored without a word)",
        af.ConfigError,
        ("--output", "--no-plot", "give one of them"),
        _cli("analyze-fusion", "{folder}/run", "--no-plot", "--output", "{folder}/x.png"),
        cli=True,
    ),
    B(
        "report-empty-path",
        "silent acceptances",
        "adapterfusion report '' (reported the experiment in the working folder)",
        af.ConfigError,
        ("OUTPUT_DIR '' is not a path",),
        _cli("report", ""),
        cli=True,
    ),
    B(
        "load-adapter-other-encoder-decoder-split",
        GROUP,
        "a T5 adapter saved from 2 encoder + 2 decoder layers loaded into T5 of 3 + 1 (was loaded silently, its "
        "decoder layer 0 into encoder layer 2)",
        af.IncompatibleModelError,
        ("decoder_layers=2", "decoder_layers=1", "matching model"),
        _other_split,
    ),
    B(
        "parallel-inputs-embeds",
        GROUP,
        "model(inputs_embeds=...) under an active Parallel('a', 'b') (was refused: 'needs input_ids or inputs_embeds')",
        None,
        ("Parallel over inputs_embeds gives logits (6, 2)",),
        _on_model(_parallel_embeds),
    ),
    B(
        "average-weight-int-beyond-float",
        GROUP,
        "af.Average('a', 'b', weights=[10**400, 1]) (was an OverflowError: int too large to convert to float)",
        af.ConfigError,
        ("Average(weights=", "give one finite number per adapter"),
        lambda folder: lambda: af.Average("a", "b", weights=[10**400, 1]),
    ),
    B(
        "adapter-scaling-int-beyond-float",
        GROUP,
        "AdapterConfig.pfeiffer(scaling=10**400) (was an OverflowError naming no parameter)",
        af.ConfigError,
        ("scaling=", "is not a finite number"),
        lambda folder: lambda: af.AdapterConfig.pfeiffer(scaling=10**400),
    ),
    B(
        "head-num-labels-beyond-torch",
        GROUP,
        "ClassificationHead(num_labels=10**400) (was accepted, then a C++ TypeError from torch at add_head)",
        af.ConfigError,
        ("num_labels=", "must be at most 2147483647"),
        lambda folder: lambda: af.ClassificationHead(num_labels=10**400),
    ),
    B(
        "adapter-reduction-factor-tiny",
        GROUP,
        "add_adapter with reduction_factor=1e-9 (was torch's allocator failing on terabytes)",
        af.ConfigError,
        ("reduction_factor 1e-09", "more than 64 times the hidden size", "at least 0.015625"),
        _on_model(_tiny_reduction),
    ),
    B(
        "average-adapters-weights-cancel",
        GROUP,
        "model.average_adapters('soup', {'a': 1, 'b': -1}) (the message named Average(...), a block never built)",
        af.ConfigError,
        ("average_adapters(weights=[1, -1])", "sum to 0"),
        _on_model(lambda model: model.average_adapters("soup", {"a": 1, "b": -1})),
    ),
)
