"""Bad-input cases at one boundary, own task data (tasks/loading.py): rows and files a user's own task data may hold
wrong."""

from __future__ import annotations

from catalogue import BadInput

CASES: tuple[BadInput, ...] = ()
