"""Bad-input cases at one boundary, experiment files' sweeps, select rules, analyses and span ablations, and what plan,
run and report make of them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from adapterfusion.demo import demo_data_dir
from adapterfusion.errors import ConfigError
from adapterfusion.experiments.errors import ExperimentSpecError
from adapterfusion.experiments.span_ablation import SpanAblation, ablate_spans, ablate_zoo
from catalogue import Action, BadInput, adapters_a_and_b, cli, experiment

B = BadInput
GROUP = "sweeps and analyses"

LR_SWEEP = {"name": "st-a", "sweep": {"learning_rate": [1.0e-3, 2.0e-3]}}
SIZES = {"name": "st-a", "id": "sa", "sweep": {"reduction_factor": [16, 8], "epochs": [1, 2]}}


def _ablated() -> SpanAblation:
    """ablate_spans of adapter 'a' under head 'h' of a tiny BERT (2 layers, 3 spans) on one batch of 4 RTE-like rows."""
    model = adapters_a_and_b("h")
    batch = {
        "input_ids": torch.randint(1, 50, (4, 7), generator=torch.Generator().manual_seed(0)),
        "attention_mask": torch.ones(4, 7, dtype=torch.long),
        "labels": torch.tensor([0, 1, 0, 1]),
    }
    return ablate_spans(model, "rte", "a", "h", [batch])


def _scored_spans() -> str:
    result = _ablated()
    return f"{len(result.spans)} spans scored on {result.metric}"


def _damaged_record(folder: Path) -> Action:
    record = _ablated().to_dict()
    record["spans"].pop()  # the span over every layer
    return lambda: SpanAblation.from_dict(record)


def _yaml_run(setups: str, rest: str = "") -> Callable[[Path], Action]:
    """`adapterfusion run` of a YAML experiment of the setup entries `setups` and the further lines `rest` (what YAML
    reads its own way, keys as numbers or null and 3e-4 as text, only a YAML file can give)."""

    def prepare(folder: Path) -> Action:
        path = folder / "experiment.yaml"
        path.write_text(
            f"name: tiny\nencoder: some-org/some-encoder\ntasks: [rte, cb]\noutput_dir: out\nsetups: [{setups}]\n{rest}"
        )
        return lambda: cli("run", str(path), "--no-progress")

    return prepare


# 12 values of each of 7 settings: 35,831,808 combinations.
HUGE_GRID = {
    key: [start * (k + 1) for k in range(12)]
    for key, start in (
        ("learning_rate", 1.0e-4),
        ("epochs", 1),
        ("batch_size", 1),
        ("warmup_ratio", 0.01),
        ("weight_decay", 0.01),
        ("max_grad_norm", 0.5),
        ("adam_epsilon", 1.0e-8),
    )
}

CASES: tuple[BadInput, ...] = (
    B(
        "sweep-huge-grid",
        GROUP,
        "setups: [{name: head, sweep: <12 values of each of 7 settings>}] (ran for minutes expanding 35,831,808 "
        "variants, before the 1,000-job confirmation could ask for --yes)",
        ExperimentSpecError,
        ("setups[0].sweep", "expands into 35,831,808 variants", "12 learning_rate × 12 epochs", "sweep fewer values"),
        experiment(setups=[{"name": "head", "sweep": HUGE_GRID}]),
        cli=True,
    ),
    B(
        "sweep-key-a-number",
        GROUP,
        "setups: [{name: head, sweep: {1: [1, 2], warmup_ratio: [0.1, 0.2]}}] in YAML (a TypeError from sorting the "
        "keys: '<' not supported between 'str' and 'int')",
        ExperimentSpecError,
        ("setups[0].sweep.1", "cannot be swept here", "sweepable keys: pooling, learning_rate"),
        _yaml_run("{name: head, sweep: {1: [1, 2], warmup_ratio: [0.1, 0.2]}}"),
        cli=True,
    ),
    B(
        "sweep-logging-setting",
        GROUP,
        "setups: [{name: head, sweep: {logging_steps: [1, 10]}}] (accepted: two variants that train the same model, "
        "as logging_steps is left out of the job hash)",
        ExperimentSpecError,
        ("setups[0].sweep.logging_steps", "not what it trains", "set logging_steps in the entry or in `training`"),
        experiment(setups=[{"name": "head", "sweep": {"logging_steps": [1, 10]}}]),
        cli=True,
    ),
    B(
        "sweep-name-taken-by-two-entries",
        GROUP,
        "setups: [{name: st-a, id: g, sweep: {init_std: [...]}}, {name: head, id: g, sweep: {learning_rate: [...]}}] "
        "with select {x: g} (accepted: the row chose among head and st-a variants as one sweep)",
        ExperimentSpecError,
        ("setups[1].sweep", "is called 'g'", "as setups[0]'s sweep of another setup", "give one of them another 'id'"),
        experiment(
            setups=[
                {"name": "st-a", "id": "g", "sweep": {"init_std": [1.0e-3, 1.0e-2]}},
                {"name": "head", "id": "g", "sweep": {"learning_rate": [1.0e-3, 2.0e-3]}},
            ],
            select={"x": "g"},
        ),
        cli=True,
    ),
    B(
        "fusion-of-a-swept-stage1",
        GROUP,
        "setups: [{name: st-a, sweep: {learning_rate: [1e-3, 2e-3]}}, fusion-st-a] (fused the first variant, "
        "st-a-rf16-lr1e-3, without a word)",
        ExperimentSpecError,
        ("setups[1]", "2 variants have reduction factor 16", "st-a-rf16-lr1e-3, st-a-rf16-lr2e-3", "adapter_variant"),
        experiment(setups=[LR_SWEEP, "fusion-st-a"]),
        cli=True,
    ),
    B(
        "fusion-adapter-variant-unknown",
        GROUP,
        "fusion-st-a with adapter_variant: st-a-rf16-lr5e-3, no such variant (the key is new: it names the variant "
        "a fusion fuses when a sweep gives several)",
        ExperimentSpecError,
        ("setups[1].adapter_variant", "'st-a-rf16-lr5e-3' is not a st-a variant", "st-a-rf16-lr2e-3"),
        experiment(setups=[LR_SWEEP, {"name": "fusion-st-a", "adapter_variant": "st-a-rf16-lr5e-3"}]),
        cli=True,
    ),
    B(
        "sweep-undone-by-task-training",
        GROUP,
        "setups: [{name: head, sweep: {learning_rate: [1e-3, 2e-3]}}], task_training: {cb: {learning_rate: 5e-3}} "
        "(accepted: both variants trained cb at 5e-3, as head-lr1e-3 and head-lr2e-3)",
        ExperimentSpecError,
        ("task_training.cb.learning_rate", "sweep 'head' sweeps learning_rate", "learning_rate=0.005", "tasks: [cb]"),
        experiment(
            setups=[{"name": "head", "sweep": {"learning_rate": [1.0e-3, 2.0e-3]}}],
            task_training={"cb": {"learning_rate": 5.0e-3}},
        ),
        cli=True,
    ),
    B(
        "sweep-epochs-with-max-steps",
        GROUP,
        "training: {max_steps: 5}, setups: [{name: head, sweep: {epochs: [1, 2]}}] (accepted: max_steps sets the "
        "length of both runs, which trained alike as head-ep1 and head-ep2)",
        ExperimentSpecError,
        ("setups[0].sweep.epochs", "max_steps=5", "in place of its epochs", "drop max_steps"),
        experiment(training={"max_steps": 5}, setups=[{"name": "head", "sweep": {"epochs": [1, 2]}}]),
        cli=True,
    ),
    B(
        "select-value-yaml-text",
        GROUP,
        "select: {A: {sweep: st-a-houlsby, learning_rate: 3e-4}} in YAML, which reads 3e-4 as text (refused as "
        "\"'3e-4' is not one of the swept values [3e-05, 0.0003]\", with no word of why)",
        ExperimentSpecError,
        ("select.A.learning_rate", "'3e-4' is text, not a number", "write 1.0e-4"),
        _yaml_run(
            "{name: st-a-houlsby, sweep: {reduction_factor: [96, 12], learning_rate: [3.0e-5, 3.0e-4]}}",
            "select:\n  A: {sweep: st-a-houlsby, learning_rate: 3e-4}\n",
        ),
        cli=True,
    ),
    B(
        "select-sweep-a-list",
        GROUP,
        "select: {A: {sweep: [sa]}} (a TypeError: unhashable type: 'list')",
        ExperimentSpecError,
        ("select.A.sweep", "no sweep called ['sa']", "the experiment's sweeps are ['sa']"),
        experiment(setups=[SIZES], select={"A": {"sweep": ["sa"]}}),
        cli=True,
    ),
    B(
        "select-row-name-with-pipe",
        GROUP,
        "select: {'Adapters | rf16': {sweep: sa, reduction_factor: 16}} (accepted: the '|' split the row of "
        "report/tables.md into one cell too many)",
        ExperimentSpecError,
        ("select.Adapters | rf16", "'|' and line breaks would break the table", "rename the row"),
        experiment(setups=[SIZES], select={"Adapters | rf16": {"sweep": "sa", "reduction_factor": 16}}),
        cli=True,
    ),
    B(
        "select-fixed-true-for-a-number",
        GROUP,
        "select: {A: {sweep: sa, epochs: true}} over epochs [1, 2] (accepted as epochs 1: True == 1 in Python)",
        ExperimentSpecError,
        ("select.A.epochs", "True is not one of the swept values [1, 2]"),
        experiment(setups=[SIZES], select={"A": {"sweep": "sa", "epochs": True}}),
        cli=True,
    ),
    B(
        "analysis-init-scale-sweep-of-two-keys",
        GROUP,
        "analyses: [{kind: init-scale, sweep: g}], g sweeping init_std and learning_rate (accepted: the table and "
        "figure showed one of the two variants of each std, the last listed)",
        ExperimentSpecError,
        ("analyses[0].sweep", "4 variants for 2 values of init_std", "also sweeps learning_rate", "init_std alone"),
        experiment(
            setups=[
                {"name": "st-a", "id": "g", "sweep": {"init_std": [1.0e-3, 1.0e-2], "learning_rate": [1e-3, 2e-3]}}
            ],
            analyses=[{"kind": "init-scale", "sweep": "g"}],
        ),
        cli=True,
    ),
    B(
        "analysis-span-ablation-jobs-named-as-a-setup",
        GROUP,
        "setups: [st-a, {name: head, id: span-ablation-st-a-rf16}], analyses: [{kind: span-ablation, variant: "
        "st-a-rf16}] (plan listed 4 jobs of that id, two per job id; run: 'experiment.db cannot be read (UNIQUE "
        "constraint failed: jobs.id) ... if it is damaged, move it aside')",
        ExperimentSpecError,
        ("analyses", "the span-ablation jobs are called 'span-ablation-st-a-rf16'", "give that entry another 'id'"),
        experiment(
            setups=["st-a", {"name": "head", "id": "span-ablation-st-a-rf16"}],
            analyses=[{"kind": "span-ablation", "variant": "st-a-rf16"}],
        ),
        cli=True,
    ),
    B(
        "analysis-span-ablation-zoo-null-byte",
        GROUP,
        "analyses: [{kind: span-ablation, zoo: 'store\\x00'}] (a traceback: ValueError: embedded null byte)",
        ExperimentSpecError,
        ("analyses[0].zoo", "'store\\x00' holds a line break, tab or other control character"),
        experiment(encoder=None, setups=["st-a"], analyses=[{"kind": "span-ablation", "zoo": "store\x00"}]),
        cli=True,
    ),
    B(
        "analysis-span-ablation-zoo-name-too-long",
        GROUP,
        "analyses: [{kind: span-ablation, zoo: <a folder name of 5,000 characters>}] (told to check 'the room left "
        "on its disk', the OSError File name too long of the folder check)",
        ExperimentSpecError,
        ("analyses[0].zoo", "is not a folder", "give 'shipped' or a store folder"),
        experiment(encoder=None, setups=["st-a"], analyses=[{"kind": "span-ablation", "zoo": "a" * 5000}]),
        cli=True,
    ),
    B(
        "analysis-span-ablation-name-too-long",
        GROUP,
        "setups: [{name: st-a, id: <250 characters>}], analyses: [{kind: span-ablation, variant: <that id>}] "
        "(planned: the jobs' folder runs/span-ablation-<id> is 264 bytes, past the file system's 255, so each "
        "ablation could only fail once its adapter had trained)",
        ExperimentSpecError,
        ("analyses", "the span-ablation jobs' folder", "264 bytes long", "give the ablated variant a shorter 'id'"),
        experiment(
            setups=[{"name": "st-a", "id": "s" * 250}], analyses=[{"kind": "span-ablation", "variant": "s" * 250}]
        ),
        cli=True,
    ),
    B(
        "analysis-adapter-size-lines-twice",
        GROUP,
        "analyses: [{kind: adapter-size, sweep: sa, lines: [head, head]}] (accepted: the line drawn twice)",
        ExperimentSpecError,
        ("analyses[0].lines[1]", "'head' is listed twice"),
        experiment(
            setups=["head", {"name": "st-a", "id": "sa", "sweep": {"reduction_factor": [16, 8]}}],
            analyses=[{"kind": "adapter-size", "sweep": "sa", "lines": ["head", "head"]}],
        ),
        cli=True,
    ),
    B(
        "ablate-zoo-max-length-over-positions",
        GROUP,
        "ablate_zoo('rte', max_length=100000) on the shipped MiniLM (512 positions; an experiment file refuses it, "
        "the API loaded the model and ran)",
        ConfigError,
        ("max_length=100000", "512 (max_position_embeddings=512)", "at most 512"),
        lambda folder: lambda: ablate_zoo("rte", data_dir=demo_data_dir(), max_examples=4, max_length=100000),
    ),
    B(
        "span-ablation-task-name",
        GROUP,
        "ablate_spans(model, 'rte', 'a', 'h', batches): the task by name, as ablate_zoo takes it (not an error; was "
        "an AttributeError: 'str' object has no attribute 'metrics')",
        None,
        (),
        lambda folder: _scored_spans,
    ),
    B(
        "span-ablation-drop-outside-the-layers",
        GROUP,
        "ablate_spans(<2-layer model>, ...).drop(5, 9) (a KeyError: (5, 9))",
        ConfigError,
        ("drop(5, 9): no such span", "ablated on 2 layers", "0 <= first <= last <= 1"),
        lambda folder: lambda: _ablated().drop(5, 9),
    ),
    B(
        "span-ablation-record-without-a-span",
        GROUP,
        "SpanAblation.from_dict(<a record without the span over every layer>) (read back; the report's table then "
        "failed with a KeyError (0, 1))",
        ConfigError,
        ("a damaged span-ablation record", "2 layers need 'accuracy'", "for each span first..last"),
        _damaged_record,
    ),
    B(
        "ablate-zoo-meta-device",
        GROUP,
        "ablate_zoo('rte', device='meta') (the model loaded, then torch's RuntimeError: unsupported autocast "
        "device_type 'meta'; ablate_run alike)",
        ConfigError,
        ("device 'meta'", "holds shapes but no values", "use cpu"),
        lambda folder: lambda: ablate_zoo("rte", data_dir=demo_data_dir(), max_examples=4, device="meta"),
    ),
)
