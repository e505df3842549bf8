"""Bad-input cases at one boundary, devices, dtypes and environment settings: device arguments, half precision on CPU,
meta or offloaded models, ADAPTERFUSION_* variables."""

from __future__ import annotations

from catalogue import BadInput

B = BadInput
GROUP = "devices and dtypes"

CASES: tuple[BadInput, ...] = ()
