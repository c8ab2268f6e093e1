"""The packed CPU path of `fast_clip` against transformers' own CLIP forward on the same weights (a peer
implementation), and where the engine uses it. Parity with OpenAI's original CLIP code runs through this path too
(tests/pacs/test_convert.py, tests/pacs/test_peer_parity.py: the engine's default)."""

import copy

import pytest
import torch
import torch.nn.functional as F
from transformers import CLIPConfig, CLIPModel

from modeling_pacs.models.fast_clip import FastCLIPEncoders, end_of_text_positions, packed_linear_available

pytestmark = pytest.mark.skipif(
    not packed_linear_available(), reason="this torch build has no oneDNN packed linear kernels (the path is off)"
)

EOS = 99


def small_clip(activation: str, eos_token_id: int = EOS, seed: int = 0) -> CLIPModel:
    torch.manual_seed(seed)
    tower = dict(
        hidden_size=48, intermediate_size=96, num_attention_heads=4, num_hidden_layers=3, hidden_act=activation
    )
    text = dict(tower, vocab_size=100, max_position_embeddings=20, eos_token_id=eos_token_id)
    config = CLIPConfig(text_config=text, vision_config=dict(tower, image_size=32, patch_size=8), projection_dim=24)
    model = CLIPModel(config).eval()
    with torch.no_grad():  # random biases and norms, so every fused term is exercised
        for name, parameter in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                parameter.add_(0.1 * torch.randn_like(parameter))
    return model


def padded_texts(pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Five captions of 3 to 11 tokens (end-of-text last), padded to 12 with `pad_id`, and their mask."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.full((5, 12), pad_id)
    mask = torch.zeros(5, 12, dtype=torch.long)
    for row, length in enumerate([3, 11, 7, 5, 9]):
        ids[row, : length - 1] = torch.randint(1, EOS - 1, (length - 1,), generator=generator)
        ids[row, length - 1] = EOS
        mask[row, :length] = 1
    return ids, mask


def assert_embeddings_close(ours: torch.Tensor, theirs: torch.Tensor):
    # fp32 matrix products in another order and layout: equal to rounding, and as unit vectors within 1e-6.
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(F.normalize(ours, dim=-1), F.normalize(theirs, dim=-1), rtol=0, atol=1e-6)


@pytest.mark.parametrize("activation", ["quick_gelu", "gelu"])
@pytest.mark.parametrize("pad_id", [EOS, 0])
def test_fast_embeddings_equal_transformers(activation, pad_id):
    model = small_clip(activation)
    fast = FastCLIPEncoders.build(model)
    assert fast is not None
    pixels = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    ids, mask = padded_texts(pad_id)
    with torch.inference_mode():
        assert_embeddings_close(fast.encode_images(pixels), model.get_image_features(pixel_values=pixels).pooler_output)
        expected = model.get_text_features(input_ids=ids, attention_mask=mask).pooler_output
        assert_embeddings_close(fast.encode_texts(ids), expected)
        # Each caption alone, unpadded: the padding after end-of-text changes nothing.
        for row in range(len(ids)):
            alone = ids[row : row + 1, : int(mask[row].sum())]
            assert_embeddings_close(fast.encode_texts(alone)[0], expected[row])


def test_legacy_eos_id_pools_the_largest_id_like_transformers():
    model = small_clip("quick_gelu", eos_token_id=2)
    ids, mask = padded_texts(EOS)  # EOS (99) is the largest id, as 49407 is in CLIP's vocabulary
    assert end_of_text_positions(model.text_model, ids).tolist() == [2, 10, 6, 4, 8]
    with torch.inference_mode():
        expected = model.get_text_features(input_ids=ids, attention_mask=mask).pooler_output
        assert_embeddings_close(FastCLIPEncoders.build(model).encode_texts(ids), expected)


def test_engine_scores_equal_transformers_path(tiny_model, image_folder):
    images = [image_folder[i % 6] for i in range(8)]
    candidates = [f"a photo number {i} of a small brown dog" if i % 2 else f"cat {i}" for i in range(8)]
    references = [[f"reference {i} {j} of a cat on a mat" for j in range(3)] for i in range(8)]
    assert tiny_model.fast_encoders() is not None
    fast = tiny_model.score(images, candidates, references)
    tiny_model.fast_cpu_encoders = False
    try:
        plain = tiny_model.score(images, candidates, references)
    finally:
        tiny_model.fast_cpu_encoders = True
    torch.testing.assert_close(fast.scores, plain.scores, rtol=0, atol=1e-6)
    torch.testing.assert_close(fast.ref_scores, plain.ref_scores, rtol=0, atol=1e-6)


def test_fast_path_follows_weight_changes(tiny_model):
    model = copy.deepcopy(tiny_model)  # a copy made after the packed matrices exist starts without them
    captions = ["a dog on a red mat", "two cats"]
    before = model.encode_texts(captions)
    layer = model.clip.text_model.encoder.layers[0]
    with torch.no_grad():
        layer.mlp.fc1.weight.mul_(1.5)  # in place: the packed copy must be rebuilt
    after = model.encode_texts(captions)
    assert (after - before).abs().max() > 1e-3
    with torch.inference_mode():
        tokens = model.tokenize(captions, None)
        pooled = model.clip.text_model(**tokens).pooler_output
        expected = model.clip.text_projection(pooled)
    assert_embeddings_close(after, expected)


def test_fast_path_is_used_only_where_it_applies(tiny_model):
    model = copy.deepcopy(tiny_model)
    assert isinstance(model.fast_encoders(), FastCLIPEncoders)
    model.fast_cpu_encoders = False
    assert model.fast_encoders() is None
    model.fast_cpu_encoders = True
    model.train()
    assert model.fast_encoders() is None
    model.eval()
    model.clip.double()
    assert model.fast_encoders() is None
    model.clip.float()
    assert model.fast_encoders() is not None

    from peft import LoraConfig, get_peft_model

    plain = model.clip
    model.clip = get_peft_model(plain, LoraConfig(r=2, target_modules=["q_proj", "v_proj"])).eval()
    assert model.fast_encoders() is not None  # a vanilla unmerged adapter runs on the packed path
    dora = LoraConfig(r=2, target_modules=["q_proj"], use_dora=True)
    model.clip = get_peft_model(copy.deepcopy(plain), dora).eval()
    assert model.fast_encoders() is None  # DoRA: transformers' forward with PEFT's layers


def lora_clip(activation: str, targets: list[str], seed: int = 3):
    """`small_clip` with an unmerged PEFT LoRA adapter on `targets`, its B matrices random (PEFT starts them at
    zero, which would test nothing)."""
    from peft import LoraConfig, get_peft_model

    base = small_clip(activation)
    model = get_peft_model(copy.deepcopy(base), LoraConfig(r=3, lora_alpha=5, target_modules=targets)).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(0.2 * torch.randn(parameter.shape, generator=generator))
    return base, model


@pytest.mark.parametrize("activation", ["quick_gelu", "gelu"])
@pytest.mark.parametrize(
    "targets", [["q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2"], ["k_proj", "fc2"], ["q_proj", "v_proj"]]
)
def test_an_unmerged_lora_adapter_on_the_fast_path_equals_peft_forward(activation, targets):
    base, model = lora_clip(activation, targets)
    fast = FastCLIPEncoders.build(model)
    assert fast is not None
    pixels = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    ids, mask = padded_texts(EOS)
    with torch.inference_mode():
        images = model.get_image_features(pixel_values=pixels).pooler_output
        texts = model.get_text_features(input_ids=ids, attention_mask=mask).pooler_output
        assert_embeddings_close(fast.encode_images(pixels), images)
        assert_embeddings_close(fast.encode_texts(ids), texts)
        # the adapter matters: the base model's embeddings are far from these
        assert (base.get_image_features(pixel_values=pixels).pooler_output - images).abs().max() > 1e-2
        # merged, as pacs-score loads it: the same embeddings within rounding
        merged = copy.deepcopy(model).merge_and_unload()
        expected = merged.get_image_features(pixel_values=pixels).pooler_output
        assert_embeddings_close(fast.encode_images(pixels), expected)


def test_an_adapter_on_shared_base_weights_reuses_their_packed_matrices():
    base, model = lora_clip("quick_gelu", ["q_proj", "fc1"])
    plain = dict(base.named_parameters())
    for name, _ in list(model.base_model.model.named_parameters()):  # what evaluate-captions does
        plain_name = name.replace(".base_layer.", ".")
        if "lora_" not in name:
            module, _, leaf = name.rpartition(".")
            setattr(model.base_model.model.get_submodule(module), leaf, plain[plain_name])
    shared = FastCLIPEncoders.build(base)
    fast = FastCLIPEncoders.build(model, base=lambda: shared)
    first, ours = shared.vision_layers[0], fast.vision_layers[0]
    assert ours.qkv.base is first.qkv and ours.fc1.base is first.fc1  # the packed matrices, not a copy
    assert ours.out is first.out and ours.fc2 is first.fc2  # no adapter there: the base layer itself
    alone = FastCLIPEncoders.build(copy.deepcopy(model))  # another model's tensors: packed for itself
    pixels = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(4))
    with torch.inference_mode():
        assert_embeddings_close(fast.encode_images(pixels), alone.encode_images(pixels))
        expected = model.get_image_features(pixel_values=pixels).pooler_output
        assert_embeddings_close(fast.encode_images(pixels), expected)
    other = FastCLIPEncoders.build(small_clip("quick_gelu", seed=5))  # a base that is not this adapter's
    mismatched = FastCLIPEncoders.build(model, base=lambda: other)
    assert mismatched.vision_layers[0].qkv.base is not other.vision_layers[0].qkv  # never reused: packed anew
    with torch.inference_mode():
        assert_embeddings_close(mismatched.encode_images(pixels), expected)


def test_a_packing_failure_falls_back_to_transformers_with_a_warning(monkeypatch, caplog):
    import modeling_pacs.models.fast_clip as fast_clip

    def refuse(*args):
        raise RuntimeError("oneDNN: unsupported ISA")

    monkeypatch.setattr(fast_clip.torch.ops.mkldnn, "_reorder_linear_weight", refuse)
    with caplog.at_level("WARNING"):
        assert FastCLIPEncoders.build(small_clip("quick_gelu")) is None
    assert "packing the encoder weights failed (oneDNN: unsupported ISA); using transformers' forward" in caplog.text
