"""The captioner: save/load, greedy and beam generation, CLIP grid features (Eq. 15), and Eq. 19's gradient against
an independent token-by-token computation."""

import numpy as np
import pytest
import torch
from transformers import AutoModel, CLIPVisionModel

from modeling_pacs.captioning import PACSCaptionerConfig, PACSCaptionerForConditionalGeneration
from modeling_pacs.captioning.training import (
    caption_labels,
    generated_token_mask,
    scst_loss,
    sequence_log_probs,
    xe_learning_rate_factor,
)
from modeling_pacs.tokenization import build_clip_tokenizer

TINY_VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}


def tiny_captioner(seed: int = 0, dropout: float = 0.0) -> PACSCaptionerForConditionalGeneration:
    torch.manual_seed(seed)
    config = PACSCaptionerConfig(
        vision_config=TINY_VISION,
        hidden_size=32,
        encoder_layers=2,
        decoder_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        dropout=dropout,
    )
    return PACSCaptionerForConditionalGeneration(config).eval()


def test_default_config_is_the_papers():
    config = PACSCaptionerConfig()
    assert (config.hidden_size, config.encoder_layers, config.decoder_layers, config.num_attention_heads) == (
        512,
        3,
        3,
        8,
    )
    assert (config.vision_config.hidden_size, config.vision_config.patch_size) == (768, 32)
    assert config.vocab_size == len(build_clip_tokenizer())
    with pytest.raises(ValueError, match="hidden_size \\(30\\) must be divisible by num_attention_heads \\(8\\)"):
        PACSCaptionerConfig(hidden_size=30)
    with pytest.raises(ValueError, match="decoder_layers must be a positive integer, got 0"):
        PACSCaptionerConfig(decoder_layers=0)


def test_grid_features_are_clip_tokens_before_post_layernorm():
    """Eq. 15, E_v = W LN(e): the captioner reads e (the last layer tokens); CLIP pools W LN(e_cls)."""
    model = tiny_captioner()
    clip = CLIPVisionModel(model.config.vision_config).eval()
    clip.load_state_dict(model.encoder.vision_model.state_dict())
    pixel_values = torch.randn(2, 3, 224, 224)
    features = model.encoder.visual_features(pixel_values)
    with torch.no_grad():
        hidden = clip(pixel_values=pixel_values, output_hidden_states=True)
    torch.testing.assert_close(features, hidden.hidden_states[-1], rtol=0, atol=0)
    torch.testing.assert_close(clip.post_layernorm(features[:, 0]), hidden.pooler_output)
    assert features.shape == (2, 50, 32)  # 7 x 7 patches + class token


def test_save_load_and_generation(tmp_path):
    model = tiny_captioner()
    pixel_values = torch.randn(3, 3, 224, 224)
    greedy = model.generate(pixel_values=pixel_values, max_new_tokens=6)
    beams = model.generate(pixel_values=pixel_values, num_beams=5, num_return_sequences=5, max_new_tokens=6)
    assert greedy.shape[0] == 3 and beams.shape[0] == 15
    assert (greedy[:, 0] == model.config.bos_token_id).all()
    # Greedy decoding is argmax at each step (Eq. 17), recomputed by hand.
    encoder_states = model.get_encoder()(pixel_values=pixel_values).last_hidden_state
    sequence = torch.full((3, 1), model.config.bos_token_id)
    with torch.no_grad():
        for _ in range(6):
            next_token = model.decode(sequence, encoder_states)[:, -1].argmax(-1, keepdim=True)
            sequence = torch.cat([sequence, next_token], dim=1)
    finished = generated_token_mask(greedy, model.config.eos_token_id)
    assert torch.equal(greedy[finished], sequence[:, : greedy.shape[1]][finished])

    type(model.config).register_for_auto_class()
    type(model).register_for_auto_class("AutoModel")
    model.save_pretrained(tmp_path / "captioner")
    assert (tmp_path / "captioner" / "modeling_captioner.py").is_file()
    loaded = AutoModel.from_pretrained(tmp_path / "captioner", dtype=torch.float32).eval()
    assert isinstance(loaded, PACSCaptionerForConditionalGeneration)
    assert torch.equal(loaded.generate(pixel_values=pixel_values, num_beams=5, max_new_tokens=6), beams[::5])
    # The CLIP tower stays frozen after loading (multi-process training relies on it: DDP waits for every gradient).
    trainable = {name: parameter.requires_grad for name, parameter in model.named_parameters()}
    assert {name: parameter.requires_grad for name, parameter in loaded.named_parameters()} == trainable
    assert not any(trainable[name] for name in trainable if name.startswith("encoder.vision_model."))
    # Generation from precomputed encoder outputs (the feature cache path) gives the same beams.
    features = model.encoder.visual_features(pixel_values)
    from_features = model.generate(
        encoder_outputs=model.get_encoder()(visual_features=features), num_beams=5, max_new_tokens=6
    )
    assert torch.equal(from_features, beams[::5])


def test_teacher_forcing_loss_is_token_cross_entropy():
    """Eq. 16 averaged over tokens, recomputed with NumPy from the logits."""
    model = tiny_captioner()
    tokenizer = build_clip_tokenizer()
    labels = caption_labels(tokenizer, ["a dog on a beach", "a cat"], 77)
    assert labels[1].tolist()[-1] == -100 and labels[0].tolist()[-1] == tokenizer.eos_token_id
    output = model(pixel_values=torch.randn(2, 3, 224, 224), labels=labels)
    logits = output.logits.detach().double().numpy()
    log_probs = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True))
    log_probs -= logits.max(-1, keepdims=True)
    picked = [log_probs[b, t, labels[b, t]] for b in range(2) for t in range(labels.shape[1]) if labels[b, t] != -100]
    np.testing.assert_allclose(float(output.loss.detach()), -np.mean(picked), rtol=0, atol=1e-5)


def test_scst_loss_gradient_matches_independent_computation():
    """Eq. 19: grad = -(1/l) sum_i (r_i - b) grad log p(t_i), b = mean of the image's beams; log p by stepwise
    decoding, gradients by one autograd call per sequence, combined in NumPy."""
    model = tiny_captioner(seed=3).double()  # float64: the two computations sum in different orders
    pixel_values = torch.randn(2, 3, 224, 224, dtype=torch.float64)
    num_beams = 3
    sequences = model.generate(
        pixel_values=pixel_values, num_beams=num_beams, num_return_sequences=num_beams, max_new_tokens=4
    )
    rewards = torch.tensor([[0.9, 0.1, 0.5], [0.2, 0.4, 0.3]], dtype=torch.float64)
    parameters = [p for p in model.parameters() if p.requires_grad]

    logits = model(pixel_values=pixel_values, decoder_input_ids=sequences[:, :-1]).logits  # encoder run once per image
    log_probs = sequence_log_probs(logits, sequences, model.config.eos_token_id)
    loss = scst_loss(log_probs.view(2, num_beams), rewards)
    gradients = torch.autograd.grad(loss, parameters)

    eos = model.config.eos_token_id
    expected = [np.zeros(p.shape) for p in parameters]
    rewards_np = rewards.numpy().astype(np.float64)
    for row, sequence in enumerate(sequences):
        image, beam = divmod(row, num_beams)
        states = model.get_encoder()(pixel_values=pixel_values[image : image + 1]).last_hidden_state
        log_prob = 0.0
        for position in range(1, sequence.shape[0]):
            logits = model.decode(sequence[None, :position], states)[0, -1]
            log_prob = log_prob + logits.log_softmax(-1)[sequence[position]]
            if sequence[position] == eos:
                break
        weight = -(rewards_np[image, beam] - rewards_np[image].mean()) / num_beams / 2  # /2: mean over images
        for total, gradient in zip(expected, torch.autograd.grad(log_prob, parameters, allow_unused=True)):
            if gradient is not None:
                total += weight * gradient.double().numpy()
    for gradient, reference in zip(gradients, expected):
        np.testing.assert_allclose(gradient.numpy(), reference, rtol=1e-9, atol=1e-12)


def test_scst_baseline_is_per_image_beam_mean():
    log_probs = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -4.0]], requires_grad=True)
    rewards = torch.tensor([[1.0, 2.0, 6.0], [0.0, 0.0, 3.0]])
    scst_loss(log_probs, rewards).backward()
    # d loss / d log p_ij = -(r_ij - mean_j r_ij) / l / num_images
    expected = -(rewards - rewards.mean(1, keepdim=True)) / 3 / 2
    torch.testing.assert_close(log_probs.grad, expected)
    # Adding a constant to one image's rewards changes nothing (the baseline absorbs it).
    shifted = rewards + torch.tensor([[10.0], [-5.0]])
    assert torch.equal(scst_loss(log_probs, shifted), scst_loss(log_probs, rewards))
    with pytest.raises(ValueError, match=r"must both be \[num_images, num_beams\]"):
        scst_loss(log_probs, rewards[0])


def test_generated_token_mask_stops_after_first_eos():
    eos = 9
    sequences = torch.tensor([[1, 4, 5, eos, eos, eos], [1, 4, 5, 6, 7, 8], [1, eos, eos, eos, eos, eos]])
    expected = [[0, 1, 1, 1, 0, 0], [0, 1, 1, 1, 1, 1], [0, 1, 0, 0, 0, 0]]
    assert generated_token_mask(sequences, eos).long().tolist() == expected


def test_xe_schedule_follows_the_paper():
    peak = 2.5e-4
    assert xe_learning_rate_factor(0) * peak == pytest.approx(peak / 1000)
    assert xe_learning_rate_factor(999) * peak == pytest.approx(peak)
    assert xe_learning_rate_factor(5_000) * peak == pytest.approx(peak)
    assert xe_learning_rate_factor(15_000) * peak == pytest.approx(1e-5)
    assert xe_learning_rate_factor(19_999) * peak == pytest.approx(1e-5)
    middle = xe_learning_rate_factor(12_500) * peak
    # Sub-linear: below the straight line between 2.5e-4 and 1e-5 at mid-decay.
    assert 1e-5 < middle < (peak + 1e-5) / 2
