"""The Hugging Face Hub as a place for saved folders: which strings are Hub ids, downloading part of a repo, uploading
a folder. Every huggingface_hub failure becomes a HubError that names the repo and the fix.

A string names an existing local folder, or is a Hub id 'org/name', 'org/name/subfolder' (a folder inside the repo),
optionally with '@revision'; anything else is an error raised before any network access.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import huggingface_hub
from huggingface_hub.errors import HFValidationError, RepositoryNotFoundError, RevisionNotFoundError

from adapterfusion._version import __version__
from adapterfusion.errors import ConfigError, HubError, SerializationError

REPO_TYPE = "model"
_PART = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_HUB_ID = re.compile(rf"^(?P<repo>{_PART}/{_PART})(?P<subfolder>(?:/{_PART})*)(?:@(?P<revision>[^@\s]+))?$")
# What a failed call can raise: huggingface_hub's errors are OSErrors (HTTP, offline, missing cache entry), except a
# malformed id (HFValidationError) and a transport error that escapes its retries (its httpx's HTTPError).
_TRANSPORT_ERRORS: tuple[type[BaseException], ...] = tuple(
    error
    for error in (OSError, HFValidationError, getattr(getattr(huggingface_hub.utils, "httpx", None), "HTTPError", None))
    if isinstance(error, type)
)


@dataclass(frozen=True)
class HubRef:
    """A folder in a Hub model repo: the repo, the folder inside it ('' for its root) and an optional revision."""

    repo_id: str
    subfolder: str = ""
    revision: str | None = None

    def __str__(self) -> str:
        return (
            self.repo_id
            + (f"/{self.subfolder}" if self.subfolder else "")
            + (f"@{self.revision}" if self.revision else "")
        )

    def child(self, path: str) -> HubRef:
        return HubRef(self.repo_id, "/".join(p for p in (self.subfolder, path) if p), self.revision)


def hub_ref(value: str) -> HubRef | None:
    """`value` as a HubRef if it is shaped like a Hub id, else None; no network access."""
    match = _HUB_ID.match(value)
    if match is None:
        return None
    return HubRef(match["repo"], match["subfolder"].lstrip("/"), match["revision"])


def locate(source: str | os.PathLike, what: str) -> Path | HubRef:
    """An existing local folder as a Path, else a str shaped like a Hub id as a HubRef; anything else (a path that
    does not exist, a file) is a SerializationError naming `what` and both accepted forms."""
    if not isinstance(source, (str, os.PathLike)):
        raise ConfigError(f"{what} must be a folder or a Hub id 'org/name', got {type(source).__name__}")
    path = Path(source)
    if path.is_dir():
        return path
    if path.exists():
        raise SerializationError(f"{what} {str(source)!r} is a file; pass the folder that holds it")
    ref = hub_ref(source) if isinstance(source, str) else None
    if ref is None:
        raise SerializationError(
            f"{what} {str(source)!r} is not a directory (no such folder), nor a Hub id of the form 'org/name' or "
            "'org/name/subfolder'; check the path"
        )
    return ref


@contextlib.contextmanager
def hub_errors(ref: HubRef | str, action: str) -> Iterator[None]:
    """Translate huggingface_hub's (and transformers' download) errors into a HubError that says what to do."""
    try:
        yield
    except HubError:
        raise
    except (RepositoryNotFoundError, RevisionNotFoundError) as error:
        raise HubError(
            f"{action} {ref}: the Hub has no such repository or revision that you may read ({type(error).__name__}), "
            "and no local folder has that name; check the id and revision, or log in (`hf auth login` or HF_TOKEN) "
            "for a private or gated repository"
        ) from None
    except _TRANSPORT_ERRORS as error:
        reason = (str(error).strip().splitlines() or [""])[0]
        raise HubError(
            f"{action} {ref} failed ({type(error).__name__}: {reason}); check the network and the id (with "
            "HF_HUB_OFFLINE=1 only files already in the local cache load), or pass a local folder instead"
        ) from None


def download(ref: HubRef, patterns: list[str] | None = None) -> Path:
    """The files of `ref` that match `patterns` (relative to its folder; None: all of it) fetched into the local
    Hugging Face cache; returns the local copy of its folder. One piece costs one piece's bytes."""
    if patterns is not None:
        allow: list[str] | None = ["/".join(p for p in (ref.subfolder, pattern) if p) for pattern in patterns]
    else:
        allow = [f"{ref.subfolder}/*"] if ref.subfolder else None
    with hub_errors(ref, "downloading"):
        root = huggingface_hub.snapshot_download(
            ref.repo_id,
            repo_type=REPO_TYPE,
            revision=ref.revision,
            allow_patterns=allow,
            library_name="adapterfusion",
            library_version=__version__,
        )
    folder = Path(root, ref.subfolder)
    if not folder.is_dir():
        raise HubError(f"the Hub repository {ref.repo_id} has no folder {ref.subfolder!r}; check the id {ref}")
    return folder


def upload(
    folder: Path, ref: HubRef, commit_message: str, private: bool | None = None, token: str | None = None
) -> None:
    """Create the repo if needed and upload `folder` into `ref`'s folder (files already there and not in `folder`
    stay)."""
    with hub_errors(ref, "pushing to"):
        huggingface_hub.create_repo(ref.repo_id, repo_type=REPO_TYPE, private=private, exist_ok=True, token=token)
        huggingface_hub.HfApi(token=token).upload_folder(
            repo_id=ref.repo_id,
            folder_path=folder,
            path_in_repo=ref.subfolder or None,
            repo_type=REPO_TYPE,
            revision=ref.revision,
            commit_message=commit_message,
        )
