"""Executors: what a job leaves in its run folder's job.log, and what happens to a process pool's workers when
the runner that owns them dies."""
from __future__ import annotations

import logging

from adapterfusion.experiments.executors import JOB_LOG, JobPayload, capture_logs, execute_job


def test_each_log_line_reaches_job_log_once(tmp_path):
    run_dir = tmp_path / "run"
    outcome = execute_job(JobPayload(job_id="x/rte/seed-1", task="rte", setup="head", seed=1,
                                     output_dir=str(tmp_path), run_dir=str(run_dir), kind="nope"))
    assert not outcome["ok"] and "unknown kind 'nope'" in outcome["error"]
    with capture_logs(run_dir / JOB_LOG):
        for name in ("", "transformers", "transformers.trainer", "adapterfusion", "adapterfusion.training", "other"):
            logging.getLogger(name).warning("line from %r", name)
    lines = (run_dir / JOB_LOG).read_text().splitlines()
    assert sum("job x/rte/seed-1 failed" in line for line in lines) == 1, lines
    for name in ("", "transformers", "transformers.trainer", "adapterfusion", "adapterfusion.training", "other"):
        assert sum(f"line from {name!r}" in line for line in lines) == 1, (name, lines)
