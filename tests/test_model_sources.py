"""Model names are checked before anything loads (`modeling_pacs/model_sources.py`): a typo is refused at once, before
any network access, with the aliases and the closest one; a Hub id that is neither cached nor reachable fails after one
request, saying the ways out (issue 32, point 1). Also: the command line refuses bad input before loading a model."""

from pathlib import Path

import huggingface_hub
import pytest
from huggingface_hub import constants

from modeling_pacs.cli import score_main
from modeling_pacs.errors import ModelUnavailableError, UnknownModelError
from modeling_pacs.loading import load_model
from modeling_pacs.model_sources import check_model_source, is_hub_id, spec_for_model_name
from modeling_pacs.registry import model_choices

REPO_ROOT = Path(__file__).resolve().parents[1]
CLOSED_PORT = "http://127.0.0.1:9"  # the discard port: nothing listens, so a connection is refused at once


@pytest.fixture
def no_network(monkeypatch):
    """Any look at the Hub or its cache fails the test."""

    def forbidden(*arguments, **keywords):
        raise AssertionError("the network (or the Hub cache) was consulted")

    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", forbidden)
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", forbidden)


@pytest.fixture
def online(monkeypatch, tmp_path):
    """Online mode with an empty cache and a Hub that refuses connections."""
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", CLOSED_PORT)  # what HF_ENDPOINT sets when huggingface_hub loads
    monkeypatch.setattr(
        constants, "HUGGINGFACE_CO_URL_TEMPLATE", CLOSED_PORT + "/{repo_id}/resolve/{revision}/{filename}"
    )
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))


@pytest.mark.parametrize(
    "name, closest",
    [("pacs_pp_b32", "pac_s_pp_vit_b32"), ("clip_s_vit_b23", "clip_s_vit_b32"), ("tinny", "tiny"), ("xyzzy", None)],
)
def test_unknown_model_name_is_refused_before_any_network_access(name, closest, no_network, monkeypatch):
    monkeypatch.setattr("modeling_pacs.loading._load_model", lambda *a: pytest.fail("a model was loaded"))
    with pytest.raises(UnknownModelError) as error:
        load_model(name)
    message = str(error.value)
    assert message.startswith(f"unknown model {name!r}")
    assert (f"(did you mean {closest!r}?)" in message) == (closest is not None)
    assert all(alias in message for alias in model_choices())  # every alias, the tiny ones included
    assert "Hub id (ORG/NAME)" in message


def test_names_that_lead_somewhere_pass_without_the_network(no_network, tmp_path):
    for name in ("tiny", "tiny:polos", str(tmp_path), "./no/such/model", "/no/such/model"):
        check_model_source(name)  # tiny aliases and paths: the loader checks (and explains) them, offline


@pytest.mark.parametrize(
    "name, expected",
    [
        ("openai/clip-vit-base-patch32", True),
        ("pacs-pp/pac-s-pp-clip-vit-b32", True),
        ("org/name.v2", True),
        ("pacs_pp_b32", False),
        ("a/b/c", False),
        ("org/", False),
        ("org/na me", False),
        ("org/..name", False),
    ],
)
def test_hub_ids_are_org_slash_name(name, expected):
    assert is_hub_id(name) == expected


def test_offline_hub_id_fails_after_one_attempt_with_the_ways_out(online, monkeypatch):
    """The connection is really refused (a closed local port); huggingface_hub would retry for ~100 s."""
    import httpx2

    attempts = []
    send = httpx2.Client.send

    def counted_send(self, request, *arguments, **keywords):
        attempts.append(str(request.url))
        return send(self, request, *arguments, **keywords)

    monkeypatch.setattr(httpx2.Client, "send", counted_send)
    with pytest.raises(ModelUnavailableError) as error:
        load_model("someone/not-a-real-pacs-model")
    # one request for the model (huggingface_hub may also make its own best-effort requests, e.g. /api/...)
    assert [url for url in attempts if "/someone/" in url] == [
        f"{CLOSED_PORT}/someone/not-a-real-pacs-model/resolve/main/config.json"
    ]
    message = str(error.value)
    assert message.startswith(
        "model someone/not-a-real-pacs-model is not in the local Hugging Face cache, and the Hub "
        f"({CLOSED_PORT}) could not be reached (ConnectError"
    )
    assert "set HF_HUB_OFFLINE=1 to use a copy in the local Hugging Face cache" in message
    assert "`pacs-pp convert --checkpoint FILE --variant ALIAS --output-dir DIR`" in message
    assert "docs/guides/converting-checkpoints.md" in message
    assert isinstance(error.value, OSError)  # callers that caught the loaders' OSError still do


def test_one_request_without_retries_and_a_short_timeout(online, monkeypatch):
    calls = []

    def unreachable(url, **keywords):
        calls.append((url, keywords))
        raise ConnectionError("network unreachable")

    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", unreachable)
    with pytest.raises(ModelUnavailableError, match=r"could not be reached \(ConnectionError: network unreachable\)"):
        load_model()  # the default model: not published, and the Hub unreachable
    [(url, keywords)] = calls
    assert url.endswith("/pacs-pp/pac-s-pp-clip-vit-b32/resolve/main/config.json")
    assert keywords["retry_on_errors"] is False and keywords["timeout"] <= 10


def test_default_model_offline_names_its_conversion(monkeypatch, tmp_path):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(ModelUnavailableError) as error:
        load_model()
    message = str(error.value)
    assert message.startswith(
        "model 'pac_s_pp_vit_b32' (pacs-pp/pac-s-pp-clip-vit-b32) is not in the local Hugging Face cache, and "
        "HF_HUB_OFFLINE=1 forbids downloading it"
    )
    assert "`pacs-pp convert --checkpoint FILE --variant pac_s_pp_vit_b32 --output-dir DIR`" in message
    assert "'tiny'" in message and "scripts/" not in message


def test_a_cached_hub_id_passes_without_a_request(online, monkeypatch):
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda repo_id, filename: "/cache/config.json")
    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", lambda *a, **k: pytest.fail("the Hub was asked"))
    check_model_source("someone/cached-model")


def test_a_missing_repository_is_named(online, monkeypatch):
    import httpx2
    from huggingface_hub.errors import RepositoryNotFoundError

    def missing(url, **keywords):
        raise RepositoryNotFoundError("404", response=httpx2.Response(404, request=httpx2.Request("HEAD", url)))

    monkeypatch.setattr(huggingface_hub, "get_hf_file_metadata", missing)
    with pytest.raises(ModelUnavailableError, match=r"is not on the Hugging Face Hub \(no such repository"):
        check_model_source("someone/pac_s_pp_vit_b32")


def test_spec_for_model_name_reads_no_model(tmp_path):
    assert spec_for_model_name("tiny:polos").name == "polos"
    assert spec_for_model_name("polos_vit_b32").name == "polos"
    assert spec_for_model_name("tiny").name == "pac_s_pp"
    (tmp_path / "config.json").write_text('{"model_type": "pearl"}')
    assert spec_for_model_name(str(tmp_path)).name == "pearl"
    assert spec_for_model_name("someone/model") is None


# ---------------------------------------------------------------------------------------------------- command line
@pytest.fixture
def no_model_loading(monkeypatch):
    monkeypatch.setattr("modeling_pacs.loading._load_model", lambda *a: pytest.fail("a model was loaded"))


def test_cli_refuses_a_typo_with_the_closest_alias(no_network, no_model_loading):
    captions = str(REPO_ROOT / "examples" / "captions.json")
    with pytest.raises(SystemExit, match=r"pacs-score: error: unknown model 'pacs_pp_b32' \(did you mean"):
        score_main([captions, "--model", "pacs_pp_b32"])


def test_cli_refuses_a_reference_based_metric_without_references_before_loading(no_model_loading):
    captions = str(REPO_ROOT / "examples" / "captions.json")
    with pytest.raises(SystemExit) as error:
        score_main([captions, "--model", "tiny:polos"])
    assert str(error.value) == (
        "pacs-score: error: Polos scores a caption against references, and none of the 6 items has any: give "
        f"--references FILE (JSON {{image_path: [references]}}), or references in {captions}"
    )
