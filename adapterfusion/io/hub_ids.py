"""Which strings are Hub ids, without any network access: 'org/name', a canonical 'name' (bert-base-uncased),
'org/name/subfolder' (a folder inside the repo), each optionally with '@revision', a branch, tag or commit as git
names them (`hub_ref`); and, for a string meant as one that is none, what is wrong in words (`id_problem`): a
repo's web address copied from the browser (with the id to pass instead), the id of a file where its folder is
loaded, a revision git could not name, spaces or a trailing '/' around an id, and AdapterHub's pre-2023 names
('sentiment/sst-2@ukp'), which look like an id at a revision."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

# a web address of a repo: https://huggingface.co/org/name[/tree/<revision>/<folder>], hf.co/..., hf://org/name
_URL = re.compile(r"^(?:hf://|(?:https?://)?(?:www\.)?(?:huggingface\.co|hf\.co)/)(?P<path>[^?#]*)", re.IGNORECASE)
# the files a folder of pieces, a setup or a model holds: a Hub id ending in one names the file, not its folder
_FILE_SUFFIXES = (".json", ".safetensors", ".bin", ".pt", ".pth", ".md", ".txt", ".model", ".jinja")
_REF_FORBIDDEN = set("~^:?*[\\")  # besides spaces and control characters: git check-ref-format's rules
_PART = r"[A-Za-z0-9][A-Za-z0-9._-]*"
# 'org/name' greedily, so a folder inside a repo needs the org: 'name/sub' is the repo 'name/sub', not a subfolder
# AdapterHub's old names, which adapters 1.x resolves through AdapterHub's own index: '<task>/<subtask>@<org>' (its
# tasks as that index names them; a language adapter is '<language>/wiki@<org>') and '@<org>/<adapter>'
_ADAPTERHUB_TASKS = frozenset(
    "argument chunk comsense deprel dialect dp emotion ged lingaccept lm mlki mt ner nli pos qa rc semtag sentiment "
    "sts sum translation wordsense".split()
)
_ADAPTERHUB_NAME = re.compile(r"^(?P<task>[a-z_]+)/(?P<subtask>[A-Za-z0-9._-]+)@(?P<org>[A-Za-z0-9_-]+)$")
_ADAPTERHUB_FULL_ID = re.compile(r"^@[A-Za-z0-9_-]+/[A-Za-z0-9._-]+$")
_HUB_ID = re.compile(rf"^(?P<repo>{_PART}(?:/{_PART})?)(?P<subfolder>(?:/{_PART})*)(?:@(?P<revision>[^@\s/][^@\s]*))?$")


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
    if match is None or (match["revision"] is not None and _revision_problem(match["revision"]) is not None):
        return None
    try:
        validate_repo_id(match["repo"])  # the Hub's own rules: no '--' or '..', at most 96 characters, ...
    except HFValidationError:
        return None
    return HubRef(match["repo"], match["subfolder"].lstrip("/"), match["revision"])


def id_problem(value: str) -> str | None:
    """Why `value`, meant as a Hub id, is none, as words that follow it ('... is a web address, not a Hub id; pass
    the id it names, 'org/name''), for the mistakes a general 'not a Hub id' (or a failed download) leaves to
    guessing: a repo's web address copied from the browser, the id of a file in a repo where its folder is loaded,
    and a revision no branch, tag or commit can have (git's rules: no '..', no part starting with '.', no
    '~^:?*[\\'). None where `value` is none of them."""
    url = _URL.match(value.strip())
    if url is not None:
        return _url_problem(value.strip(), url["path"])
    old = _adapterhub_problem(value.strip())
    if old is not None:
        return old
    trimmed = value.strip().rstrip("/")
    if trimmed != value and hub_ref(trimmed) is not None:  # pasted with a newline, or a folder's trailing '/'
        extra = "spaces or a newline around it" if value.strip() != value else "a '/' at its end"
        return (
            f"is no existing folder, and as a Hub id it has {extra}, which no Hub id has; check the path, or pass "
            f"the Hub id {trimmed!r}"
        )
    ref = hub_ref(value)
    folder, _, last = ref.subfolder.rpartition("/") if ref is not None else ("", "", "")
    if ref is not None and last.lower().endswith(_FILE_SUFFIXES):
        holder = HubRef(ref.repo_id, folder, ref.revision)
        return f"names the file {last!r} in the repository, not a folder; pass the folder that holds it, '{holder}'"
    repo, at, revision = value.partition("@")
    problem = _revision_problem(revision) if at and revision and hub_ref(repo) is not None else None
    if problem is None:
        return None
    return (
        f"has the revision {revision!r} after '@', which {problem}, so it names no branch, tag or commit; write the "
        "revision as the Hub shows it (main, v1.0, refs/pr/1 or a commit hash)"
    )


def _adapterhub_problem(value: str) -> str | None:
    """What to say of AdapterHub's pre-2023 name `value` ('nli/rte@ukp' read as the repo 'nli/rte' at revision
    'ukp', which no cache or Hub has: a download failure said nothing of why), or None where it is none."""
    name = _ADAPTERHUB_NAME.match(value)
    if name is not None and _is_adapterhub_name(name["task"], name["subtask"], name["org"]):
        form, example = "'<task>/<subtask>@<org>'", "pf-" + name["subtask"].replace("-", "").lower()
    elif _ADAPTERHUB_FULL_ID.match(value):
        form, example = "'@<org>/<adapter>'", "pf-rte"
    else:
        return None
    return (
        f"is AdapterHub's old name of an adapter, of the form {form}, which adapters 1.x looks up in AdapterHub's own "
        "index; it is no Hub id, and this library does not read that index. AdapterHub's adapters now live on the "
        "Hugging Face Hub as 'AdapterHub/<model>-pf-<task>': pass the one of your model and task (such as "
        f"'AdapterHub/bert-base-uncased-{example}'; huggingface.co/AdapterHub lists them), or a local folder that "
        "holds the adapter"
    )


def _is_adapterhub_name(task: str, subtask: str, org: str) -> bool:
    """Whether '<task>/<subtask>@<org>' is one of AdapterHub's tasks (or a language's wiki adapter) at an org, not a
    repo at a branch or commit that git would name ('main', a hash)."""
    branch = org in ("main", "master") or re.fullmatch("[0-9a-f]{7,40}", org) is not None
    return not branch and (task in _ADAPTERHUB_TASKS or (len(task) <= 3 and subtask == "wiki"))


def _url_problem(value: str, path: str) -> str:
    parts = [unquote(part) for part in path.split("/") if part]
    if value.lower().startswith("hf://") and parts[:1] == ["models"]:
        parts = parts[1:]
    if parts[:1] in (["datasets"], ["spaces"]):
        return (
            f"is the web address of a {parts[0][:-1]} repository, not a Hub id; models and their adapters are read "
            "from model repositories: pass the id of one, 'org/name'"
        )
    repo, rest, revision = parts[:2], parts[2:], None
    if len(rest) >= 2 and rest[0] in ("tree", "blob", "resolve"):  # a folder, or a file (its folder is meant)
        revision, rest = rest[1], rest[2:] if rest[0] == "tree" else rest[2:-1]
    suggestion = "/".join(repo + rest) + (f"@{revision}" if revision and revision != "main" else "")
    if hub_ref(suggestion) is None:
        return "is a web address, not a Hub id; pass the Hub id of the repository, 'org/name'"
    return f"is a web address, not a Hub id; pass the id it names, {suggestion!r}"


def _revision_problem(revision: str) -> str | None:
    """What makes `revision` no name a branch, tag or commit can have (git check-ref-format), or None. '..' was
    passed on, and names a folder of the cache's own (refs/.., the repo's) when huggingface_hub resolves it there."""
    odd = sorted({c for c in revision if c in _REF_FORBIDDEN or c.isspace() or ord(c) < 32 or ord(c) == 127})
    if odd:
        return f"holds {', '.join(repr(c) for c in odd)}"
    parts = revision.split("/")
    found = [
        (".." in revision, "holds '..'"),
        ("@{" in revision, "holds '@{'"),
        (any(not part for part in parts), "has an empty part between '/'"),
        (any(part.startswith(".") for part in parts), "has a part that starts with '.'"),
        (revision.endswith((".", ".lock")), "ends in '.' or '.lock'"),
    ]
    return next((words for wrong, words in found if wrong), None)
