"""The evaluate, prune and training commands refuse bad arguments before any model or data loads, as one
'error: ...' line and exit status 2."""

import pytest

from adapterfusion.cli import _training_overrides, build_parser, main


def _error(capsys, *argv: str) -> str:
    assert main(list(argv)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    return err


@pytest.mark.parametrize("command", [["evaluate"], ["prune", "--keep", "1"]])
def test_an_empty_json_path_is_refused(command, capsys, tmp_path):
    err = _error(capsys, command[0], str(tmp_path), *command[1:], "--json", "")
    assert err.startswith("error: --json '' is not a path")


def test_a_missing_run_folder_is_named_as_missing(capsys, tmp_path):
    assert "does not exist" in _error(capsys, "evaluate", str(tmp_path / "nowhere"))
    assert "does not exist" in _error(capsys, "prune", str(tmp_path / "nowhere"), "--keep", "1")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["evaluate", "RUN", "--batch-size", "0"], "batch_size=0 must be a positive integer"),
        (["prune", "RUN", "--keep", "1", "--batch-size", "0"], "batch_size=0 must be a positive integer"),
        (["prune", "RUN", "--keep", "1", "--repeats", "0"], "repeats=0 must be a positive integer"),
        (["prune", "RUN", "--keep", "1", "--timing-batches", "0"], "timing_batches=0 must be a positive integer"),
        (["prune", "RUN", "--keep", "0"], "keep=0 must be a positive integer"),
    ],
)
def test_counts_are_checked_before_the_run_is_read(argv, message, capsys, tmp_path):
    """The run folder does not even exist: the count is refused first, not after the data has loaded."""
    err = _error(capsys, *[str(tmp_path / "nowhere") if a == "RUN" else a for a in argv])
    assert message in err and "time_fusions" not in err


@pytest.mark.parametrize("command", [["train-adapter"], ["fuse", "--sources", "cb"]])
def test_resume_and_overwrite_together_are_refused(command, capsys, tmp_path):
    err = _error(
        capsys, command[0], "--task", "rte", "--output-dir", str(tmp_path), *command[1:], "--resume", "--overwrite"
    )
    assert "--resume and --overwrite" in err
    assert not any(tmp_path.iterdir())


def test_patience_none_turns_early_stopping_off_and_a_word_is_refused(capsys):
    """'--patience 0' said 'must be an integer >= 1 or None', and '--patience none' was argparse's 'invalid int'."""
    parser = build_parser()
    args = parser.parse_args(["train-adapter", "--task", "rte", "--patience", "none"])
    assert _training_overrides(args)["patience"] is None
    three = parser.parse_args(["train-adapter", "--task", "rte", "--patience", "3"])
    assert _training_overrides(three)["patience"] == 3
    assert "patience" not in _training_overrides(parser.parse_args(["train-adapter", "--task", "rte"]))
    with pytest.raises(SystemExit):
        parser.parse_args(["train-adapter", "--task", "rte", "--patience", "soon"])
    assert "'soon' is not a whole number of evaluations, or 'none'" in capsys.readouterr().err


def test_status_and_report_say_what_was_given_instead_of_an_output_dir(tmp_path, capsys, monkeypatch):
    """`report exp.yaml` said the report folder could not be made in a file; `status` of a missing folder said it
    held no results; `status '~/out'` did not expand the home folder as the experiment file's output_dir does."""
    from adapterfusion.cli import main

    experiment = tmp_path / "exp.yaml"
    experiment.write_text("name: x\n")
    assert main(["report", str(experiment)]) == 2
    assert "is a file, not an experiment's output dir" in capsys.readouterr().err
    assert main(["status", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "out").mkdir()
    assert main(["status", "~/out"]) == 2
    assert f"{str(tmp_path / 'out')!r} holds no experiment results" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["status", "report"])
@pytest.mark.parametrize(("given", "said"), [("no\nsuch", "does not exist"), ("out\0", "holds a NUL character")])
def test_status_and_report_of_a_path_with_a_newline_or_nul_say_it_on_one_line(command, given, said, tmp_path, capsys):
    """`status $'no\\nsuch'` printed the path as it is, so the error took two lines; a NUL in it was printed raw and
    called missing."""
    from adapterfusion.cli import main

    assert main([command, str(tmp_path / given)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and said in lines[0] and "\0" not in lines[0]


def test_train_adapter_can_leave_out_houlsbys_layer_norm_copies(monkeypatch):
    """On DistilBERT and BART the refusal of the copies said to pass train_layer_norm=False, which the command had
    no way to pass."""
    import adapterfusion.cli as cli

    seen = {}

    def recorded(task, setup, **kwargs):
        seen[setup] = kwargs["setup_options"]
        raise KeyboardInterrupt  # enough: the options reached train()

    monkeypatch.setattr(cli, "train", recorded)
    for extra in ([], ["--no-train-layer-norm"]):
        setup = "st-a-houlsby" if extra else "st-a"
        assert main(["train-adapter", "--task", "rte", "--setup", setup, *extra]) == 130
    assert seen == {
        "st-a": {"reduction_factor": 16},
        "st-a-houlsby": {"reduction_factor": 16, "train_layer_norm": False},
    }


def test_no_train_layer_norm_without_houlsby_names_the_flag(capsys, tmp_path):
    """With the default --setup st-a it was refused as "setup 'st-a' has no option 'train_layer_norm'", after the
    encoder had loaded, in the API's words rather than the command's."""
    err = _error(capsys, "train-adapter", "--task", "rte", "--output-dir", str(tmp_path), "--no-train-layer-norm")
    assert "--no-train-layer-norm applies to --setup st-a-houlsby" in err and "--setup st-a has none" in err
    assert not any(tmp_path.iterdir())


def test_an_os_error_on_a_path_is_one_line(capsys, tmp_path, monkeypatch):
    """A write the path checks let through and the OS refused (a full disk; /proc, which root's os.access calls
    writable) was a FileNotFoundError or OSError traceback."""
    import errno
    import json

    import adapterfusion.cli as cli

    record = {"fusion": "f", "adapters": ["a", "b"], "layers": [0], "values": [[0.5, 0.5]], "tokens": 3}
    (tmp_path / "fusion_attention.json").write_text(json.dumps(record))
    temp = str(tmp_path / ".heat.png.x1.tmp")

    def full(activation, path):
        raise OSError(errno.ENOSPC, "No space left on device", temp)

    monkeypatch.setattr(cli, "plot_run_fusion_attention", full)
    err = _error(capsys, "analyze-fusion", str(tmp_path), "--output", str(tmp_path / "heat.png"))
    assert err.startswith(f"error: No space left on device at {temp!r}; check that path and the room left")


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["train-adapter", "--reduction-factor", "0"],
            "--reduction-factor 0.0 must be a positive number (the paper uses 2, 16 or 64)",
        ),
        (["train-adapter", "--reduction-factor", "-4"], "--reduction-factor -4.0 must be a positive number"),
        (["train-adapter", "--reduction-factor", "inf"], "--reduction-factor inf must be a positive number"),
        (["train-adapter", "--max-examples", "0"], "--max-examples 0 must be an integer >= 1"),
        (["train-adapter", "--max-length", "4"], "--max-length 4 must be an integer >= 8"),
        (
            ["train-adapter", "--patience", "0"],
            "--patience 0 must be an integer >= 1 or None (None: no early stopping)",
        ),
        (["train-adapter", "--learning-rate", "0"], "--learning-rate 0.0 must be a finite number > 0.0 and <= 3.4e+38"),
        (["train-adapter", "--learning-rate", "1e39"], "--learning-rate 1e+39 must be a finite number > 0.0"),
        (["train-adapter", "--epochs", "nan"], "--epochs nan must be a finite number > 0.0"),
        (["train-adapter", "--seed", "4294967296"], "--seed 4294967296 must be an integer in 0..4294967295"),
        (["fuse", "--sources", "cb", "--max-steps", "0"], "--max-steps 0 must be an integer >= 1"),
        (["fuse", "--sources", "cb", "--batch-size", "0"], "--batch-size 0 must be an integer >= 1"),
        (["fuse", "--sources", "cb", "--adapter-seed", "-1"], "--adapter-seed -1 must be an integer in 0..4294967295"),
        # train()'s other checks of its settings run as early; a message about no single option passes unchanged
        (["fuse", "--sources", "cb,cb"], "fusion sources ['cb', 'cb'] name ['cb'] more than once"),
    ],
)
def test_training_counts_and_sizes_are_refused_by_their_option_before_anything_loads(
    argv, message, capsys, tmp_path, monkeypatch
):
    """--reduction-factor 0 was refused only once the encoder and the task data had loaded. The command runs train()'s
    own checks of its settings (one rule, not a copy of it in the CLI), and the refusal names the option."""

    def never(*args, **kwargs):
        raise AssertionError("train() was called")

    monkeypatch.setattr("adapterfusion.cli.train", never)
    err = _error(capsys, argv[0], "--task", "rte", "--output-dir", str(tmp_path), *argv[1:])
    assert err.startswith(f"error: {message}")
    assert not any(tmp_path.iterdir())


def test_a_fractional_reduction_factor_is_accepted(monkeypatch):
    """The API takes any positive reduction factor (the bottleneck is hidden // factor); the CLI passes it on."""
    seen = {}
    monkeypatch.setattr("adapterfusion.cli.train", lambda *args, **kwargs: seen.update(kwargs) or None)
    monkeypatch.setattr("adapterfusion.cli._print_result", lambda result: None)
    assert main(["train-adapter", "--task", "rte", "--reduction-factor", "1.5"]) == 0
    assert seen["setup_options"]["reduction_factor"] == 1.5


@pytest.mark.parametrize("command", ["analyze-fusion", "evaluate", "status"])
def test_every_error_is_one_line_whatever_its_message_quotes(command, tmp_path, capsys):
    """A path with a newline, named unquoted by the library (`analyze-fusion $'no\\nsuch'`), split the CLI's one
    `error:` line in two; the CLI now shows a line break inside a message as \\n."""
    from adapterfusion.cli import main

    assert main([command, str(tmp_path / "no\nsuch")]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "no\\nsuch" in lines[0], lines
