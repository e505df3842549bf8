"""The Hugging Face Hub as a place for saved folders: which strings name one (a local folder wins; io/hub_ids.py
says which strings are Hub ids, and what is wrong with one that is meant as an id and is none), downloading part of
a repo, uploading a folder. Every huggingface_hub failure becomes a HubError that names the repo and the fix; a bad
id is an error raised before any network access. `reach` is the one check that a Hub id can be loaded at all: from
the local cache, or after one quick look-up, so that an id that is not cached fails at once offline and in seconds
online, instead of after transformers' minute of retries per load. The cache and offline mode are the ones the
environment names now (HF_HUB_CACHE, else HF_HOME; HF_HUB_OFFLINE), which huggingface_hub reads once, at import.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import huggingface_hub
from huggingface_hub.errors import (
    HFValidationError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from adapterfusion._version import __version__
from adapterfusion.errors import ConfigError, HubError, SerializationError
from adapterfusion.io.hub_ids import HubRef, hub_ref, id_problem
from adapterfusion.io.paths import describe, user_path

REPO_TYPE = "model"
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
PROBE_SECONDS = 5.0  # one look-up, no retries: a Hub that does not answer in this time is unreachable
# What a failed call can raise: huggingface_hub's errors are OSErrors (HTTP, offline, missing cache entry), except a
# malformed id (HFValidationError) and a transport error that escapes its retries (its httpx's HTTPError).
_TRANSPORT_ERRORS: tuple[type[BaseException], ...] = tuple(
    error
    for error in (OSError, HFValidationError, getattr(getattr(huggingface_hub.utils, "httpx", None), "HTTPError", None))
    if isinstance(error, type)
)


def offline() -> bool:
    """Whether offline mode is on: HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE, as huggingface_hub read it at import or
    as the environment says now."""
    return bool(huggingface_hub.constants.HF_HUB_OFFLINE) or any(
        os.environ.get(name, "").strip().upper() in {"1", "ON", "YES", "TRUE"} for name in OFFLINE_VARIABLES
    )


_CACHE_VARIABLES = (("HF_HUB_CACHE", ""), ("HUGGINGFACE_HUB_CACHE", ""), ("HF_HOME", "hub"))


def _cache_setting() -> tuple[str, str | None]:
    """(the cache folder, the variable that names it; None for huggingface_hub's own default)."""
    for name, below in _CACHE_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value:
            folder = os.path.expandvars(os.path.expanduser(value))
            return (os.path.join(folder, below) if below else folder), name
    return str(huggingface_hub.constants.HF_HUB_CACHE), None


def cache_dir() -> str:
    """The local Hugging Face cache that Hub downloads go to and are read from, as the environment says now
    (HF_HUB_CACHE, else HF_HOME/hub, with '~' and $VARS expanded as huggingface_hub does), not as huggingface_hub
    and transformers read it at import: a notebook that sets it after importing them checked one cache and loaded
    from another."""
    return _cache_setting()[0]


def usable_cache() -> str:
    """cache_dir(), refused where no folder can be there: it, or a folder on its path, is a file (HF_HUB_CACHE set
    to a file's path), which offline was said as the id not being cached and online as a failed download."""
    folder, variable = _cache_setting()
    path = Path(folder)
    for place in (path, *path.parents):
        found = describe(place)
        if found == "a folder":
            break
        if found != "nothing":
            setting = f"{variable}={os.environ[variable]!r}" if variable else "huggingface_hub's default"
            where = "it" if place == path else f"{str(place)!r} on its path"
            raise HubError(
                f"the local Hugging Face cache {folder} ({setting}) cannot be a folder: {where} is {found}; point "
                f"{variable or 'HF_HUB_CACHE'} at a folder (or unset it for the default ~/.cache/huggingface/hub)"
            )
    return folder


def cached_folder(ref: HubRef, filename: str) -> Path | None:
    """The folder of `ref` in the local cache if its `filename` is there, else None; no network access. A cache
    entry that cannot be read (its snapshots/ a file) is a HubError naming it, not huggingface_hub's OSError."""
    cache = usable_cache()
    try:
        found = huggingface_hub.try_to_load_from_cache(
            ref.repo_id,
            "/".join(p for p in (ref.subfolder, filename) if p),
            cache_dir=cache,
            revision=ref.revision,
            repo_type=REPO_TYPE,
        )
    except OSError as error:
        raise _damaged_cache(ref, error) from None
    return Path(found).parent if isinstance(found, str) else None


def _cache_entries(ref: HubRef) -> list[str]:
    """The repo ids of the local cache's model entries that are `ref`'s repo spelled in other letter case: the Hub
    takes 'Org/Name' for 'org/name', the cache's folders (models--org--name) do not, so a copy made under one
    spelling was not found offline under the other. [] where its own spelling is cached, or the cache unreadable."""
    wanted = f"models--{ref.repo_id.replace('/', '--')}"
    with contextlib.suppress(OSError, HubError):  # no cache, or none usable: the caller's look-up says so
        names = [entry.name for entry in Path(usable_cache()).iterdir()]
        if wanted not in names:
            return sorted(
                name.removeprefix("models--").replace("--", "/")  # a repo id holds no '--': the Hub's own rule
                for name in names
                if name.lower() == wanted.lower()
            )
    return []


def cached_spelling(ref: HubRef) -> HubRef:
    """`ref`, offline, as the local cache spells its repo where it holds it only in other letter case, and under
    exactly one spelling (the Hub's ids ignore case, the cache's folders do not); else `ref` as it is."""
    if not offline():
        return ref
    found = _cache_entries(ref)
    return HubRef(found[0], ref.subfolder, ref.revision) if len(found) == 1 else ref


def _other_spellings(ref: HubRef | str) -> str:
    """Words for an offline 'not cached' error: the spellings the cache holds `ref`'s repo under, if any."""
    found = _cache_entries(ref) if isinstance(ref, HubRef) else []
    if not found:
        return ""
    return (
        f" (it holds it as {' and as '.join(repr(f) for f in found)}: the Hub's ids ignore case, the cache's folders "
        "do not; pass the id as the cache spells it)"
    )


def _damaged_cache(ref: HubRef | str, error: OSError) -> HubError:
    """The error for the local cache failing at the file system: an entry damaged (a file where huggingface_hub
    keeps a folder) or a cache this user may not write, which hub_errors would have called a network problem."""
    repo = ref.repo_id if isinstance(ref, HubRef) else str(ref).partition("@")[0]
    entry = Path(cache_dir(), f"models--{repo.replace('/', '--')}")
    return HubError(
        f"the local Hugging Face cache {cache_dir()} cannot be used for {ref} ({type(error).__name__}: "
        f"{error.strerror or error} on {error.filename or entry}); if it is damaged, delete {entry} and download "
        f"{repo} again with the network on; if it is not writable, point HF_HUB_CACHE at a folder you may write to"
    )


TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


def token_problem(token: str) -> str | None:
    """What keeps `token` (stripped, as huggingface_hub strips it) out of an HTTP header, or None: a character
    outside printable ASCII (a pasted 'é', a control character), which failed as a raw UnicodeEncodeError from the
    HTTP client at the first request, after the save a push makes."""
    odd = sorted({c for c in token.strip() if not (" " < c <= "~")})
    return f"holds {', '.join(repr(c) for c in odd[:3])}, which an HTTP header cannot carry" if odd else None


def check_token() -> None:
    """Refuse an access token from the environment (HF_TOKEN) that no request can carry, before any request is
    made, naming the variable instead of the HTTP client's encoding error."""
    for name in TOKEN_VARIABLES:
        problem = token_problem(os.environ.get(name) or "")
        if problem is not None:
            raise HubError(
                f"${name} {problem}; set it to the access token as the Hub shows it ('hf_...'), or unset it to use "
                "the saved login (`hf auth login`)"
            )


def reach(ref: HubRef, what: str, filename: str) -> Path | None:
    """Check once that `ref` can be loaded: its folder in the local cache if `filename` is there (None: not cached,
    but the Hub has it). Not cached and offline, or the Hub not answering within PROBE_SECONDS, is a HubError that
    names the id, the cache and the offline switch, raised at once instead of after retries."""
    cached = cached_folder(ref, filename)
    if cached is not None:
        return cached
    if offline():
        raise HubError(
            f"{what} {ref} is not in the local Hugging Face cache ({cache_dir()}){_other_spellings(ref)} and offline "
            "mode is on "
            f"({' or '.join(OFFLINE_VARIABLES)}); download it once with the network on (unset "
            f"{OFFLINE_VARIABLES[0]}), point HF_HUB_CACHE at a cache that holds it, or pass a local folder"
        )
    check_token()
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
    problem = id_problem(source) if isinstance(source, str) else None
    if problem is not None:
        raise ConfigError(f"{what} {source!r} {problem}")
    ref = hub_ref(source) if isinstance(source, str) else None
    if ref is None:
        raise SerializationError(
            f"{what} {str(source)!r} is not a directory (no such folder), nor a Hub id of the form 'org/name', "
            "'name' or 'org/name/subfolder'; check the path"
        )
    return cached_spelling(ref)


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
        if isinstance(error, OSError) and error.errno is not None and error.filename:
            raise _damaged_cache(ref, error) from None  # the local cache, not the network: its own fix
        reason = (str(error).strip().splitlines() or [""])[0]
        if offline() and isinstance(error, (LocalEntryNotFoundError, OfflineModeIsEnabled)):
            # its words name an argument ('pass local_files_only=False') the caller never passed
            fix = hint or (
                f"load it once with the network on (unset {OFFLINE_VARIABLES[0]}) so the local cache holds it, or pass "
                "a local folder"
            )
            raise HubError(
                f"{action} {ref} failed: what it needs is not in the local Hugging Face cache ({cache_dir()})"
                f"{_other_spellings(ref)}, and "
                f"offline mode is on ({' or '.join(OFFLINE_VARIABLES)}); {fix}"
            ) from None
        if hint is None:
            hint = (
                f"check the network and the id, or pass a local folder instead (with HF_HUB_OFFLINE=1 only what is "
                f"already in the local cache {cache_dir()} loads)"
            )
        raise HubError(f"{action} {ref} failed ({type(error).__name__}: {reason}); {hint}") from None


def download(ref: HubRef, patterns: list[str] | None = None) -> Path:
    """The files of `ref` that match `patterns` (relative to its folder; None: all of it) fetched into the local
    Hugging Face cache; returns the local copy of its folder. One piece costs one piece's bytes. With `patterns`,
    the copy may lack any of them, or not be there at all where none matched: the caller says which file it needed
    (a folder that holds other files only was said to be no folder of the repo)."""
    with hub_errors(ref, "downloading"):
        folder = _snapshot(ref, patterns)
    if patterns is None and not folder.is_dir():
        raise HubError(f"the Hub repository {ref.repo_id} has no folder {ref.subfolder!r}; check the id {ref}")
    return folder


def _snapshot(ref: HubRef, patterns: list[str] | None) -> Path:
    """snapshot_download of `ref`'s files matching `patterns` (None: its whole folder) into cache_dir(); the local
    copy of its folder, which is not there where the repository has no such folder."""
    if not offline():
        check_token()
    if patterns is not None:
        allow: list[str] | None = ["/".join(p for p in (ref.subfolder, pattern) if p) for pattern in patterns]
    else:
        allow = [f"{ref.subfolder}/*"] if ref.subfolder else None
    root = huggingface_hub.snapshot_download(
        ref.repo_id,
        repo_type=REPO_TYPE,
        revision=ref.revision,
        allow_patterns=allow,
        cache_dir=usable_cache(),  # the cache the messages name, also when HF_HUB_CACHE was set after import
        local_files_only=offline(),  # huggingface_hub reads HF_HUB_OFFLINE at import: one set since went online
        library_name="adapterfusion",
        library_version=__version__,
    )
    return Path(root, ref.subfolder)


_PUSH_HINT = (
    "check the network and the id, and push again online (HF_HUB_OFFLINE unset) and logged in (`hf auth login` or "
    "HF_TOKEN); save_pretrained(folder) keeps the setup on disk meanwhile"
)


def download_if_there(ref: HubRef, patterns: list[str], pushed: HubRef | None = None) -> Path | None:
    """download(ref, patterns), or None where the repository (or its folder) is not there yet: what a push (to
    `pushed`, default `ref`) reads of the folder it is about to write. Any other failure (the network, a revision)
    is a HubError as for download, naming where the push goes."""
    with hub_errors(pushed or ref, "reading before pushing to", _PUSH_HINT):
        try:
            folder = _snapshot(ref, patterns)
        except RepositoryNotFoundError:
            return None
        except RevisionNotFoundError as error:
            raise _no_branch(pushed or ref, error) from None
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
    stay). Offline mode is refused first: huggingface_hub reads it at import, so one switched on since went online."""
    if offline():
        raise HubError(
            f"pushing to {ref}: offline mode is on ({' or '.join(OFFLINE_VARIABLES)}), and a push needs the network; "
            f"{_PUSH_HINT}"
        )
    check_token()
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
