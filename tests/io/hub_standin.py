"""A local stand-in for the Hugging Face Hub: the huggingface_hub functions adapterfusion calls (create_repo,
HfApi.upload_folder, snapshot_download) patched onto a temporary folder that behaves like the Hub — what
upload_folder writes is what snapshot_download returns, filtered by allow_patterns as huggingface_hub filters them
(fnmatch on the repo path), into one cached snapshot folder per repo; an unknown repo raises RepositoryNotFoundError
— so tests run adapterfusion's real code paths with no network."""

from __future__ import annotations

import shutil
from fnmatch import fnmatch
from pathlib import Path

import huggingface_hub
from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError
from huggingface_hub.utils import httpx


def http_error(error_type: type[HfHubHTTPError], status: int, url: str) -> HfHubHTTPError:
    """An error as huggingface_hub raises it for an HTTP status (it carries the response)."""
    return error_type(
        f"{status} Client Error for url {url}", response=httpx.Response(status, request=httpx.Request("GET", url))
    )


class LocalHub:
    def __init__(self, root: Path) -> None:
        self.repos, self.cache = root / "repos", root / "cache"
        self.downloads: list[tuple[str, list[str] | None]] = []  # (repo_id, allow_patterns) of each snapshot
        self.commits: list[tuple[str, str | None, str]] = []  # (repo_id, path_in_repo, commit_message)

    def install(self, monkeypatch) -> LocalHub:
        monkeypatch.setattr(huggingface_hub, "create_repo", self.create_repo)
        monkeypatch.setattr(huggingface_hub, "snapshot_download", self.snapshot_download)
        monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", lambda api, **kwargs: self.upload_folder(**kwargs))
        return self

    def files(self, repo_id: str) -> list[str]:
        repo = self.repos / repo_id
        return sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*") if p.is_file())

    def create_repo(self, repo_id: str, *, repo_type: str | None = None, exist_ok: bool = False, **_) -> str:
        assert repo_type in (None, "model")
        path = self.repos / repo_id
        if path.exists() and not exist_ok:
            raise http_error(HfHubHTTPError, 409, f"https://huggingface.co/api/repos/create/{repo_id}")
        path.mkdir(parents=True, exist_ok=True)
        return f"https://huggingface.co/{repo_id}"

    def upload_folder(
        self,
        *,
        repo_id: str,
        folder_path,
        path_in_repo: str | None = None,
        repo_type: str | None = None,
        revision: str | None = None,
        commit_message: str = "",
        **_,
    ) -> str:
        assert repo_type in (None, "model") and revision is None
        target = self._repo(repo_id) / (path_in_repo or "")
        for file in Path(folder_path).rglob("*"):
            if file.is_file():
                destination = target / file.relative_to(folder_path)
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(file, destination)
        self.commits.append((repo_id, path_in_repo, commit_message))
        return f"https://huggingface.co/{repo_id}/commit/0"

    def snapshot_download(
        self,
        repo_id: str,
        *,
        repo_type: str | None = None,
        revision: str | None = None,
        allow_patterns: list[str] | str | None = None,
        **_,
    ) -> str:
        assert repo_type in (None, "model") and revision is None
        repo = self._repo(repo_id)
        patterns = [allow_patterns] if isinstance(allow_patterns, str) else allow_patterns
        snapshot = self.cache / repo_id
        snapshot.mkdir(parents=True, exist_ok=True)
        for path in self.files(repo_id):
            if patterns is None or any(fnmatch(path, pattern) for pattern in patterns):
                (snapshot / path).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(repo / path, snapshot / path)
        self.downloads.append((repo_id, patterns))
        return str(snapshot)

    def _repo(self, repo_id: str) -> Path:
        path = self.repos / repo_id
        if not path.is_dir():
            raise http_error(RepositoryNotFoundError, 404, f"https://huggingface.co/api/models/{repo_id}")
        return path
