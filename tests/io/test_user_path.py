"""'~name' of a user this machine does not have: pathlib's expanduser raises a RuntimeError ('Could not determine
home directory'), which reached users of every path setting; user_path leaves it as written, so the path is then
said to be missing by whatever reads it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from adapterfusion.encoders import resolve_encoder
from adapterfusion.errors import ConfigError
from adapterfusion.io.paths import user_path

NO_USER = "~no-such-user-af/x"


def test_user_path_expands_the_home_and_keeps_an_unknown_user() -> None:
    assert user_path("~/x") == Path(os.path.expanduser("~")) / "x"
    assert user_path(NO_USER) == Path(NO_USER)
    assert user_path(Path("a/b")) == Path("a/b")


def test_an_encoder_under_an_unknown_users_home_is_said_missing() -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_encoder(NO_USER)
