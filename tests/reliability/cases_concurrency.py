"""Bad-input cases at one boundary, two writers at once: the same setup, store entry, run folder or served piece written
or loaded by two threads or processes together, and a write cut short by a kill.

A race cannot be timed from a test, so each case plays the second writer at the moment that matters: inside the first
writer, through a hook on the library's own step there (the other writer's whole call runs in between, in a thread
where it must wait for a lock the first one holds), or as another process that holds a lock as a live writer does."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from unittest import mock

import adapterfusion as af
from adapterfusion.experiments import ResultsStore, RunnerLock, load_spec, plan_jobs, report_files
from adapterfusion.experiments.errors import OutputDirLockedError
from adapterfusion.experiments.processes import GONE, ProcessRecord
from adapterfusion.experiments.writers import registered_writer
from adapterfusion.io import atomic
from adapterfusion.piece import SETUP_FILE
from adapterfusion.serialization import formats
from adapterfusion.training import AdapterStore, TrainingError
from catalogue import Action, BadInput, experiment_dict
from tiny_models import tiny_encoder

B = BadInput
GROUP = "concurrency"


def _dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(ended.stdout)


def _stale_lock_taken_over_meanwhile(folder: Path) -> Action:
    """Two runners start on an output dir whose runner.lock a killed runner left: the second judges it stale, and
    the first takes it over (removes it, puts its own lock there) before the second removes it. The lock is made by
    the action, and both runners end, so the folder is as it was."""
    out, dead = folder / "out", _dead_pid()

    def action() -> None:
        out.mkdir()
        (out / "runner.lock").write_text(json.dumps({"pid": dead, "host": os.uname().nodename, "started_at": 0}))
        first, judge, started = RunnerLock(out), ProcessRecord.status, []

        def status(record: ProcessRecord) -> str:  # the second runner has just read the stale lock
            answer = judge(record)
            if answer == GONE and not started:
                started.append(first)
                first.acquire()  # judges the stale lock itself (started: not again), and takes it over
            return answer

        second = RunnerLock(out)
        try:
            with mock.patch.object(ProcessRecord, "status", status):
                second.acquire()
        finally:
            held = (first._held, second._held)
            second.release()
            first.release()
            (out / "runner.lock").unlink(missing_ok=True)
            out.rmdir()
            assert held != (True, True), "both runners hold the lock"

    return action


_FLOCK_HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
if not os.fstat(fd).st_size:  # as training/run_lock.py holds run.lock: its pid in it
    os.write(fd, f"{os.getpid()}\\n".encode())
print("held", flush=True)
sys.stdin.read()
"""


def _flock_holder(path: Path) -> subprocess.Popen:
    """Another process that holds an flock on `path` (created with its pid in it if missing) until its stdin is
    closed (`communicate()`)."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _FLOCK_HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def _runner_lock_deleted_by_hand_meanwhile(folder: Path) -> Action:
    """A runner's lock is deleted by hand while it runs (its process taken for gone, as the message for a stale lock
    says to), a second runner starts, and the first ends: then a third runner starts while the second runs. The lock
    is made by the action, and every runner ends, so the folder is as it was."""
    out = folder / "out"

    def action() -> None:
        first = RunnerLock(out).acquire()
        (out / "runner.lock").unlink()
        second = RunnerLock(out).acquire()
        first.release()
        try:
            RunnerLock(out).acquire()
        finally:
            second.release()
            (out / "runner.lock").unlink(missing_ok=True)
            out.rmdir()

    return action


def _runners_on_a_file_system_without_hard_links(folder: Path) -> Action:
    """Two runners on an output dir on a file system without hard links (FAT, exFAT, some network shares: link()
    answers EPERM), the second starting while the first runs."""
    out = folder / "out"

    def no_hard_links(source: object, target: object, *args: object, **kwargs: object) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted", os.fsdecode(str(source)))

    def action() -> None:
        try:
            with mock.patch("os.link", no_hard_links), RunnerLock(out):
                RunnerLock(out).acquire()
        finally:
            out.rmdir()  # the first runner's lock is gone with it

    return action


def _live_runner_in_another_container(folder: Path) -> Action:
    """runner.lock of a runner that runs in another container on this machine (same host name and boot id, its own
    pid namespace): the pid it records is none this process sees (here: an ended one's), and the runner holds the
    lock's flock. The action runs a second runner there, then ends the first."""
    out = folder / "out"
    out.mkdir()
    record = {**ProcessRecord.current().to_dict(), "pid": _dead_pid(), "start_time": None, "started_at": 0}
    (out / "runner.lock").write_text(json.dumps(record))
    holder = _flock_holder(out / "runner.lock")

    def action() -> None:
        try:
            with RunnerLock(out):
                pass
        finally:
            holder.communicate(timeout=10)  # closes its stdin: it ends, and its flock with it

    return action


def _runner_beside_a_runner_with_our_pid(folder: Path) -> Action:
    """A runner starts (registered_writer, then RunnerLock, as run_experiment does) on an output dir that a live
    runner in another container on this machine writes: same host name, and the same pid as this process (each
    container counts its own pids: both may be 1). That runner holds the lock's flock, and its journal records the
    temp file it is writing."""
    out = folder / "out"
    record = ProcessRecord.current()
    (out / "writers").mkdir(parents=True)
    writing = out / "runs" / ".metrics.json.abcdefgh.tmp"
    writing.parent.mkdir()
    writing.write_text('{"half": ')
    header = json.dumps({**record.to_dict(), "start_time": 1})
    (out / "writers" / f"{record.host}-{record.pid}.journal").write_text(f"{header}\n{writing.absolute()}\n")
    (out / "runner.lock").write_text(json.dumps({**record.to_dict(), "start_time": 1, "started_at": 0}))
    holder = _flock_holder(out / "runner.lock")

    def action() -> None:
        try:
            with registered_writer(out), RunnerLock(out):
                pass
        finally:
            holder.communicate(timeout=10)

    return action


def _put_of_run_in_training(folder: Path) -> Action:
    """AdapterStore.put of a run folder that another process trains right now (it holds run.lock), which holds an
    adapter and head already: an earlier attempt's, or its own half-written at its end."""
    run = folder / "runs" / "rte" / "st-a" / "seed-1"
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("rte", af.AdapterConfig.pfeiffer(reduction_factor=4))
    model.add_head("rte", af.ClassificationHead(num_labels=2))
    model.save_adapter("rte", run / "adapter")
    model.save_head("rte", run / "head")
    (run / "config.json").write_text(json.dumps({"encoder": "enc", "task": "rte", "setup": "st-a", "seed": 1}))
    holder = _flock_holder(run / "run.lock")

    def action() -> None:
        try:
            AdapterStore(folder / "store").put(run)
        finally:
            holder.communicate(timeout=10)

    return action


def _save_beside_a_writer_in_another_container(folder: Path) -> Action:
    """save_pretrained into a temporary folder beside which a writer in another container on this machine (same host
    name and boot id, its own pid namespace, a pid this process sees as ended) is filling its temp folder of the
    same setup. The action returns what became of that folder."""
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    stamp = {**atomic._writer(), "pid_namespace": "pid:[1]", "pid": _dead_pid()}

    def action() -> str:
        with tempfile.TemporaryDirectory() as root:
            target, theirs = Path(root) / "setup", Path(root) / ".setup.abcdefgh.tmp"
            theirs.mkdir()
            (theirs / atomic.WRITING_MARKER).write_text(json.dumps(stamp))
            (theirs / "setup.json").write_text("{}")
            model.save_pretrained(target)
            kept = sorted(os.listdir(theirs)) if theirs.is_dir() else "removed"
            return f"the other writer's folder: {kept}; the setup saved: {(target / SETUP_FILE).is_file()}"

    return action


def _saves_of_one_adapter_at_once(folder: Path) -> Action:
    """Two save_adapter of adapter 'a' (reduction factors 4 and 8) into one folder at once, into a temporary folder
    where 'a' was saved before: the second save (a thread) runs in the moment the first renames its files into place.
    The action returns which adapter the folder then loads as."""
    models = [af.wrap(tiny_encoder("bert")) for _ in range(2)]
    for model, factor in zip(models, (4, 8), strict=True):
        model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=factor))

    def action() -> str:
        with tempfile.TemporaryDirectory() as root:
            saved = models[0].save_adapter("a", Path(root) / "a")
            rename, first, second = os.replace, threading.current_thread(), []

            def renaming(source: str | os.PathLike, target: str | os.PathLike) -> None:
                rename(source, target)
                if threading.current_thread() is first and not second:  # after its first file is in place
                    second.append(threading.Thread(target=models[1].save_adapter, args=("a", saved)))
                    second[0].start()
                    second[0].join(1.0)  # as long as it takes, unless it waits for the first to finish

            with mock.patch.object(atomic.os, "replace", renaming):
                models[0].save_adapter("a", saved)
            second[0].join()
            loaded = af.wrap(tiny_encoder("bert"))
            loaded.load_adapter(saved)
            return f"the folder loads whole: reduction factor {loaded.adapter_configs['a'].reduction_factor}"

    return action


def _run_lock_linked_to_a_users_file(folder: Path) -> Action:
    """train() into a run folder whose run.lock is a symbolic link to a file of the user's (a folder copied with
    links, or one made by hand)."""
    notes = folder / "notes.txt"
    notes.write_text("the user's notes\n")
    run = folder / "runs" / "rte" / "st-a" / "seed-1"
    run.mkdir(parents=True)
    (run / "run.lock").symlink_to(notes)
    return lambda: af.training.train("rte", "st-a", seed=1, output_dir=folder / "runs")


def _load_while_the_entry_is_stored_again(folder: Path) -> Action:
    """AdapterStore.load_into(head=True) of an entry (adapter of reduction factor 4, head of 2 labels) that another
    process stores again with overwrite=True (reduction factor 8, 3 labels) just after the load read its adapter.
    Into a temporary store; the action returns what the model loaded."""
    models = [af.wrap(tiny_encoder("bert")) for _ in range(2)]
    for model, factor, labels in zip(models, (4, 8), (2, 3), strict=True):
        model.add_adapter("rte", af.AdapterConfig.pfeiffer(reduction_factor=factor))
        model.add_head("rte", af.ClassificationHead(num_labels=labels))

    def action() -> str:
        with tempfile.TemporaryDirectory() as root:
            store = AdapterStore(root)
            store.put_model(models[0], "rte", "rte", "enc", "rte", "st-a", 1)
            read, stored = formats.piece_from_folder, []

            def reading(directory: Path, kind: str, *args: object) -> object:
                piece = read(directory, kind, *args)
                if kind == "adapter" and not stored:  # the other process stores the entry again now
                    stored.append(store.put_model(models[1], "rte", "rte", "enc", "rte", "st-a", 1, overwrite=True))
                return piece

            loaded = af.wrap(tiny_encoder("bert"))
            with mock.patch.object(formats, "piece_from_folder", reading):
                store.load_into(loaded, "rte", "st-a", 1, encoder="enc", head=True)
            factor = loaded.adapter_configs["rte"].reduction_factor
            labels = loaded.export_piece("head", "rte").config.num_labels
            return f"loaded adapter of reduction factor {factor:g} and head of {labels} labels"

    return action


def _save_where_a_killed_check_left_its_probe(folder: Path) -> Action:
    """save_pretrained into an empty folder (in a temporary folder) where a save killed in its folder check left
    the empty probe folder it creates there and removes at once. The action returns what the folder then holds."""
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))

    def action() -> str:
        with tempfile.TemporaryDirectory() as root:
            target = Path(root) / "setup"
            (target / ".af-probe.k2j_x9q0.tmp").mkdir(parents=True)
            model.save_pretrained(target)
            return f"saved; the folder holds {sorted(os.listdir(target))}"

    return action


def _run_lock_that_is_a_fifo(folder: Path) -> Action:
    """train() into a run folder whose run.lock is a FIFO (named pipe)."""
    run = folder / "runs" / "rte" / "st-a" / "seed-1"
    run.mkdir(parents=True)
    os.mkfifo(run / "run.lock")
    return lambda: af.training.train("rte", "st-a", seed=1, output_dir=folder / "runs")


def _reports_written_at_once(folder: Path) -> Action:
    """`adapterfusion report` of an experiment (rte done, cb queued) while a second report is written (the runner's,
    once cb is done too) in the moment the first has written its CSVs. Into a temporary output dir; the action
    returns which report each file of report/ is."""

    def action() -> str:
        with tempfile.TemporaryDirectory() as root:
            spec = load_spec(experiment_dict(Path(root)))
            out = Path(spec.output_dir)
            with ResultsStore(out) as store:
                store.bind(spec, plan_jobs(spec))
                store.mark_running("head/rte/seed-42", "rte")
                store.mark_done("head/rte/seed-42", {"metric_for_best": "accuracy", "best": {"accuracy": 0.6}})
            write, second = report_files.atomic_write_json, []

            def writing(path: Path, data: object) -> None:
                if not second:  # the first report is about to write tables.json
                    with ResultsStore(out) as store:
                        store.mark_running("head/cb/seed-42", "cb")
                        store.mark_done("head/cb/seed-42", {"metric_for_best": "accuracy", "best": {"accuracy": 0.9}})
                    second.append(
                        threading.Thread(target=report_files.write_report, args=(out,), kwargs={"figures": False})
                    )
                    second[0].start()
                    second[0].join(1.0)  # as long as it takes, unless it waits for the first to finish
                write(path, data)

            with mock.patch.object(report_files, "atomic_write_json", writing):
                report_files.write_report(out, figures=False)
            second[0].join()
            report = out / "report"
            cb = next(line for line in (report / "table1.csv").read_text().splitlines() if line.startswith("cb,"))
            done = json.loads((report / "tables.json").read_text())["job_counts"].get("done")
            made = next(line for line in (report / "tables.md").read_text().splitlines() if line.startswith("Made"))
            return f"table1.csv: {cb.split(',')[-1]}; tables.json: {done} done; tables.md: {made.split(' in ')[0]}"

    return action


_KILLED_WHILE_REPLACING = """
import os, sys
from pathlib import Path
from unittest import mock
from adapterfusion.io import atomic
final, mark = Path(sys.argv[1]), atomic._mark
def marking(folder, *args, **kwargs):
    mark(folder, *args, **kwargs)
    if not final.exists():  # the entry stored before is aside, the new one not yet in place
        os._exit(9)
with mock.patch.object(atomic, "_mark", marking):
    atomic.replace_folder(final, lambda tmp: (tmp / "entry.json").write_text("{}"))
"""


def _put_after_a_kill_while_replacing(folder: Path) -> Action:
    """AdapterStore.put_model (no overwrite) of an entry stored before, after a process replacing that entry was
    killed in the moment between moving it aside and renaming its new one into place. Into a temporary store; the
    action returns what the put did and what the entry then holds."""
    model = af.wrap(tiny_encoder("bert"))
    for name in ("first", "second"):
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))

    def action() -> str:
        with tempfile.TemporaryDirectory() as root:
            store = AdapterStore(root)
            entry = store.put_model(model, "first", None, "enc", "rte", "st-a", 1)
            subprocess.run([sys.executable, "-c", _KILLED_WHILE_REPLACING, str(entry)], timeout=120, check=False)
            try:
                store.put_model(model, "second", None, "enc", "rte", "st-a", 1)
                put = "stored"
            except TrainingError as error:
                put = f"refused ({str(error)[:40]}...)"
            config = json.loads((entry / "adapter" / "adapter_config.json").read_text())
            return f"put without overwrite: {put}; the entry holds adapter {config.get('name')!r}"

    return action


def _overwriting_puts_at_once(folder: Path) -> Action:
    """Two AdapterStore.put_model(overwrite=True) of one entry at once, into a temporary store: the second renames
    its entry into place in the moment the first has moved the old one aside. The action returns what the entry
    holds and what else the store's folder holds."""
    model = af.wrap(tiny_encoder("bert"))
    for name in ("first", "second"):
        model.add_adapter(name, af.AdapterConfig.pfeiffer(reduction_factor=4))

    def action() -> str:
        with tempfile.TemporaryDirectory() as root:
            store = AdapterStore(root)
            entry = store.put_model(model, "first", None, "enc", "rte", "st-a", 1)
            mark = atomic._mark

            def marking(path: Path, *args: object, **kwargs: object) -> None:  # after the old entry was moved aside
                mark(path, *args, **kwargs)
                if not entry.exists() and not marking.done:  # type: ignore[attr-defined]
                    marking.done = True  # type: ignore[attr-defined]
                    store.put_model(model, "second", None, "enc", "rte", "st-a", 1, overwrite=True)

            marking.done = False  # type: ignore[attr-defined]
            with mock.patch.object(atomic, "_mark", marking):
                store.put_model(model, "first", None, "enc", "rte", "st-a", 1, overwrite=True)
            config = json.loads((entry / "adapter" / "adapter_config.json").read_text())
            return (
                f"the entry holds adapter {config.get('name')!r} whole; beside it: {sorted(os.listdir(entry.parent))}"
            )

    return action


CASES: tuple[BadInput, ...] = (
    B(
        "runner-stale-lock-taken-over-meanwhile",
        GROUP,
        "two `adapterfusion run` of one experiment started together on an output dir a killed runner's lock was "
        "left in, the first taking the stale lock over while the second judged it (the second removed the first's "
        "live lock and both ran)",
        OutputDirLockedError,
        ("another runner", "is using", "wait for it to finish"),
        _stale_lock_taken_over_meanwhile,
    ),
    B(
        "runner-lock-deleted-by-hand-meanwhile",
        GROUP,
        "a runner whose runner.lock was deleted by hand while it ran ends while a second runner runs (it removed the "
        "second's lock, so a third `adapterfusion run` started beside the second)",
        OutputDirLockedError,
        ("another runner", "is using", "wait for it to finish"),
        _runner_lock_deleted_by_hand_meanwhile,
    ),
    B(
        "runners-on-a-file-system-without-hard-links",
        GROUP,
        "two `adapterfusion run` on an output dir on a file system without hard links (FAT, exFAT: link() answers "
        "EPERM), the second while the first runs (both failed with a raw PermissionError from os.link)",
        OutputDirLockedError,
        ("another runner", "is using", "wait for it to finish"),
        _runners_on_a_file_system_without_hard_links,
    ),
    B(
        "runner-lock-of-live-runner-in-another-container",
        GROUP,
        "`adapterfusion run` on an output dir whose runner.lock a live runner in another container holds (same host "
        "name and boot id, a pid this container does not see: its lock was taken as stale, removed, and both ran)",
        OutputDirLockedError,
        ("another runner", "is using", "wait for it to finish"),
        _live_runner_in_another_container,
    ),
    B(
        "runner-beside-a-runner-with-our-pid",
        GROUP,
        "`adapterfusion run` on an output dir a live runner in another container writes, with this host name and "
        "this process's pid (it took that runner's journal for an earlier one of its own, removed the temp files "
        "that runner was writing, then took its lock as stale)",
        OutputDirLockedError,
        ("another runner", "is using", "wait for it to finish"),
        _runner_beside_a_runner_with_our_pid,
    ),
    B(
        "store-put-of-run-in-training",
        GROUP,
        "AdapterStore.put(<run folder another process trains right now>) (its adapter and head, an earlier "
        "attempt's or half of its own, were copied into the store as a finished run's)",
        TrainingError,
        ("being trained right now by another process", "Wait for that run to finish", "then put it"),
        _put_of_run_in_training,
    ),
    B(
        "save-beside-a-writer-in-another-container",
        GROUP,
        "save_pretrained(<folder>) while a writer in another container of this machine (same host name and boot "
        "id, a pid this container does not see) fills its temp folder of the same setup (not an error; its folder "
        "was taken for a killed writer's and removed under it)",
        None,
        ("the other writer's folder: ['.adapterfusion-writing', 'setup.json']", "the setup saved: True"),
        _save_beside_a_writer_in_another_container,
    ),
    B(
        "saves-of-one-adapter-at-once",
        GROUP,
        "two save_adapter('a', <folder>) at once onto an adapter saved there, the second as the first renamed its "
        "files into place (not an error; both returned, and the folder held one's weights beside the other's "
        "config: SerializationError on every load)",
        None,
        ("the folder loads whole: reduction factor 8",),
        _saves_of_one_adapter_at_once,
    ),
    B(
        "train-run-lock-linked-to-a-users-file",
        GROUP,
        "train() into a run folder whose run.lock is a symbolic link to a file of the user's (the lock was opened "
        "through it: the user's file emptied, our pid written into it, then the link removed)",
        TrainingError,
        ("run.lock is a symbolic link", "not ours to write through or remove", "move it away"),
        _run_lock_linked_to_a_users_file,
    ),
    B(
        "store-load-while-the-entry-is-stored-again",
        GROUP,
        "AdapterStore.load_into(head=True) while another process stores that entry again with overwrite=True (not "
        "an error; the adapter of one training was loaded with the head of the other, without a word)",
        None,
        ("loaded adapter of reduction factor 8 and head of 3 labels",),
        _load_while_the_entry_is_stored_again,
    ),
    B(
        "save-where-a-killed-check-left-its-probe",
        GROUP,
        "save_pretrained(<empty folder>) where a save killed in its folder check left its empty probe folder "
        "(.af-probe.<8 characters>.tmp) (not an error; was a ConfigError 'is not empty (it holds "
        "'.af-probe.k2j_x9q0.tmp')', for that save and every later one into the folder)",
        None,
        ("saved; the folder holds ['adapterfusion_setup.json', 'adapters']",),
        _save_where_a_killed_check_left_its_probe,
    ),
    B(
        "train-run-lock-is-a-fifo",
        GROUP,
        "train() into a run folder whose run.lock is a FIFO (named pipe) (it hung for good, opening it to see whether "
        "a run holds it)",
        TrainingError,
        ("run.lock is a FIFO (named pipe)", "where the run keeps its lock file", "move it away"),
        _run_lock_that_is_a_fifo,
    ),
    B(
        "reports-written-at-once",
        GROUP,
        "`adapterfusion report` while the runner writes its report of more finished jobs (not an error; report/ "
        "held the other report's CSVs beside its own tables.md and tables.json)",
        None,
        ("table1.csv: 90.00; tables.json: 2 done; tables.md: Made from 2 of 2 jobs done",),
        _reports_written_at_once,
    ),
    B(
        "store-put-after-a-kill-while-replacing",
        GROUP,
        "AdapterStore.put_model(overwrite=False) of an entry stored before, after a process replacing it was killed "
        "between moving it aside and renaming the new one in (not an error; the entry stored before, whole beside its "
        "path, was removed as a killed writer's temp folder and replaced without overwrite=True)",
        None,
        ("put without overwrite: refused (the store already holds", "the entry holds adapter 'first'"),
        _put_after_a_kill_while_replacing,
    ),
    B(
        "store-overwriting-puts-at-once",
        GROUP,
        "two AdapterStore.put_model(overwrite=True) of one entry at once, the second renaming its entry into place "
        "as the first had moved the old one aside (not an error; was a raw OSError 'Directory not empty', and a "
        "copy of the old entry left in the store for good)",
        None,
        ("holds adapter 'first' whole", "beside it: ['seed-1']"),
        _overwriting_puts_at_once,
    ),
)
