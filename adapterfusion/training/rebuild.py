"""`rebuild_run(run_dir)`: the trained model of a finished `train()` run folder, back in memory.

The run's setup is prepared again, exactly as training prepared it, on the run's encoder (its own encoder/
folder when the setup changed encoder weights): that names and places every piece as training did and, for
fusion setups, loads the same stage-1 adapters from the same AdapterStore. The fresh pieces are then replaced
by the saved ones (adapter/, fusion/, head/), so no setup's layout is described twice.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from adapterfusion.encoder_identity import check_same_encoder
from adapterfusion.encoder_loading import load_encoder_model, load_language_model, load_tokenizer
from adapterfusion.encoders import resolve_encoder
from adapterfusion.errors import RunFileError
from adapterfusion.fusion.config import recorded_fusion_config
from adapterfusion.io.paths import as_path
from adapterfusion.model import wrap
from adapterfusion.run_layout import MT_A_TASKS_DIR
from adapterfusion.tasks.spec import TaskSpec
from adapterfusion.training.errors import TrainingError
from adapterfusion.training.hardware import check_evaluation_device, training_device
from adapterfusion.training.run import RunFolder
from adapterfusion.training.run_files import CONFIG_FILE, METRICS_FILE, read_run_json
from adapterfusion.training.run_state import require_finished
from adapterfusion.training.setups import SetupContext, get_setup
from adapterfusion.training.store import MT_A, AdapterStore, as_store

if TYPE_CHECKING:
    from adapterfusion.model import AdaptedModel


@dataclass
class RebuiltRun(RunFolder):
    """A run folder's trained model with the run's activation (`activate()`), in eval mode."""

    run_dir: Path
    config: dict[str, Any]  # the run's config.json
    task: TaskSpec
    model: AdaptedModel
    tokenizer: Any
    head: str | None  # None for a generation task: the language model's own head
    adapter: str | None = None  # the trained adapter of st-a / st-a-houlsby
    fusion: str | None = None  # the trained fusion of fusion-st-a / fusion-mt-a

    @property
    def setup(self) -> str:
        return self.config["setup"]

    @property
    def seed(self) -> int:
        return int(self.config["seed"])

    @property
    def bf16(self) -> bool:
        """Whether the run trained (and so scored its dev set) under bfloat16 autocast."""
        training = self.config.get("training")
        return isinstance(training, dict) and training.get("bf16") is True

    def activate(self) -> None:
        """What the run trained runs: its fusion, else its adapter, else the bare (or fine-tuned) encoder."""
        self.model.activate(adapter=self.adapter, fusion=self.fusion, head=self.head)

    def recorded_metrics(self) -> dict[str, Any]:
        """The best checkpoint's dev metrics as the run's metrics.json recorded them."""
        return dict(read_run_json(self.metrics_path).get("best", {}))


def check_fused_adapters(run_dir: Path, config: dict[str, Any], loaded: dict[str, dict[str, str]]) -> None:
    """Refuse a fusion run whose store no longer holds the adapters it was trained on (a stage-1 adapter re-trained
    since): its fusion weights belong to the old adapters. Runs that recorded no digests are not checked."""
    recorded = config.get("fused_adapters")
    if not isinstance(recorded, dict):
        return
    changed = [
        f"{name!r} ({loaded.get(name, {}).get('entry') or record.get('entry')}: sha256 "
        f"{str(record.get('sha256'))[:12]} when trained, {str(loaded.get(name, {}).get('sha256'))[:12]} now)"
        for name, record in recorded.items()
        if not isinstance(record, dict) or loaded.get(name, {}).get("sha256") != record.get("sha256")
    ]
    if changed:
        raise TrainingError(
            f"cannot rebuild {run_dir}: the store's adapter(s) {', '.join(changed)} changed since this fusion was "
            "trained, so its fusion weights belong to adapters the store no longer holds; train the fusion again on "
            "the current adapters (`adapterfusion run` of its experiment re-runs it, or `adapterfusion fuse`), or "
            "pass --store (store=...) pointing to a store with the adapters it was trained on"
        )


def _fusion_step(run_dir: Path) -> int:
    """The fusion step (its temperature schedule's) the run's best checkpoint was scored at, as metrics.json records
    it; runs from before it was recorded: the last training step, where a schedule has ended."""
    metrics = read_run_json(run_dir / METRICS_FILE)
    step = metrics.get("fusion_step", metrics.get("global_step", 0))
    return step if isinstance(step, int) and not isinstance(step, bool) and step >= 0 else 0


_MT_A_FIX = (
    "rebuild the fusion-mt-a runs built on it, or load its tasks/<task>/adapter and head into its encoder/ by hand"
)


def _is_mt_a_run(folder: Path) -> bool:
    """Whether `folder` holds an MT-A run's config.json (read leniently: only to name the folder a task lies in)."""
    try:
        return read_run_json(folder / CONFIG_FILE).get("setup") == MT_A
    except (RunFileError, OSError):
        return False


def _as_recorded(setup_options: Any) -> Any:
    """The run's setup options with a recorded fusion config read as recorded (recorded_fusion_config): a run
    finished before a no-op option was refused still rebuilds, computing as it trained."""
    if isinstance(setup_options, Mapping) and isinstance(setup_options.get("fusion_config"), Mapping):
        return {**setup_options, "fusion_config": recorded_fusion_config(setup_options["fusion_config"]).to_dict()}
    return setup_options


def rebuild_run(
    run_dir: str | os.PathLike, store: AdapterStore | str | os.PathLike | None = None, device: str | None = None
) -> RebuiltRun:
    """Load the trained model of `run_dir` (a `<output_dir>/<task>/<setup>/seed-<seed>/` folder).

    store: the AdapterStore a fusion run's adapters come from; default the one its config.json records (runs
    written before that was recorded need it given). device: default "cuda" when available, else "cpu".
    """
    run_dir = as_path(run_dir, "run folder")
    check_evaluation_device(device)
    if run_dir.parent.name == MT_A_TASKS_DIR and _is_mt_a_run(run_dir.parent.parent):  # it has no config.json
        raise TrainingError(f"{run_dir} is one task of the MT-A run {run_dir.parent.parent}; {_MT_A_FIX}")
    config = read_run_json(run_dir / CONFIG_FILE)
    require_finished(run_dir)  # only finished runs have their best weights saved
    if config["setup"] == MT_A:
        raise TrainingError(f"{run_dir} is an MT-A run (several tasks in one folder); {_MT_A_FIX}")
    recipe = get_setup(config["setup"])
    store = store if store is not None else config.get("store")
    store = as_store(store)
    encoder = run_dir / "encoder" if (run_dir / "encoder").is_dir() else Path(config["encoder"])
    task = TaskSpec.from_dict(config["task_spec"])
    # Loaded as training loaded them (training/run.py): a decoder's tokenizer then makes no token_type_ids and pads
    # with its eos token, and a T5 or BART generation run gets its seq2seq LM head, not a causal one.
    source = resolve_encoder(str(encoder), reach_hub=False, tokenizer=False)  # ConfigError: a folder gone
    tokenizer = load_tokenizer(source)  # ConfigError (HubError for a Hub id) naming the encoder and the fix
    model = wrap((load_language_model if task.is_generation else load_encoder_model)(source))
    if encoder == Path(config["encoder"]):  # not a run's own trained encoder: other weights saved at its path since
        check_same_encoder(model, config.get("encoder_identity"), run_dir)  # would score another model than trained

    context = SetupContext(
        task=task,
        options=recipe.resolve_options(_as_recorded(config["setup_options"])),
        seed=int(config["seed"]),
        encoder=config["encoder"],
        store=store,
    )
    try:
        plan = recipe.prepare(model, context)
    except TrainingError as err:
        hint = "" if store is not None else "; its config.json records no adapter store: pass store=... (CLI: --store)"
        raise TrainingError(f"cannot rebuild {run_dir}: {err}{hint}") from None
    check_fused_adapters(run_dir, config, plan.fused_adapters)
    if plan.fusion is not None:
        model.load_fusion(run_dir / "fusion", name=plan.fusion, overwrite=True)
        model.set_fusion_step(_fusion_step(run_dir))
    elif plan.adapters:
        model.load_adapter(run_dir / "adapter", name=plan.adapters[0], overwrite=True)
    if plan.head is not None:
        model.load_head(run_dir / "head", name=plan.head, overwrite=True)
    model.requires_grad_(False)
    model.to(device or training_device()).eval()
    rebuilt = RebuiltRun(
        run_dir=run_dir,
        config=config,
        task=task,
        model=model,
        tokenizer=tokenizer,
        head=plan.head,
        adapter=plan.adapters[0] if plan.fusion is None and plan.adapters else None,
        fusion=plan.fusion,
    )
    rebuilt.activate()
    return rebuilt
