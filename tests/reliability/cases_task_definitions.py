"""Bad-input cases at one boundary, tasks users define: TaskSpec fields, register_task, task description files,
label maps, instruction templates and verbalised labels for decoders."""

from __future__ import annotations

from catalogue import BadInput

B = BadInput
GROUP = "task definitions"

CASES: tuple[BadInput, ...] = ()
