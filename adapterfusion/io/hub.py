"""The Hugging Face Hub as a place for saved folders: which strings are Hub ids, downloading part of a repo, uploading
a folder. Every huggingface_hub failure becomes a HubError that names the repo and the fix.

A string names an existing local folder, or is a Hub id: 'org/name', a canonical 'name' (bert-base-uncased),
'org/name/subfolder' (a folder inside the repo), each optionally with '@revision'; anything else is an error raised
before any network access. `reach` is the one check that a Hub id can be loaded at all: from the local cache, or
after one quick look-up, so that an id that is not cached fails at once offline and in seconds online, instead of
after transformers' minute of retries per load.
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
from huggingface_hub.utils import validate_repo_id

from adapterfusion._version import __version__
from adapterfusion.errors import ConfigError, HubError, SerializationError
from adapterfusion.io.paths import describe, user_path

REPO_TYPE = "model"
_PART = r"[A-Za-z0-9][A-Za-z0-9._-]*"
# 'org/name' greedily, so a folder inside a repo needs the org: 'name/sub' is the repo 'name/sub', not a subfolder
_HUB_ID = re.compile(rf"^(?P<repo>{_PART}(?:/{_PART})?)(?P<subfolder>(?:/{_PART})*)(?:@(?P<revision>[^@\s/][^@\s]*))?$")
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
PROBE_SECONDS = 5.0  # one look-up, no retries: a Hub that does not answer in this time is unreachable
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
    """`value` as a HubRef if it is shaped like a Hub id ('org/name', or a canonical 'name' such as
    bert-base-uncased, with an optional '/subfolder' after 'org/name' and '@revision'), else None; no network
    access."""
    match = _HUB_ID.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        return None
    try:
        validate_repo_id(match["repo"])  # the Hub's own rules: no '--' or '..', at most 96 characters, ...
    except HFValidationError:
        return None
    return HubRef(match["repo"], match["subfolder"].lstrip("/"), match["revision"])


def offline() -> bool:
    """Whether offline mode is on: HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE, as huggingface_hub read it at import or
    as the environment says now."""
    return bool(huggingface_hub.constants.HF_HUB_OFFLINE) or any(
        os.environ.get(name, "").strip().upper() in {"1", "ON", "YES", "TRUE"} for name in OFFLINE_VARIABLES
    )


def cache_dir() -> str:
    """The local Hugging Face cache that Hub downloads go to (HF_HUB_CACHE)."""
    return str(os.environ.get("HF_HUB_CACHE") or huggingface_hub.constants.HF_HUB_CACHE)


def cached_folder(ref: HubRef, filename: str) -> Path | None:
    """The folder of `ref` in the local cache if its `filename` is there, else None; no network access."""
    found = huggingface_hub.try_to_load_from_cache(
        ref.repo_id,
        "/".join(p for p in (ref.subfolder, filename) if p),
        cache_dir=cache_dir(),
        revision=ref.revision,
        repo_type=REPO_TYPE,
    )
    return Path(found).parent if isinstance(found, str) else None


def reach(ref: HubRef, what: str, filename: str) -> Path | None:
    """Check once that `ref` can be loaded: its folder in the local cache if `filename` is there (None: not cached,
    but the Hub has it). Not cached and offline, or the Hub not answering within PROBE_SECONDS, is a HubError that
    names the id, the cache and the offline switch, raised at once instead of after retries."""
    cached = cached_folder(ref, filename)
    if cached is not None:
        return cached
    if offline():
        raise HubError(
            f"{what} {ref} is not in the local Hugging Face cache ({cache_dir()}) and offline mode is on "
            f"({' or '.join(OFFLINE_VARIABLES)}); download it once with the network on (unset "
            f"{OFFLINE_VARIABLES[0]}), point HF_HUB_CACHE at a cache that holds it, or pass a local folder"
        )
    with hub_errors(ref, f"looking up {what}"):
        huggingface_hub.model_info(ref.repo_id, revision=ref.revision, timeout=PROBE_SECONDS)
    return None


def locate(source: str | os.PathLike, what: str) -> Path | HubRef:
    """An existing local folder as a Path, else a str shaped like a Hub id as a HubRef; anything else (a path that
    does not exist, a file) is a SerializationError naming `what` and both accepted forms."""
    if not isinstance(source, (str, os.PathLike)):
        raise ConfigError(f"{what} must be a folder or a Hub id 'org/name', got {type(source).__name__}")
    if isinstance(source, str) and not source.strip():  # Path('') is '.', the working folder nobody named
        raise ConfigError(
            f"{what} is {source!r}, an empty name; pass a folder ('.' for the working folder) or a Hub id 'org/name'"
        )
    path = user_path(source)  # '~name' of no such user stays as written
    found = describe(path)  # io/paths.py: a FIFO, a device, a symlink loop or a dangling symlink is said as such
    if found == "a folder":
        return path
    if found == "a file":
        raise SerializationError(f"{what} {str(source)!r} is a file; pass the folder that holds it")
    if found != "nothing":
        raise SerializationError(f"{what} {str(source)!r} is {found}, not a folder; pass a folder or a Hub id")
    ref = hub_ref(source) if isinstance(source, str) else None
    if ref is None:
        raise SerializationError(
            f"{what} {str(source)!r} is not a directory (no such folder), nor a Hub id of the form 'org/name', "
            "'name' or 'org/name/subfolder'; check the path"
        )
    return ref


@contextlib.contextmanager
def hub_errors(ref: HubRef | str, action: str, hint: str | None = None) -> Iterator[None]:
    """Translate huggingface_hub's (and transformers' download) errors into a HubError that says what to do: `hint`
    for a failed transfer, by default a reader's (a local folder, the cache)."""
    try:
        yield
    except HubError:
        raise
    except (RepositoryNotFoundError, RevisionNotFoundError) as error:
        raise HubError(
            f"{action} {ref}: the Hub has no such repository or revision that you may read ({type(error).__name__}), "
            "and no local folder has that name; check the id, revision or path, or log in (`hf auth login` or "
            "HF_TOKEN) for a private or gated repository"
        ) from None
    except _TRANSPORT_ERRORS as error:
        reason = (str(error).strip().splitlines() or [""])[0]
        if hint is None:
            hint = (
                f"check the network and the id, or pass a local folder instead (with HF_HUB_OFFLINE=1 only what is "
                f"already in the local cache {cache_dir()} loads)"
            )
        raise HubError(f"{action} {ref} failed ({type(error).__name__}: {reason}); {hint}") from None


def download(ref: HubRef, patterns: list[str] | None = None) -> Path:
    """The files of `ref` that match `patterns` (relative to its folder; None: all of it) fetched into the local
    Hugging Face cache; returns the local copy of its folder. One piece costs one piece's bytes."""
    with hub_errors(ref, "downloading"):
        folder = _snapshot(ref, patterns)
    if not folder.is_dir():
        raise HubError(f"the Hub repository {ref.repo_id} has no folder {ref.subfolder!r}; check the id {ref}")
    return folder


def _snapshot(ref: HubRef, patterns: list[str] | None) -> Path:
    """snapshot_download of `ref`'s files matching `patterns` (None: its whole folder) into cache_dir(); the local
    copy of its folder, which is not there where the repository has no such folder."""
    if patterns is not None:
        allow: list[str] | None = ["/".join(p for p in (ref.subfolder, pattern) if p) for pattern in patterns]
    else:
        allow = [f"{ref.subfolder}/*"] if ref.subfolder else None
    root = huggingface_hub.snapshot_download(
        ref.repo_id,
        repo_type=REPO_TYPE,
        revision=ref.revision,
        allow_patterns=allow,
        cache_dir=cache_dir(),  # the cache the messages name, also when HF_HUB_CACHE was set after import
        library_name="adapterfusion",
        library_version=__version__,
    )
    return Path(root, ref.subfolder)


_PUSH_HINT = (
    "check the network and the id, and push again online (HF_HUB_OFFLINE unset) and logged in (`hf auth login` or "
    "HF_TOKEN); save_pretrained(folder) keeps the setup on disk meanwhile"
)


def download_if_there(ref: HubRef, patterns: list[str]) -> Path | None:
    """download(ref, patterns), or None where the repository (or its folder) is not there yet: what a push reads of
    the folder it is about to write. Any other failure (the network, a revision) is a HubError as for download."""
    with hub_errors(ref, "reading before pushing to", _PUSH_HINT):
        try:
            folder = _snapshot(ref, patterns)
        except RepositoryNotFoundError:
            return None
        except RevisionNotFoundError as error:
            raise _no_branch(ref, error) from None
    return folder if folder.is_dir() else None


def _no_branch(ref: HubRef, error: RevisionNotFoundError) -> Exception:
    """What to raise for a push to 'org/name@branch' of a branch the repository lacks: hub_errors said it as a
    repository or revision 'that you may read', which 'no local folder' names. `error` itself where no branch was
    named (hub_errors says it)."""
    if ref.revision is None:
        return error
    return HubError(
        f"pushing to {ref}: the repository {ref.repo_id} has no branch {ref.revision!r}, and a push does not create "
        f"one; create it first (huggingface_hub.create_branch({ref.repo_id!r}, branch={ref.revision!r})), or push "
        f"without '@{ref.revision}' to its main branch"
    )


def _check_private(ref: HubRef, token: str | None) -> None:
    """Refuse to push with private=True into a repository that exists and is public: create_repo applies `private`
    only to a repository it creates, so the files were published to everyone while the caller asked for privacy."""
    info = huggingface_hub.model_info(ref.repo_id, token=token)
    if getattr(info, "private", None) is False:
        raise ConfigError(
            f"push_to_hub(private=True): the repository {ref.repo_id} already exists and is public, and private= only "
            "applies to a repository the push creates, so the files would be published to everyone; nothing was "
            f"pushed. Make it private first (huggingface_hub.update_repo_settings({ref.repo_id!r}, private=True)), "
            "push to a new repository, or pass private=False to publish"
        )


def upload(
    folder: Path, ref: HubRef, commit_message: str, private: bool | None = None, token: str | None = None
) -> None:
    """Create the repo if needed and upload `folder` into `ref`'s folder (files already there and not in `folder`
    stay)."""
    with hub_errors(ref, "pushing to", _PUSH_HINT):
        huggingface_hub.create_repo(ref.repo_id, repo_type=REPO_TYPE, private=private, exist_ok=True, token=token)
        if private:
            _check_private(ref, token)
        try:
            huggingface_hub.HfApi(token=token).upload_folder(
                repo_id=ref.repo_id,
                folder_path=folder,
                path_in_repo=ref.subfolder or None,
                repo_type=REPO_TYPE,
                revision=ref.revision,
                commit_message=commit_message,
            )
        except RevisionNotFoundError as error:
            raise _no_branch(ref, error) from None
