"""Long-CLIP as a backbone: `pacs-pp convert-longclip` on tiny random checkpoints in Long-CLIP's own layout, checked
against a NumPy computation of Long-CLIP's forward (`tests/references/longclip.py`) and, when `PACS_LONGCLIP_DIR`
names a checkout of github.com/beichenzbc/Long-CLIP, against Long-CLIP's own code; 248-token captions end to end
(tokenizer, fast CPU path, embedding cache, scores) and PAC-S++ training on the Long-CLIP backbone.

Tolerances: features (entries of size ~1) within 1e-5 of the float64 references, CLIP-S / RefCLIP-S scores within
1e-6 (fp32 against float64; Long-CLIP's own code runs in fp32, so the same bounds hold against it).
"""

import json
import os
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from PIL import Image
from transformers import AutoModel, TrainingArguments

from modeling_pacs import PACSModel
from modeling_pacs.cli.convert import converter_main
from modeling_pacs.hub import save_remote_code_model, validate_model_directory
from modeling_pacs.models.embedding_cache import EmbeddingCache
from modeling_pacs.pacs.convert import CheckpointError, CheckpointGeometry
from modeling_pacs.pacs.convert_longclip import (
    LONGCLIP_VARIANTS,
    convert_longclip_checkpoint,
    convert_longclip_state_dict,
    identify_variant,
    merge_positional_embeddings,
)
from modeling_pacs.pacs.model_card import render_model_card
from modeling_pacs.pacs.training import (
    RECIPES,
    PACSDataCollator,
    PACSEncoderForTraining,
    PACSTrainer,
    prepare_model_for_training,
    prepare_training_dataset,
    required_columns,
)
from modeling_pacs.tokenization import build_processor
from tests.references.longclip import (
    CLONE_COMMAND,
    CONTEXT_LENGTH,
    build_longclip_state_dict,
    longclip_code,
    longclip_code_model,
    longclip_positional_table,
    numpy_encode_image,
    numpy_encode_text,
    numpy_round_like_longclip_load,
    numpy_scores,
)
from tests.references.original_clip import original_preprocess, original_tokenize

main = converter_main("convert-longclip")
REPO_ROOT = Path(__file__).resolve().parents[2]
FEATURE_TOLERANCE = 1e-5
SCORE_TOLERANCE = 1e-6
PREFIX = "A photo depicts "
IMAGE_SIZE = 64
LONG_SENTENCE = "a small brown dog runs across the wet green grass of the park next to a red bicycle. "
CAPTIONS = [
    "a red square on a green field",
    LONG_SENTENCE * 5,  # 100 tokens with the prompt: past CLIP's 77, inside Long-CLIP's 248
    "two cats sleep on a sofa. " + LONG_SENTENCE * 8 + "a man in a blue coat holds an umbrella.",  # 174 tokens
    LONG_SENTENCE * 14,  # 271 tokens: truncated at 248 too
]
REFERENCES = [["a red box on grass"], [LONG_SENTENCE * 6, "a dog"], ["two cats on a sofa"], [LONG_SENTENCE * 2]]
longclip_checkout = pytest.mark.skipif(
    not os.environ.get("PACS_LONGCLIP_DIR"),
    reason=f"set PACS_LONGCLIP_DIR to a Long-CLIP checkout to compare with its own code: {CLONE_COMMAND}",
)


def make_images() -> list[Image.Image]:
    generator = np.random.default_rng(0)
    sizes = [(64, 64), (90, 70), (50, 80), (128, 96)]
    return [Image.fromarray(generator.integers(0, 256, (h, w, 3), dtype=np.uint8)) for w, h in sizes]


def longclip_ids(texts: list[str], context_length: int = CONTEXT_LENGTH) -> np.ndarray:
    """Long-CLIP's input: OpenAI's tokenizer truncated at `context_length` (end-of-text kept), zero padded to 248."""
    ids = np.zeros((len(texts), CONTEXT_LENGTH), dtype=np.int64)
    ids[:, :context_length] = original_tokenize([PREFIX + text for text in texts], context_length).numpy()
    return ids


def reference_outputs(state_dict: dict, context_length: int = CONTEXT_LENGTH):
    """NumPy features of `make_images()` / `CAPTIONS` / `REFERENCES` and their CLIP-S / RefCLIP-S scores (w = 2.5)."""
    pixels = np.stack([original_preprocess(image, IMAGE_SIZE).numpy() for image in make_images()])
    image_features = numpy_encode_image(state_dict, pixels)
    text_features = numpy_encode_text(state_dict, longclip_ids(CAPTIONS, context_length))
    reference_features = [numpy_encode_text(state_dict, longclip_ids(refs, context_length)) for refs in REFERENCES]
    scores, ref_scores = numpy_scores(image_features, text_features, reference_features, w=2.5)
    return image_features, text_features, scores, ref_scores


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny Long-CLIP checkpoint as the release stores it: a bare fp32 state dict with both positional tables."""
    state_dict = build_longclip_state_dict(seed=0)
    path = tmp_path_factory.mktemp("longclip") / "longclip-tiny.pt"
    torch.save(state_dict, path)
    return path, state_dict


@pytest.fixture(scope="module")
def converted_dirs(checkpoint, tmp_path_factory):
    """`official` precision through the command line, `fp32` through the library."""
    path, _ = checkpoint
    root = tmp_path_factory.mktemp("converted_longclip")
    assert main(["--checkpoint", str(path), "--output-dir", str(root / "official"), "--allow-other-geometry"]) == 0
    convert_longclip_checkpoint(
        path, root / "fp32", weight_precision="fp32", allow_other_geometry=True, log=lambda message: None
    )
    return {"official": root / "official", "fp32": root / "fp32"}


def load_converted(directory: Path) -> PACSModel:
    return AutoModel.from_pretrained(directory, trust_remote_code=True, dtype=torch.float32).eval()


def expected_weights(state_dict: dict, precision: str) -> dict:
    return numpy_round_like_longclip_load(state_dict) if precision == "official" else state_dict


# ----------------------------------------------------------------------------------------------------- layout
def test_merged_table_is_the_masked_sum(checkpoint):
    _, state_dict = checkpoint
    merged = merge_positional_embeddings(state_dict)
    assert "positional_embedding_res" not in merged and merged.keys() | {"positional_embedding_res"} == set(state_dict)
    table = longclip_positional_table({key: value.numpy() for key, value in state_dict.items()})
    # Each row is one table's value plus an exact zero: equal bit for bit.
    np.testing.assert_array_equal(merged["positional_embedding"].numpy(), table.astype(np.float32))


def test_converted_directory_reads_248_tokens(converted_dirs):
    model = load_converted(converted_dirs["official"])
    assert model.config.variant == "clip_s" and model.config.w == 2.5 and model.config.adapter_path is None
    assert model.config.max_text_length == CONTEXT_LENGTH
    assert model.config.backbone_config.text_config.max_position_embeddings == CONTEXT_LENGTH
    assert model.tokenizer.model_max_length == CONTEXT_LENGTH
    assert model.config.score_names == ("CLIP-S", "RefCLIP-S")
    tokens = model.tokenize(CAPTIONS)
    lengths = tokens["attention_mask"].sum(dim=1).tolist()
    assert lengths[0] < 77 < lengths[1] < lengths[2] < CONTEXT_LENGTH == lengths[3]
    # Our tokenizer gives OpenAI's / Long-CLIP's ids (truncation keeps the end-of-text token last).
    for row, length in enumerate(lengths):
        np.testing.assert_array_equal(tokens["input_ids"][row, :length].numpy(), longclip_ids(CAPTIONS)[row, :length])
    card = (converted_dirs["official"] / "README.md").read_text()
    assert "248" in card and "Long-CLIP" in card


SCORE_IN_FRESH_PROCESS = """
import json, sys, torch
from transformers import AutoModel
model = AutoModel.from_pretrained(sys.argv[1], trust_remote_code=True, dtype=torch.float32)
assert "modeling_pacs" not in sys.modules, "the installed package was imported"
captions = json.loads(sys.argv[3])
out = model.score([sys.argv[2]] * len(captions), captions)
print(json.dumps([type(model).__module__, model.config.max_text_length, out.scores.tolist()]))
"""


def test_directory_scores_long_captions_through_its_remote_code(converted_dirs, tmp_path):
    """A fresh process without `modeling_pacs`: `AutoModel` runs the directory's own code, offline, on 248 tokens."""
    import subprocess
    import sys

    image_path = tmp_path / "image.png"
    make_images()[1].save(image_path)
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH" and not key.startswith("HF_")}
    environment.update(HF_HOME=str(tmp_path / "hf_home"), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    directory = converted_dirs["official"]
    result = subprocess.run(
        [sys.executable, "-c", SCORE_IN_FRESH_PROCESS, str(directory), str(image_path), json.dumps(CAPTIONS)],
        capture_output=True, text=True, env=environment, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    module, max_text_length, scores = json.loads(result.stdout.strip().splitlines()[-1])
    assert module.startswith("transformers_modules.") and max_text_length == CONTEXT_LENGTH
    expected = load_converted(directory).score([str(image_path)] * len(CAPTIONS), CAPTIONS).scores
    np.testing.assert_allclose(scores, expected.numpy(), atol=SCORE_TOLERANCE, rtol=0)


# ----------------------------------------------------------------------------------------------------- parity
@pytest.mark.parametrize("fast_cpu_encoders", [True, False], ids=["fast_clip", "transformers"])
@pytest.mark.parametrize("precision", ["official", "fp32"])
def test_features_and_scores_match_numpy(converted_dirs, checkpoint, precision, fast_cpu_encoders):
    _, state_dict = checkpoint
    model = load_converted(converted_dirs[precision])
    model.fast_cpu_encoders = fast_cpu_encoders
    image_features, text_features, scores, ref_scores = reference_outputs(expected_weights(state_dict, precision))
    np.testing.assert_allclose(model.encode_images(make_images()).numpy(), image_features, atol=FEATURE_TOLERANCE)
    np.testing.assert_allclose(model.encode_texts(CAPTIONS).numpy(), text_features, atol=FEATURE_TOLERANCE)
    output = model.score(make_images(), CAPTIONS, references=REFERENCES)
    np.testing.assert_allclose(output.scores.numpy(), scores, atol=SCORE_TOLERANCE, rtol=0)
    np.testing.assert_allclose(output.ref_scores.numpy(), ref_scores, atol=SCORE_TOLERANCE, rtol=0)
    assert output.scores.min() > 0 and output.ref_scores.min() > 0  # clipping at 0 hides nothing here


def test_long_captions_are_scored_past_77_tokens(converted_dirs, checkpoint):
    """The point of the backbone: text beyond token 77 changes the score; truncating at 77 would lose it."""
    _, state_dict = checkpoint
    weights = expected_weights(state_dict, "official")
    _, _, scores, ref_scores = reference_outputs(weights)
    _, _, truncated_scores, _ = reference_outputs(weights, context_length=77)
    output = load_converted(converted_dirs["official"]).score(make_images(), CAPTIONS, references=REFERENCES)
    np.testing.assert_allclose(output.scores.numpy(), scores, atol=SCORE_TOLERANCE, rtol=0)
    np.testing.assert_allclose(output.ref_scores.numpy(), ref_scores, atol=SCORE_TOLERANCE, rtol=0)
    assert output.scores[0] == pytest.approx(truncated_scores[0], abs=SCORE_TOLERANCE)  # short: nothing to truncate
    assert np.all(np.abs(output.scores.numpy()[1:] - truncated_scores[1:]) > 1e-3)


def test_precisions_differ_at_fp16_rounding_level(converted_dirs):
    official, fp32 = (load_converted(converted_dirs[name]).encode_texts(CAPTIONS) for name in ("official", "fp32"))
    difference = float((official - fp32).abs().max())
    assert 1e-5 < difference < 1e-1


def test_embedding_cache_returns_the_same_long_caption_embeddings(converted_dirs):
    model = load_converted(converted_dirs["official"])
    uncached = model.score(make_images(), CAPTIONS, references=REFERENCES)
    model.embedding_cache = EmbeddingCache(max_entries=100)
    first = model.score(make_images(), CAPTIONS, references=REFERENCES)
    second = model.score(make_images(), CAPTIONS, references=REFERENCES)
    assert model.embedding_cache.hits > 0
    torch.testing.assert_close(first.scores, uncached.scores, atol=SCORE_TOLERANCE, rtol=0)
    assert torch.equal(first.scores, second.scores) and torch.equal(first.ref_scores, second.ref_scores)


@longclip_checkout
def test_matches_longclip_code(converted_dirs, checkpoint):
    """Long-CLIP's own `load()` (fp16-rounded weights, on CPU) against `official`; its `CLIP` class in fp32
    against `fp32`; its own `tokenize(..., truncate=True)` for the ids."""
    path, state_dict = checkpoint
    longclip = longclip_code(os.environ["PACS_LONGCLIP_DIR"])
    official_model, _ = longclip.load(str(path), device="cpu")
    references = {"official": official_model, "fp32": longclip_code_model(os.environ["PACS_LONGCLIP_DIR"], state_dict)}
    pixels = torch.stack([original_preprocess(image, IMAGE_SIZE) for image in make_images()])
    token_ids = longclip.tokenize([PREFIX + caption for caption in CAPTIONS], truncate=True)
    np.testing.assert_array_equal(token_ids.numpy(), longclip_ids(CAPTIONS))
    for precision, reference in references.items():
        model = load_converted(converted_dirs[precision])
        with torch.no_grad():
            image_features = reference.encode_image(pixels).float()
            text_features = reference.encode_text(token_ids.long()).float()
        torch.testing.assert_close(model.encode_images(make_images()), image_features, atol=FEATURE_TOLERANCE, rtol=0)
        torch.testing.assert_close(model.encode_texts(CAPTIONS), text_features, atol=FEATURE_TOLERANCE, rtol=0)
        cosines = torch.nn.functional.cosine_similarity(image_features.double(), text_features.double())
        scores = model.score(make_images(), CAPTIONS).scores
        np.testing.assert_allclose(scores.numpy(), 2.5 * cosines.clamp(min=0).numpy(), atol=SCORE_TOLERANCE, rtol=0)


# ----------------------------------------------------------------------------------------------------- errors
def save_checkpoint(tmp_path: Path, state_dict: dict, name: str = "bad.pt") -> Path:
    path = tmp_path / name
    torch.save(state_dict, path)
    return path


def conversion_error(tmp_path: Path, state_dict: dict, capsys, *options: str) -> str:
    path = save_checkpoint(tmp_path, state_dict)
    assert main(["--checkpoint", str(path), "--output-dir", str(tmp_path / "out"), *options]) == 2
    assert not (tmp_path / "out").exists()
    return capsys.readouterr().err


def test_openai_clip_checkpoint_is_refused_with_the_fix(checkpoint, tmp_path, capsys):
    _, state_dict = checkpoint
    clip_layout = {key: value for key, value in state_dict.items() if key != "positional_embedding_res"}
    clip_layout["positional_embedding"] = state_dict["positional_embedding"][:77]
    error = conversion_error(tmp_path, clip_layout, capsys, "--allow-other-geometry")
    assert "no 'positional_embedding_res' tensor (77 text positions)" in error
    assert "not a Long-CLIP checkpoint" in error and "from_clip" in error


def test_pac_s_pp_checkpoint_is_refused_with_the_fix(checkpoint, tmp_path, capsys):
    _, state_dict = checkpoint
    with_lora = dict(state_dict, **{"transformer.resblocks.0.attn.in_proj_weight_lora_A": torch.zeros(4, 128)})
    error = conversion_error(tmp_path, with_lora, capsys, "--allow-other-geometry")
    assert "PAC-S++ checkpoint" in error and "pacs-pp convert" in error


def test_wrong_positional_table_shapes_are_named(checkpoint, tmp_path, capsys):
    _, state_dict = checkpoint
    short = dict(state_dict, positional_embedding_res=state_dict["positional_embedding_res"][:77])
    error = conversion_error(tmp_path, short, capsys, "--allow-other-geometry")
    assert "positional_embedding_res (77, 128)" in error and "expected both (248, 'width')" in error


def test_missing_and_unexpected_keys_are_listed(checkpoint, tmp_path, capsys):
    _, state_dict = checkpoint
    broken = {key: value for key, value in state_dict.items() if key != "ln_final.bias"}
    broken["visual.extra_head.weight"] = torch.zeros(3)
    error = conversion_error(tmp_path, broken, capsys, "--allow-other-geometry")
    assert "missing keys (1): ln_final.bias" in error and "unexpected keys (1): visual.extra_head.weight" in error


def test_unreleased_geometry_needs_the_flag(checkpoint, tmp_path, capsys):
    path, _ = checkpoint
    assert main(["--checkpoint", str(path), "--output-dir", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert "is not one of the released Long-CLIP models" in error and "--allow-other-geometry" in error


def released_geometry(**shapes) -> CheckpointGeometry:
    """What `infer_geometry` reads from a released file's shapes (text tower: 12 layers of width 512 or 768)."""
    text_width = shapes["text_width"]
    geometry = dict(shapes, vision_heads=shapes["vision_width"] // 64, vision_mlp_width=4 * shapes["vision_width"])
    geometry.update(context_length=CONTEXT_LENGTH, vocab_size=49408, text_layers=12, text_heads=text_width // 64)
    return CheckpointGeometry(**geometry, text_mlp_width=4 * text_width)


def test_released_geometries_are_recognised():
    """The shapes of the released files (`text_projection`, `visual.conv1.weight`, `visual.positional_embedding`,
    `ln_final.weight`; ViT-B/16: [512, 512], [768, 3, 16, 16], [197, 768], [512]; ViT-L/14: [768, 768],
    [1024, 3, 14, 14], [257, 1024], [768]) name their Hub repository."""
    b16 = released_geometry(embed_dim=512, image_size=224, patch_size=16, vision_width=768, vision_layers=12,
                            text_width=512)  # fmt: skip
    l14 = released_geometry(embed_dim=768, image_size=224, patch_size=14, vision_width=1024, vision_layers=24,
                            text_width=768)  # fmt: skip
    assert identify_variant(b16).base_model_id == "BeichenZhang/LongCLIP-B"
    assert identify_variant(l14).base_model_id == "BeichenZhang/LongCLIP-L"
    assert identify_variant(l14, base_model_id="me/longclip-ft").base_model_id == "me/longclip-ft"
    assert {variant.geometry["context_length"] for variant in LONGCLIP_VARIANTS.values()} == {CONTEXT_LENGTH}


def test_plain_clip_directory_with_248_positions_reads_248_tokens(converted_dirs, tmp_path):
    """`PACSModel.from_clip` on a plain transformers CLIPModel of Long-CLIP: the context comes from the backbone."""
    converted = load_converted(converted_dirs["official"])
    converted.clip.save_pretrained(tmp_path / "clip")
    converted.tokenizer.save_pretrained(tmp_path / "clip")
    wrapped = PACSModel.from_clip(str(tmp_path / "clip"))
    assert wrapped.config.max_text_length == CONTEXT_LENGTH
    torch.testing.assert_close(wrapped.encode_texts(CAPTIONS), converted.encode_texts(CAPTIONS), atol=0, rtol=0)


def test_converted_directory_is_hub_ready(converted_dirs):
    files = validate_model_directory(converted_dirs["official"])
    assert {"config.json", "model.safetensors", "modeling_pacs.py", "tokenizer.json", "README.md"} <= set(files)


def test_bad_weight_precision_is_named(checkpoint):
    _, state_dict = checkpoint
    with pytest.raises(ValueError, match="weight_precision must be one of"):
        convert_longclip_state_dict(state_dict, weight_precision="fp16", allow_other_geometry=True)


def test_pickle_with_code_is_refused(tmp_path):
    class Payload:
        def __reduce__(self):
            return (print, ("this ran while loading",))

    path = save_checkpoint(tmp_path, {"positional_embedding": Payload()})
    with pytest.raises(CheckpointError, match="weights_only=True"):
        convert_longclip_checkpoint(path, tmp_path / "out", allow_other_geometry=True, log=lambda message: None)


def test_script_is_the_command_line(checkpoint, tmp_path):
    import subprocess
    import sys

    path, _ = checkpoint
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "convert_longclip_checkpoint.py"), "--checkpoint", str(path)]
        + ["--output-dir", str(tmp_path / "out"), "--no-verify"],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)), timeout=300,
    )  # fmt: skip
    assert result.returncode == 2 and "--allow-other-geometry" in result.stderr


# ----------------------------------------------------------------------------------------------------- training
def test_pac_s_pp_trains_on_longclip_with_248_token_texts(converted_dirs, tmp_path):
    """Two PAC-S++ steps on the converted Long-CLIP directory: the collator keeps captions past 77 tokens, every
    LoRA B matrix learns, and the saved model reloads (remote code, adapter merged) reading 248 tokens."""
    image_paths = []
    for index, image in enumerate(make_images()):
        image_paths.append(str(tmp_path / f"image{index}.png"))
        image.save(image_paths[-1])
    rows = [
        {"image": path, "caption": caption, "synthetic_image": path, "synthetic_caption": caption.upper()}
        for path, caption in zip(image_paths, CAPTIONS)
    ]
    columns = required_columns()
    train_set = prepare_training_dataset(datasets.Dataset.from_list(rows), columns)
    torch.manual_seed(0)
    model = PACSModel.from_pretrained(converted_dirs["fp32"], dtype=torch.float32)
    model = prepare_model_for_training(model, RECIPES["pac_s_pp"]).train()
    collator = PACSDataCollator(model)
    batch = collator(list(train_set))
    assert batch["input_ids"].shape[1] == CONTEXT_LENGTH and batch["attention_mask"][1].sum() > 77
    before = {name: value.clone() for name, value in model.state_dict().items() if "lora_B" in name}
    arguments = TrainingArguments(
        output_dir=str(tmp_path / "run"), per_device_train_batch_size=4, learning_rate=5e-3, max_steps=2,
        report_to="none", use_cpu=True, disable_tqdm=True, save_strategy="no", seed=0,
    )  # fmt: skip
    trainer = PACSTrainer(
        model=PACSEncoderForTraining(model),
        args=arguments,
        train_dataset=train_set,
        data_collator=collator,
        lambda_v=RECIPES["pac_s_pp"].lambda_v,
        lambda_t=RECIPES["pac_s_pp"].lambda_t,
    )
    trainer.train()
    after = model.state_dict()
    assert before and all(not torch.equal(value, after[name]) for name, value in before.items())
    assert any("text_model" in name for name in before) and any("patch_embedding" in name for name in before)

    model.eval()
    expected = model.encode_texts(CAPTIONS)
    save_remote_code_model(model, tmp_path / "trained", processor=build_processor(model.config, model.tokenizer))
    adapter_config = json.loads((tmp_path / "trained" / "adapter" / "adapter_config.json").read_text())
    assert adapter_config["base_model_name_or_path"] == "custom-longclip"
    reloaded = load_converted(tmp_path / "trained")
    assert reloaded.config.variant == "pac_s_pp" and reloaded.config.max_text_length == CONTEXT_LENGTH
    assert reloaded.tokenizer.model_max_length == CONTEXT_LENGTH
    assert reloaded.tokenize(CAPTIONS)["attention_mask"].sum(dim=1).tolist()[1:] == [
        int(length) for length in model.tokenize(CAPTIONS)["attention_mask"].sum(dim=1)[1:]
    ]
    torch.testing.assert_close(reloaded.encode_texts(CAPTIONS), expected, atol=FEATURE_TOLERANCE, rtol=0)
    # The trained model still reads past token 77: cutting the long captions there changes their embeddings.
    reloaded.config.max_text_length = 77
    truncated = reloaded.encode_texts(CAPTIONS)
    assert torch.allclose(truncated[0], expected[0], atol=FEATURE_TOLERANCE)
    assert all(float((truncated[row] - expected[row]).abs().max()) > 1e-3 for row in (1, 2, 3))


def test_card_of_a_model_trained_on_longclip_states_its_context():
    """`write_trained_model_card` passes the model's `max_text_length` to the card of a trained PAC-S++."""
    card = render_model_card(
        "pac_s_pp_vit_b32", lora_mode=None, provenance="trained here", include_reported_results=False,
        max_text_length=CONTEXT_LENGTH,
    )  # fmt: skip
    assert "BPE, 248 tokens" in card and "longer than 248 tokens are truncated" in card and "77 tokens" not in card
