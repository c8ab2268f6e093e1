"""The metric registry and the scoring contract: every entry is complete and consistent, every tiny model loads and
scores as its capabilities say and writes the rows its output fields declare, undeclared options are refused by name,
and no metric is named in code outside its own places."""

import ast
import math
import re
from pathlib import Path

import pytest

from modeling_pacs.errors import UnsupportedOptionError
from modeling_pacs.metric_spec import check_score_options, door_options, resolve
from modeling_pacs.registry import (
    DEFAULT_MODEL,
    METRICS,
    MODEL_METRICS,
    PRETRAINED_MODELS,
    TINY_ALIASES,
    TINY_SPECS,
    closest_model_name,
    parse_tiny_alias,
    spec_for_metric,
    spec_for_model_type,
    spec_of,
    tiny_alias,
)
from modeling_pacs.results import item_rows, result_columns, score_labels

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGE = REPO_ROOT / "modeling_pacs"
IMAGES = [str(REPO_ROOT / "examples" / "images" / name) for name in ("red_circle.png", "blue_square.png")]
CAPTIONS = ["a red circle on a white background", "a blue square"]
REFERENCES = [["a red disc in the middle of a white image"], ["a dark blue square in the centre", "a blue tile"]]


@pytest.mark.parametrize("name", sorted(METRICS))
def test_every_entry_is_complete(name):
    spec = METRICS[name]
    assert spec.name == name and spec.display_name and spec.description and spec.metrics
    assert spec.citation.lstrip().startswith("@") and (REPO_ROOT / "docs" / spec.docs_page).is_file()
    assert spec.outputs and len({output.key for output in spec.outputs}) == len(spec.outputs)
    capabilities = spec.capabilities
    assert capabilities.reference_free or capabilities.reference_based
    if capabilities.needs_model:
        config_class = resolve(spec.config_class)
        assert config_class.model_type == name  # keyed by model_type, as transformers' Auto mappings
        assert resolve(spec.model_class).config_class is config_class
        assert callable(resolve(spec.loader))
        for converter in spec.converters:
            assert callable(converter.resolve("add_arguments")) and callable(converter.resolve("convert"))
            assert converter.example.startswith(f"pacs-pp {converter.command} ")
        assert spec.tiny is not None, "every model metric has a tiny model for tests and smoke runs"
    else:
        assert spec.scorer and spec.scorer_columns == tuple(output.key for output in spec.outputs)
        assert not capabilities.reference_free and capabilities.media == ()
        assert spec.loader is None and not spec.variants and spec.tiny is None


def test_the_metrics_without_a_model_are_pycocoevalcaps_scorers():
    pytest.importorskip("pycocoevalcap")
    for spec in METRICS.values():
        if not spec.capabilities.needs_model:
            scorer = resolve(spec.scorer)
            assert callable(getattr(scorer, "compute_score", None)), spec.name
    names = ("bleu", "meteor", "rouge_l", "cider", "spice")
    columns = [column for name in names for column in METRICS[name].scorer_columns]
    assert columns == ["Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "METEOR", "ROUGE_L", "CIDEr", "SPICE"]


def test_lookups():
    assert spec_for_model_type("pac_s_pp") is spec_for_model_type("clip") is spec_for_model_type("siglip2")
    assert spec_for_model_type("polos").capabilities.needs_references
    assert spec_for_model_type("bert") is None and spec_for_model_type(None) is None
    assert spec_for_model_type("bleu") is None  # metrics without a model are no model type
    assert spec_for_metric("clip_s") is METRICS["pac_s_pp"] and spec_for_metric("cider") is METRICS["cider"]
    assert DEFAULT_MODEL in PRETRAINED_MODELS
    assert closest_model_name("pacs_pp_b32") == "pac_s_pp_vit_b32"
    assert parse_tiny_alias("tiny-siglip2:clip_s") == ("siglip2", "clip_s") and tiny_alias("polos") == "tiny:polos"
    with pytest.raises(ValueError, match="tiny polos models have the backbone"):
        parse_tiny_alias("tiny-siglip:polos")
    with pytest.raises(ValueError, match="the variant after ':' must be one of"):
        parse_tiny_alias("tiny:nope")
    with pytest.raises(TypeError, match="is not a metric of the registry"):
        spec_of(object())


def test_options_a_metric_does_not_declare_are_refused_by_name():
    pearl, polos = METRICS["pearl"], METRICS["polos"]
    with pytest.raises(UnsupportedOptionError, match=r"Pearl does not support the score option\(s\) long_captions"):
        check_score_options(pearl, {"long_captions": "chunks"})
    assert check_score_options(polos, {"mode": "official"}) == {"mode": "official"}
    # a door's settings apply where the metric has them; an explicit choice is refused where it does not
    assert door_options(pearl, {"image_batch_size": 8, "progress": False}, {}) == {}
    chosen = door_options(polos, {"image_batch_size": 8}, {"mode": "official"})
    assert chosen == {"image_batch_size": 8, "mode": "official"}
    with pytest.raises(UnsupportedOptionError, match="Polos does not support the score option"):
        door_options(polos, {}, {"long_captions": "chunks"})


def expected_columns(spec, references) -> list[str]:
    return [output.key for output in spec.outputs if not (output.needs_references and references is None)]


@pytest.mark.parametrize("variant", sorted(TINY_SPECS))
def test_every_tiny_model_loads_scores_and_writes_its_declared_rows(variant, tmp_path, monkeypatch):
    """The registry walk: each entry's tiny model loads through `load_model`, scores two items with and without
    references as its capabilities say, and `result_columns` gives exactly the fields it declares."""
    if variant == "pearl":
        pytest.importorskip("sentencepiece")
    from modeling_pacs.loading import load_model

    spec = TINY_SPECS[variant]
    model = load_model(tiny_alias(variant))
    assert spec_of(model) is spec
    calls = []
    if spec.capabilities.reference_based:
        calls.append(REFERENCES)
    if spec.capabilities.reference_free:
        calls.append(None)
    else:  # a reference-based-only metric refuses a call without references, naming them
        with pytest.raises(ValueError, match="reference"):
            model.score(IMAGES, CAPTIONS)
    for references in calls:
        output = model.score(IMAGES, CAPTIONS, references=references)
        columns = result_columns(model, output)
        assert [column.key for column in columns] == expected_columns(spec, references)
        rows = item_rows(columns, by="key")
        assert len(rows) == len(CAPTIONS)
        for column in columns:
            field = column.field
            assert len(column.values) == len(CAPTIONS)
            for value in column.values:
                if field.kind == "count":
                    assert isinstance(value, int) and value >= 0
                    continue
                assert math.isfinite(value)
                if field.minimum is not None:
                    assert value >= field.minimum - 1e-6
                maximum = getattr(model.config, field.maximum_from) if field.maximum_from else field.maximum
                if maximum is not None:
                    assert value <= maximum + 1e-6
            if column.is_score:
                assert column.mean == pytest.approx(sum(column.values) / len(column.values), abs=1e-6)
        assert [column.label for column in columns if column.is_score] == [
            label for label in score_labels(model) if label in {column.label for column in columns}
        ]


# ---------------------------------------------------------------------------------------------------- naming rule
OWN_PLACES = {
    "polos": ("modeling_pacs/polos/", "modeling_pacs/testing/polos", "modeling_pacs/encoders/"),
    "pearl": ("modeling_pacs/pearl/", "modeling_pacs/testing/pearl", "modeling_pacs/encoders/"),
    "fleur": ("modeling_pacs/fleur/", "modeling_pacs/testing/fleur"),
    "deneb": ("modeling_pacs/deneb/", "modeling_pacs/testing/deneb"),
}
# Names of other things that contain a metric's name: the benchmark loaders' release layouts of DENEB's data files.
NOT_THE_METRIC = {"deneb": {"deneb_csv", "deneb_images"}}
# Outside its own places a metric may be named by the registry and the package's public exports only.
ALLOWED_NAMERS = {"modeling_pacs/registry.py", "modeling_pacs/__init__.py"}


def names_in_code(path: Path, word: str) -> list[tuple[int, str]]:
    """Identifiers, import paths, keys and short string constants naming `word` (not comments, docstrings or prose)."""
    pattern = re.compile(word, re.IGNORECASE)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body
        and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
    }  # fmt: skip
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            text = node.id
        elif isinstance(node, ast.Attribute):
            text = node.attr
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            text = node.name
        elif isinstance(node, ast.alias):
            text = f"{node.name} {node.asname or ''}"
        elif isinstance(node, ast.ImportFrom):
            text = node.module or ""
        elif isinstance(node, ast.arg):
            text = node.arg
        elif isinstance(node, ast.keyword):
            text = node.arg or ""
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            text = node.value if " " not in node.value.strip() else ""  # a key or a path, not a sentence
        else:
            continue
        if pattern.search(text):
            found.append((getattr(node, "lineno", 0), text))
    return found


@pytest.mark.parametrize("word", sorted(OWN_PLACES))
def test_a_metric_is_named_in_code_only_in_its_own_places_and_the_registry(word):
    """Files named for the metric (`cli/train_pearl.py`, `scripts/train_polos.py`) are its own; the remote code's
    files of the metric (`models/*polos*`) too."""
    offenders = {}
    for folder in ("modeling_pacs", "metric", "space", "scripts"):
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            relative = path.relative_to(REPO_ROOT).as_posix()
            if word in path.name or relative.startswith(OWN_PLACES[word]) or relative in ALLOWED_NAMERS:
                continue
            found = [hit for hit in names_in_code(path, word) if hit[1] not in NOT_THE_METRIC.get(word, ())]
            if found:
                offenders[relative] = found[:3]
    assert not offenders, f"{word} named outside its places: {offenders}"


def test_the_naming_rule_finds_a_name():
    assert names_in_code(PACKAGE / "registry.py", "polos")
    assert not names_in_code(PACKAGE / "results.py", "polos")


def test_the_tiny_aliases_cover_every_family():
    assert {parse_tiny_alias(alias)[1] for alias in TINY_ALIASES} == set(TINY_SPECS)
    assert {spec.name for spec in TINY_SPECS.values()} == set(MODEL_METRICS)
