"""The bad-input catalogue's machinery: what a case is (`BadInput`), how one is run and judged (`run_case`), and the
helpers cases in several modules share. The cases live in `test_bad_inputs.py` (the first 73) and in `cases_*.py`
(one module per boundary: forward inputs, encoders and the Hub, file and folder targets, pieces and configs, runs);
`test_bad_inputs.CASES` gathers them all, and scripts/bad_input_table.py writes docs/bad-inputs.md from them."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import huggingface_hub
import transformers

import adapterfusion as af
from adapterfusion.cli import main as cli_main
from adapterfusion.demo import demo_data_dir
from adapterfusion.errors import AdapterFusionError
from adapterfusion.tasks import TaskSpec, load_task_data
from tiny_decoders import tiny_decoder, tiny_decoder_inputs
from tiny_models import tiny_encoder

Action = Callable[[], Any]


@dataclass(frozen=True)
class BadInput:
    """One catalogue entry. `error` None means the input is not an error but must be handled and reported: the
    action then returns the report line. `cli`: fed in through `adapterfusion run`, not the Python API."""

    id: str
    group: str
    tried: str
    error: type[AdapterFusionError] | None
    keywords: tuple[str, ...]
    prepare: Callable[[Path], Action]
    cli: bool = False


@dataclass(frozen=True)
class Outcome:
    """What one case did: the error type's name and message (folder paths shown as <dir>), and the problems found."""

    case: BadInput
    error_type: str
    message: str
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


class CliExit(Exception):
    def __init__(self, code: int, stderr: str) -> None:
        super().__init__(stderr)
        self.code, self.stderr = code, stderr


class ModelTouched(Exception):
    """A failed load changed the model it was loaded into."""


def contents(model: af.AdaptedModel) -> tuple:
    sites = tuple(sorted((s.layer_index, s.position, tuple(s.adapters), tuple(s.fusions)) for s in model.sites))
    return tuple(model.adapter_names), tuple(model.fusion_names), tuple(model.head_names), sites


def load_into(model: af.AdaptedModel, kind: str, directory: Path, **kwargs: Any) -> Action:
    """The action `model.load_<kind>(directory)`, which must leave the model as it was when it fails."""

    def action() -> Any:
        before = contents(model)
        try:
            return getattr(model, f"load_{kind}")(directory, **kwargs)
        finally:
            if contents(model) != before:
                raise ModelTouched(f"the failed load changed the model: {before} -> {contents(model)}")

    return action


def saved_piece(folder: Path, kind: str = "adapter", **encoder: Any) -> Path:
    """A piece of `kind` saved from a tiny BERT (hidden 32, 2 layers unless `encoder` says otherwise)."""
    model = af.wrap(tiny_encoder("bert", **encoder))
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    if kind == "adapter":
        return model.save_adapter("a", folder / "a")
    if kind == "fusion":
        model.add_adapter("b", af.AdapterConfig.pfeiffer(reduction_factor=4))
        model.add_fusion("f", ["a", "b"])
        return model.save_fusion("f", folder / "f")
    model.add_head("h", af.ClassificationHead(num_labels=2, labels=("entailment", "not_entailment")))
    return model.save_head("h", folder / "h")


def adapters_a_and_b(head: str) -> af.AdaptedModel:
    """A tiny BERT with Pfeiffer adapters a and b (reduction factor 4) and a two-class head named `head`."""
    model = af.wrap(tiny_encoder("bert"))
    for name in ("a", "b"):
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))
    model.add_head(head, af.ClassificationHead(num_labels=2))
    return model


def tiny_lm(model_type: str) -> af.AdaptedModel:
    """A tiny language model of `model_type` (tiny_decoders.py) with adapter 'a' active and no head."""
    model = af.wrap(tiny_decoder(model_type))
    model.add_adapter("a")
    model.activate(adapter="a")
    return model


def generating(model_type: str = "gpt2", unload: bool = False, **changes: Any) -> Callable[[Path], Action]:
    """tiny_lm(model_type).generate(**<tiny_decoder_inputs(model_type), left-padded>, max_new_tokens=2,
    pad_token_id=0, with `changes`); a value None drops that input. unload: unload() the model first and put it in
    train mode."""

    def prepare(folder: Path) -> Action:
        model = tiny_lm(model_type)
        if unload:
            model.unload()
            model.train()
        prompts = tiny_decoder_inputs(model_type, padding_side="left")
        inputs: dict[str, Any] = {**prompts, "max_new_tokens": 2, "pad_token_id": 0}
        inputs.update(changes)
        return lambda: model.generate(**{key: value for key, value in inputs.items() if value is not None})

    return prepare


def encoder_folder(folder: Path) -> Path:
    """A tiny BERT (2 layers) with the shipped tokenizer and its vocabulary, saved as a HuggingFace folder."""
    path = folder / "my-encoder"
    tiny_encoder("bert", vocab_size=30522).save_pretrained(path)
    transformers.AutoTokenizer.from_pretrained(af.default_encoder_path()).save_pretrained(path)
    return path


# One optimizer step on 8-example batches: what a case that must get past the checks into training runs.
TINY_RUN = {"max_steps": 1, "batch_size": 8, "max_length": 32, "patience": None}


def multitask_in_folder(
    tasks: list[Any], encoder_of: Callable[[Path], Path] = encoder_folder, **kwargs: Any
) -> Callable[[Path], Action]:
    """train_multitask(tasks, **kwargs) for TINY_RUN's one step on the encoder `encoder_of(folder)` saves (default a
    tiny BERT) and the demo data, into folder/runs."""

    def prepare(folder: Path) -> Action:
        encoder = encoder_of(folder)
        return lambda: af.training.train_multitask(
            tasks,
            encoder=encoder,
            output_dir=folder / "runs",
            data_dir=demo_data_dir(),
            training_config=TINY_RUN,
            **kwargs,
        )

    return prepare


def left_no_run_folder(prepare: Callable[[Path], Action]) -> Callable[[Path], Action]:
    """prepare's action, failing as well where it left `runs/` behind: the refusal had come after the folders."""

    def wrapped(folder: Path) -> Action:
        action = prepare(folder)

        def checked() -> Any:
            try:
                return action()
            finally:
                assert not (folder / "runs").exists(), "left run folders behind"

        return checked

    return wrapped


def train_on_damaged(damage: Callable[[Path], Any], **setup_options: Any) -> Callable[[Path], Action]:
    """train() of st-a on rte (with `setup_options`) for one step on 16 examples, on encoder_folder after
    `damage(path)`: an encoder folder that loads trains at once."""

    def prepare(folder: Path) -> Action:
        path = encoder_folder(folder)
        damage(path)
        return lambda: af.training.train(
            "rte",
            "st-a",
            encoder=path,
            output_dir=folder / "runs",
            data_dir=demo_data_dir(),
            max_examples=16,
            training_config=TINY_RUN,
            setup_options=setup_options or None,
        )

    return prepare


def edit_json(path: Path, edit: Callable[[dict], None]) -> None:
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))


def cli(*argv: str) -> str:
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        code = cli_main(list(argv))
    if code != 0:
        raise CliExit(code, stderr.getvalue())
    return stderr.getvalue()


def experiment_dict(folder: Path, **changes: Any) -> dict:
    return {
        "name": "tiny",
        "encoder": "some-org/some-encoder",
        "tasks": ["rte", "cb"],
        "setups": ["head"],
        "output_dir": str(folder / "out"),
        **changes,
    }


def experiment(**changes: Any) -> Callable[[Path], Action]:
    def prepare(folder: Path) -> Action:
        path = folder / "experiment.json"
        path.write_text(json.dumps(experiment_dict(folder, **changes)))
        return lambda: cli("run", str(path), "--no-progress")

    return prepare


def a_file(folder: Path, name: str = "taken") -> Path:
    path = folder / name
    path.write_text("a file the user keeps\n")
    return path


@contextlib.contextmanager
def read_only(directory: Path):
    """`directory` made read-only (mode 555). Root ignores permission bits, so for root os.access is made to answer
    for paths inside it as the kernel answers another user: the check under test is the one that reads it."""
    directory.chmod(0o555)
    real_access = os.access

    def access(path, mode, *args, **kwargs):
        inside = Path(path).resolve().is_relative_to(directory.resolve())
        return False if inside and mode & os.W_OK else real_access(path, mode, *args, **kwargs)

    try:
        with mock.patch("os.access", access) if os.geteuid() == 0 else contextlib.nullcontext():
            yield
    finally:
        directory.chmod(0o755)


def own_file(name: str, text: str, **fields: Any) -> Callable[[Path], Action]:
    """A user's own data file `name` holding `text`, loaded as a single-text task's train split and (a copy of the
    same name in dev/) its validation split."""

    def prepare(folder: Path) -> Action:
        path, dev = folder / name, folder / "dev" / name
        dev.parent.mkdir()
        for each in (path, dev):
            each.write_text(text, encoding="utf-8")
        spec = {"name": "own", "kind": "single", "text_fields": ["text"], "label_names": ["neg", "pos"], **fields}
        return lambda: load_task_data(TaskSpec(**spec, data_files={"train": str(path), "validation": str(dev)}))

    return prepare


@contextlib.contextmanager
def offline_hub(folder: Path, offline: bool = True, model_info: Callable[..., Any] | None = None) -> Iterator[None]:
    """An empty local Hugging Face cache in `folder`, offline mode on or off, and huggingface_hub.model_info replaced
    (by default: the test fails if the Hub is asked at all). Never the network."""

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the Hub was asked")

    switch = "1" if offline else "0"
    environment = {"HF_HUB_CACHE": str(folder / "hf-cache"), "HF_HUB_OFFLINE": switch, "TRANSFORMERS_OFFLINE": switch}
    with (
        mock.patch.object(huggingface_hub.constants, "HF_HUB_OFFLINE", offline),
        mock.patch.dict("os.environ", environment),
        mock.patch.object(huggingface_hub, "model_info", model_info or never),
    ):
        yield


def in_hub(action: Callable[[], Any], folder: Path, **hub: Any) -> Action:
    """`action` run inside offline_hub(folder, **hub)."""

    def run() -> Any:
        with offline_hub(folder, **hub):
            return action()

    return run


def snapshot(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def raised_by_us(error: BaseException) -> bool:
    frames = traceback.extract_tb(error.__traceback__)
    return bool(frames) and "/adapterfusion/" in frames[-1].filename.replace("\\", "/")


def run_case(case: BadInput, folder: Path) -> Outcome:
    """Prepare the case in the empty `folder`, feed the bad input in, and check what came back. As in the tests
    (tests/conftest.py), the Hub is never asked whether a model exists: every Hub id is taken as known, so a made-up
    id fails where it would with the network on; cases about the look-up itself replace this."""
    with mock.patch.object(huggingface_hub, "model_info", lambda repo_id, **kwargs: None):
        return _run_case(case, folder)


def _run_case(case: BadInput, folder: Path) -> Outcome:
    folder.mkdir(parents=True, exist_ok=True)
    action = case.prepare(folder)
    before = snapshot(folder)
    problems: list[str] = []
    error: BaseException | None = None
    try:
        returned = action()
    except Exception as caught:  # noqa: BLE001 - judging what was raised is the point
        error = caught
    if case.error is None:
        message, error_type = ("" if error is not None else str(returned)), "(handled, no error)"
        if error is not None:
            problems.append(f"raised {type(error).__name__}: {error}")
    elif case.cli:
        message, error_type = (str(error) if error is not None else "").strip(), case.error.__name__
        if not isinstance(error, CliExit):
            problems.append(f"expected `adapterfusion run` to exit with an error, got {error!r}")
        else:
            lines = error.stderr.strip().splitlines()
            message = lines[-1].removeprefix("error: ") if lines else ""
            if error.code != 2 or len(lines) != 1 or not lines[0].startswith("error: ") or "Traceback" in error.stderr:
                problems.append(f"exit code {error.code} and stderr {error.stderr!r}: not one 'error: ...' line")
    else:
        message, error_type = str(error) if error is not None else "", type(error).__name__
        if not isinstance(error, case.error):
            problems.append(f"expected {case.error.__name__}, got {type(error).__name__}: {error}")
        elif not raised_by_us(error):
            problems.append(f"{type(error).__name__} was raised outside adapterfusion")
    problems += [f"message lacks {word!r}" for word in case.keywords if word not in message]
    if snapshot(folder) != before:
        problems.append("files already saved in the folder were changed, added or removed")
    shown = message.replace(str(folder), "<dir>").replace(str(af.default_encoder_path()), "<shipped MiniLM>")
    shown = re.sub(r"\(pid \d+\)", "(pid <pid>)", shown)  # so the generated table is the same on every run
    return Outcome(case, error_type, shown, tuple(problems))
