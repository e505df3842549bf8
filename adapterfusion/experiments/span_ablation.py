"""Span ablation (Houlsby et al. 2019, §3.6, Fig. 6 left/centre): a trained adapter evaluated on its task's dev set
with the adapter removed from every contiguous span of layers [i, j], each evaluation run with the model's
skip_layers (those layers' sites run as the bare encoder; the head stays). The full span is the bare encoder
under the trained head; the drop of span [i, j] is its dev score minus the score with no layer removed.

`ablate_spans` does the evaluations on a model as given; `ablate_run` and `ablate_zoo` load a trained run's or a
zoo's adapter and head first; `run_ablation_job` is a span-ablation job of an experiment (experiments/analyses.py,
plan.py), which writes the result as the job's metrics.json.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adapterfusion.defaults import default_encoder_path
from adapterfusion.encoder_limits import check_max_length
from adapterfusion.encoder_loading import load_encoder_model, load_tokenizer
from adapterfusion.encoders import resolve_encoder
from adapterfusion.errors import ConfigError
from adapterfusion.evaluation import eval_batch_size, load_run_split
from adapterfusion.io.atomic import atomic_write_json
from adapterfusion.model import wrap
from adapterfusion.scoring import predict, score
from adapterfusion.tasks.collator import TaskCollator
from adapterfusion.tasks.encoding import encode_task
from adapterfusion.tasks.loading import load_task_data
from adapterfusion.tasks.registry import get_task, resolve_task
from adapterfusion.tasks.spec import TaskSpec
from adapterfusion.training.hardware import check_evaluation_device, training_device
from adapterfusion.training.rebuild import rebuild_run
from adapterfusion.training.run_files import METRICS_FILE, RUN_FORMAT_VERSION
from adapterfusion.training.store import ZOO_SETUP, resolve_zoo, zoo_seed

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel

ANALYSIS = "span-ablation"
ZOO_MAX_LENGTH = 128  # the shipped zoo's adapters were trained on 128 tokens (examples/zoo-minilm.yaml)
ZOO_BATCH_SIZE = 64


def layer_spans(num_layers: int) -> list[tuple[int, int]]:
    """Every contiguous span [first, last] of 0-based layers, first <= last, in row order (first, then last)."""
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 1:
        raise ConfigError(f"num_layers={num_layers!r} must be a positive integer")
    return [(first, last) for first in range(num_layers) for last in range(first, num_layers)]


@dataclass
class SpanAblation:
    """The dev metrics of one adapter with no layer removed (`baseline`) and with each span removed (`spans`,
    keyed (first, last), 0-based); `metric` is the one the drops are read from."""

    task: str
    metric: str
    num_layers: int
    examples: int
    baseline: dict[str, float]
    spans: dict[tuple[int, int], dict[str, float]]
    source: dict[str, Any] = field(default_factory=dict)  # which adapter: a run folder, or a zoo entry
    seconds: float | None = None

    def drop(self, first: int, last: int) -> float:
        """Span [first, last]'s dev score minus the baseline's, in percentage points (negative: worse)."""
        if (first, last) not in self.spans:
            raise ConfigError(
                f"drop({first!r}, {last!r}): no such span; the adapter was ablated on {self.num_layers} layers, so a "
                f"span is 0 <= first <= last <= {self.num_layers - 1}"
            )
        return 100.0 * (self.spans[(first, last)][self.metric] - self.baseline[self.metric])

    def to_dict(self) -> dict[str, Any]:
        return {
            "analysis": ANALYSIS,
            "task": self.task,
            "metric": self.metric,
            "num_layers": self.num_layers,
            "examples": self.examples,
            "baseline": dict(self.baseline),
            "spans": [{"first": i, "last": j, "metrics": dict(m)} for (i, j), m in self.spans.items()],
            "source": dict(self.source),
            "seconds": self.seconds,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SpanAblation:
        """Read back to_dict's record (a job's metrics.json); a record of anything else is a ConfigError."""
        if not isinstance(data, Mapping) or data.get("analysis") != ANALYSIS:
            raise ConfigError(f"not a {ANALYSIS} record: {str(data)[:80]!r}")
        try:
            result = cls(
                task=data["task"],
                metric=data["metric"],
                num_layers=int(data["num_layers"]),
                examples=int(data["examples"]),
                baseline=dict(data["baseline"]),
                spans={(int(s["first"]), int(s["last"])): dict(s["metrics"]) for s in data["spans"]},
                source=dict(data.get("source") or {}),
                seconds=data.get("seconds"),
            )
        except (KeyError, TypeError, ValueError) as err:
            raise ConfigError(
                f"a damaged {ANALYSIS} record ({type(err).__name__}: {err}): {str(data)[:80]!r}"
            ) from None
        # Every span and its metric, as ablate_spans writes them: the report's tables read each one. Counted, not
        # listed, first: a damaged num_layers of 10**9 would list 5 * 10**17 spans.
        n = result.num_layers
        whole = n >= 1 and len(result.spans) == n * (n + 1) // 2 and result.metric in result.baseline
        if not whole or not all(
            0 <= first <= last < n and result.metric in metrics for (first, last), metrics in result.spans.items()
        ):
            raise ConfigError(
                f"a damaged {ANALYSIS} record: {n} layers need {result.metric!r} with no layer removed and for each "
                "span first..last (0 <= first <= last < layers), which it does not hold"
            )
        return result


def length_sorted_batches(dataset: Any, tokenizer: Any, batch_size: int) -> tuple[list[dict[str, Any]], Any]:
    """The dataset's batches, shortest inputs first (less padding: ~22 evaluations of one dev set cost less), and
    the dataset in that order (a QA task's features must follow its logits). Scores do not depend on the order."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"batch_size={batch_size!r} must be a positive integer")
    order = sorted(range(len(dataset)), key=lambda i: (len(dataset[i]["input_ids"]), i))
    ordered = dataset.select(order)
    collate = TaskCollator(tokenizer)
    batches = [
        collate([ordered[i] for i in range(start, min(start + batch_size, len(ordered)))])
        for start in range(0, len(ordered), batch_size)
    ]
    return batches, ordered


def ablate_spans(
    model: AdaptedModel,
    task: str | TaskSpec,
    adapter: str,
    head: str,
    batches: Sequence[Mapping[str, Any]],
    features: Any = None,
    metric: str | None = None,
) -> SpanAblation:
    """Evaluate `adapter` (with `head`) on `batches` with no layer removed, then with each span of layers removed.
    features: the encoded split in the batches' order (an extractive QA task decodes answers with it); metric:
    default the task's first (the one training selects on)."""
    task = resolve_task(task)
    metric = metric if metric is not None else task.metrics[0]
    if metric not in task.metrics:
        raise ConfigError(f"metric={metric!r} is not a metric of task {task.name!r}; it has {list(task.metrics)}")
    if adapter not in model.adapter_names:
        raise ConfigError(f"the model has no adapter {adapter!r}; it has {model.adapter_names}")
    start = time.perf_counter()

    def evaluate(skip: Sequence[int]) -> dict[str, float]:
        with model.activated(adapter=adapter, head=head, skip_layers=skip):
            return score(task, predict(model, batches), features)

    baseline = evaluate(())
    spans = {(i, j): evaluate(range(i, j + 1)) for i, j in layer_spans(model.num_layers)}
    examples = len(features) if features is not None else sum(len(b["input_ids"]) for b in batches)
    return SpanAblation(
        task=task.name,
        metric=metric,
        num_layers=model.num_layers,
        examples=examples,
        baseline=baseline,
        spans=spans,
        seconds=time.perf_counter() - start,
    )


def ablate_run(
    run_dir: str | os.PathLike,
    max_examples: int | None = None,
    batch_size: int | None = None,
    device: str | None = None,
) -> SpanAblation:
    """Span ablation of the adapter a finished st-a / st-a-houlsby run trained, on the run's own dev split (its
    source and subsample, or a seeded subset of `max_examples`)."""
    run = rebuild_run(run_dir, device=device)  # checks the device before the run loads
    if run.adapter is not None and run.head is None:  # a generation task: the language model's own head scores it
        raise ConfigError(
            f"{run_dir} trained an adapter for {run.task.name!r}, a generation task, which has no head of its own to "
            "score the ablated model with; span ablation needs a classification task: leave it out of the "
            "analysis's tasks"
        )
    if run.adapter is None or run.head is None:
        raise ConfigError(
            f"{run_dir} is a {run.setup!r} run, which trained no single adapter: span ablation needs a run that "
            "trained one adapter and a head (st-a or st-a-houlsby)"
        )
    dataset = load_run_split(run, "validation", max_examples=max_examples)
    batches, ordered = length_sorted_batches(dataset, run.tokenizer, eval_batch_size(run, batch_size))
    result = ablate_spans(run.model, run.task, run.adapter, run.head, batches, ordered)
    result.source = {"run_dir": str(run.run_dir), "setup": run.setup, "seed": run.seed}
    return result


def ablate_zoo(
    task: str | TaskSpec,
    zoo: str | os.PathLike = "shipped",
    encoder: str | os.PathLike | None = None,
    data_dir: str | os.PathLike | None = None,
    max_examples: int | None = None,
    max_length: int = ZOO_MAX_LENGTH,
    batch_size: int = ZOO_BATCH_SIZE,
    device: str | None = None,
) -> SpanAblation:
    """Span ablation of a zoo's adapter and head for `task` (default: the shipped zoo on the shipped MiniLM), on the
    task's dev split from `data_dir` (a seeded subset of `max_examples`, seeded with the adapter's seed)."""
    spec = task if isinstance(task, TaskSpec) else get_task(task)
    encoder = str(encoder) if encoder is not None else str(default_encoder_path())
    # Refused before the encoder loads: a longer max_length fails at the first dev example past its positions.
    check_max_length(max_length, encoder)
    check_evaluation_device(device)
    store = resolve_zoo(zoo)
    seed = zoo_seed(store, encoder, spec.name)
    # Loaded as training loads them (training/run.py): a decoder's tokenizer then makes no token_type_ids and pads
    # with its eos token; weights the checkpoint lacks are drawn as when the zoo's adapters were trained on it.
    source = resolve_encoder(encoder, reach_hub=False, tokenizer=False)
    tokenizer = load_tokenizer(source)
    model = wrap(load_encoder_model(source))
    labels = spec.label_names or None
    name = store.load_into(model, spec.name, ZOO_SETUP, seed, encoder=encoder, head=True, labels=labels)
    model.requires_grad_(False)
    model.to(device or training_device()).eval()
    limits = {"validation": max_examples} if max_examples is not None else None
    data, _ = load_task_data(spec, data_dir, seed, max_examples=limits)
    encoded, _ = encode_task(spec, type(data)({"validation": data["validation"]}), tokenizer, max_length)
    batches, ordered = length_sorted_batches(encoded["validation"], tokenizer, batch_size)
    result = ablate_spans(model, spec, name, name, batches, ordered)
    entry = store.path(encoder, spec.name, ZOO_SETUP, seed).relative_to(store.root)  # the same in every clone
    result.source = {"zoo": str(zoo), "entry": entry.as_posix(), "seed": seed}
    return result


def run_ablation_job(
    options: Mapping[str, Any],
    task: str | TaskSpec,
    run_dir: str | os.PathLike,
    experiment_dir: str | os.PathLike,
    encoder: str | None = None,
    data_dir: str | None = None,
) -> Path:
    """One span-ablation job (plan.py): ablate the run at options["source_run"] (relative to the experiment's
    output dir) or the zoo's adapter (options["zoo"]), and write the result as `run_dir`/metrics.json."""
    run_dir = Path(run_dir)
    if "source_run" in options:
        result = ablate_run(
            Path(experiment_dir) / options["source_run"], options.get("max_examples"), options.get("batch_size")
        )
    elif "zoo" in options:
        result = ablate_zoo(
            task,
            options["zoo"],
            encoder,
            data_dir,
            options.get("max_examples"),
            options.get("max_length", ZOO_MAX_LENGTH),
            options.get("batch_size", ZOO_BATCH_SIZE),
        )
    else:
        raise ConfigError(f"a {ANALYSIS} job needs 'source_run' or 'zoo' in its options; got {dict(options)}")
    record = {"format_version": RUN_FORMAT_VERSION, **result.to_dict()}  # a run file, as the runner reads it
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(run_dir / METRICS_FILE, record)
    return run_dir
