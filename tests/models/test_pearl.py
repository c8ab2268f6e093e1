"""PearlModel (docs/spec/pearl.md): structure, initial states, the fusion and the loss against NumPy."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from safetensors import safe_open

from modeling_pacs import PearlConfig, PearlModel
from modeling_pacs.hub import save_remote_code_model
from modeling_pacs.models.modeling_pearl import PearlDiffNet, PearlHadamardNet
from modeling_pacs.pearl.hadamard_init import HADAMARD_INIT_PATH, initialise_hadamard_nets, load_hadamard_init
from tests.fixtures.pearl import one_torch_thread, random_features, tiny_pearl_config  # noqa: F401 (autouse fixture)


@pytest.fixture(scope="module")
def tiny_pearl():
    torch.manual_seed(0)
    return PearlModel(tiny_pearl_config()).eval()


def test_default_config_has_the_parameters_the_forward_uses():
    # docs/spec/pearl.md#vss, docs/spec/pearl.md#a5: heads 2 x 20,057,089, transformer 31,489,024, adapters 6 x
    # 2,361,600, HadamardNets 6 x 1,385,089, cross-attention 9,443,328, DiffNets 6 x 2,304, queries 12,288.
    expected = 2 * 20_057_089 + 31_489_024 + 6 * 2_361_600 + 6 * 1_385_089 + 9_443_328 + 6 * 2 * 768 + 6 * 768
    expected += 8 * 1536
    with torch.device("meta"):
        model = PearlModel(PearlConfig())
    assert expected == 103_552_776
    assert model.num_parameters() == expected
    assert round(model.num_parameters() / 1e6, 2) == 103.55
    assert sum(p.numel() for p in model.vss.transformer.parameters()) == 31_489_024
    assert sum(p.numel() for p in model.image_arsms["clip"].hadamard_net.parameters()) == 1_385_089


def test_default_sequence_lengths():
    config = PearlConfig()
    assert (config.image_sequence_length, config.reference_sequence_length, config.token_dim) == (34, 3, 1536)
    assert config.encoder_names == ["clip", "beit3", "blip2", "stella"]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_refs", 0, "PearlConfig.max_refs must be a positive integer, got 0"),
        ("lambda_img", 1.5, "PearlConfig.lambda_img must be in [0, 1], got 1.5"),
        ("huber_delta", float("nan"), "PearlConfig.huber_delta must be > 0, got nan"),
        ("num_heads", 3, "2 * feature_dim (32) must be divisible by num_heads"),
    ],
)
def test_invalid_config_names_the_field(field, value, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        tiny_pearl_config(**{field: value})


def test_diffnet_starts_as_u_minus_c_exactly(tiny_pearl):
    generator = torch.Generator().manual_seed(3)
    u, c = torch.randn(7, 16, generator=generator), torch.randn(7, 16, generator=generator)
    for arsm in list(tiny_pearl.image_arsms.values()) + list(tiny_pearl.reference_arsms.values()):
        with torch.no_grad():
            np.testing.assert_array_equal(arsm.diff_net(u, c).numpy(), u.numpy() - c.numpy())
    fresh = PearlDiffNet(16)
    with torch.no_grad():
        fresh.weight.add_(1.0)
    fresh.reset_parameters()
    np.testing.assert_array_equal(fresh(u, c).detach().numpy(), u.numpy() - c.numpy())


def test_shipped_hadamard_net_multiplies_on_held_aside_inputs():
    with safe_open(HADAMARD_INIT_PATH, "pt") as handle:
        metadata = handle.metadata()
    recipe, report = json.loads(metadata["recipe"]), json.loads(metadata["report"])
    assert report["held_out_mse"] <= 1e-3
    net = PearlHadamardNet(list(recipe["channels"]))
    net.load_state_dict(load_hadamard_init())
    net.eval()
    rng = np.random.default_rng(20261123)  # neither the training seed nor the acceptance seed
    first = rng.uniform(recipe["low"], recipe["high"], size=(64, 256)).astype(np.float32)
    second = rng.uniform(recipe["low"], recipe["high"], size=(64, 256)).astype(np.float32)
    with torch.no_grad():
        product = net(torch.from_numpy(first), torch.from_numpy(second)).numpy()
    assert np.mean((product - first * second) ** 2) <= 1e-3


def test_initialise_hadamard_nets_loads_every_net():
    model = PearlModel(tiny_pearl_config(hadamard_channels=[128, 256, 512, 1024, 512, 256, 128]))
    assert initialise_hadamard_nets(model) == 4
    shipped = load_hadamard_init()
    for arsm in list(model.image_arsms.values()) + list(model.reference_arsms.values()):
        for key, value in arsm.hadamard_net.state_dict().items():
            assert torch.equal(value, shipped[key]), key
    with pytest.raises(ValueError, match="the shipped HadamardNet initialisation has channels"):
        initialise_hadamard_nets(PearlModel(tiny_pearl_config()))


def test_forward_shapes_in_both_settings(tiny_pearl):
    features = random_features(batch=4, num_refs=5)
    with torch.no_grad():
        with_refs = tiny_pearl(**features)
        without = tiny_pearl(features["candidate_features"], features["image_features"])
    for output in (with_refs, without):
        assert output.score.shape == output.img_score.shape == output.ref_score.shape == (4,)
        assert ((output.score > 0) & (output.score < 1)).all()
    assert with_refs.ref_scores.shape == (4, 5)
    assert with_refs.has_refs.tolist() == [True] * 4
    assert without.has_refs.tolist() == [False] * 4
    assert tiny_pearl.image_tokens(features["candidate_features"], features["image_features"]).shape == (4, 4, 32)


def test_reference_free_score_is_the_image_head(tiny_pearl):
    features = random_features(batch=3, num_refs=2)
    with torch.no_grad():
        without = tiny_pearl(features["candidate_features"], features["image_features"])
        masked = tiny_pearl(**features, reference_mask=torch.zeros(3, 2, dtype=torch.bool))
        with_refs = tiny_pearl(**features)
        # The image head, applied by hand to the VSS summary of the Img-GEM tokens.
        tokens = tiny_pearl.image_tokens(features["candidate_features"], features["image_features"])
        by_hand = tiny_pearl.image_head(tiny_pearl.vss(tokens)).squeeze(-1)
    assert torch.equal(without.score, without.img_score)
    assert torch.equal(masked.score, masked.img_score)
    np.testing.assert_allclose(without.score.numpy(), by_hand.numpy(), atol=1e-6)
    np.testing.assert_allclose(with_refs.img_score.numpy(), without.img_score.numpy(), atol=1e-6)
    assert masked.ref_score.tolist() == [0.0, 0.0, 0.0]


def test_max_over_references_and_fusion_match_numpy(tiny_pearl):
    batch, num_refs = 4, 5
    features = random_features(batch=batch, num_refs=num_refs, seed=5)
    mask = torch.tensor(
        [
            [True, True, True, True, True],
            [True, False, True, False, False],
            [False] * 5,
            [True, False, False, False, False],
        ]
    )
    with torch.no_grad():
        output = tiny_pearl(**features, reference_mask=mask)
        # Each reference scored on its own (one reference per forward), as the independent computation's input.
        single = np.zeros((batch, num_refs), dtype=np.float64)
        for slot in range(num_refs):
            one = {name: value[:, slot : slot + 1] for name, value in features["reference_features"].items()}
            single[:, slot] = (
                tiny_pearl(features["candidate_features"], features["image_features"], one).ref_scores[:, 0].numpy()
            )
    img = output.img_score.numpy().astype(np.float64)
    mask_np = mask.numpy()
    best = np.where(mask_np, single, 0.0).max(axis=1)
    expected = np.where(mask_np.any(axis=1), 0.5 * img + 0.5 * best, img)
    np.testing.assert_allclose(output.ref_scores.numpy(), np.where(mask_np, single, 0.0), atol=1e-6)
    np.testing.assert_allclose(output.ref_score.numpy(), best, atol=1e-6)
    np.testing.assert_allclose(output.score.numpy(), expected, atol=1e-6)


def test_loss_is_the_summed_huber_with_the_reference_term_only_where_references_exist(tiny_pearl):
    features = random_features(batch=4, num_refs=2, seed=9)
    mask = torch.tensor([[True, True], [False, False], [True, False], [False, False]])
    labels = torch.tensor([0.9, 0.1, 0.5, 0.0])
    with torch.no_grad():
        output = tiny_pearl(**features, reference_mask=mask, labels=labels)

    def huber(prediction, target, delta=0.5):
        error = np.abs(prediction - target)
        return np.where(error <= delta, 0.5 * error**2, delta * (error - 0.5 * delta))

    img, ref, y = (output.img_score.numpy(), output.ref_score.numpy(), labels.numpy())
    has_refs = mask.numpy().any(axis=1)
    expected = huber(img, y).sum() + huber(ref[has_refs], y[has_refs]).sum()
    np.testing.assert_allclose(float(output.loss), expected, atol=1e-6)


def test_more_references_than_max_refs_is_an_error(tiny_pearl):
    features = random_features(batch=2, num_refs=6)
    with pytest.raises(ValueError, match="got 6 reference slots but max_refs is 5: pass at most 5 references"):
        tiny_pearl(**features)


def test_save_and_reload_gives_identical_scores(tmp_path):
    torch.manual_seed(1)
    tiny_pearl = PearlModel(tiny_pearl_config()).eval()
    with torch.no_grad():  # trained DiffNets must survive the reload (not be reset to u - c)
        tiny_pearl.image_arsms["clip"].diff_net.weight.mul_(0.5)
    save_remote_code_model(tiny_pearl, tmp_path / "pearl")
    reloaded = PearlModel.from_pretrained(tmp_path / "pearl", dtype=torch.float32).eval()
    features = random_features(batch=3, num_refs=2, seed=11)
    with torch.no_grad():
        before, after = tiny_pearl(**features), reloaded(**features)
    np.testing.assert_allclose(after.score.numpy(), before.score.numpy(), atol=1e-6)
    assert reloaded.config.reference_encoders == tiny_pearl.config.reference_encoders
    assert torch.equal(reloaded.image_arsms["clip"].diff_net.weight, tiny_pearl.image_arsms["clip"].diff_net.weight)
    assert torch.equal(reloaded.vss.positions, tiny_pearl.vss.positions)


def test_saved_directory_loads_as_remote_code_in_a_fresh_process(tmp_path):
    torch.manual_seed(2)
    model = PearlModel(tiny_pearl_config()).eval()
    save_remote_code_model(model, tmp_path / "pearl")
    for name in ("configuration_pearl.py", "modeling_pearl.py", "scoring_pearl.py", "config.json", "model.safetensors"):
        assert (tmp_path / "pearl" / name).is_file(), name
        assert (tmp_path / "pearl" / name).stat().st_mode & 0o777 == 0o644
    features = random_features(batch=2, num_refs=1, seed=4)
    torch.save(features, tmp_path / "features.pt")
    with torch.no_grad():
        expected = model(**features).score.numpy()
    script = (
        "import sys, torch; from transformers import AutoModel; "
        "m = AutoModel.from_pretrained(sys.argv[1], trust_remote_code=True, dtype=torch.float32).eval(); "
        "assert type(m).__module__.startswith('transformers_modules'), type(m).__module__; "
        "f = torch.load(sys.argv[2], weights_only=True); "
        "print(' '.join(repr(v) for v in m(**f).score.tolist()))"
    )
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(tmp_path / "modules")}
    environment.pop("PYTHONPATH", None)
    result = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "pearl"), str(tmp_path / "features.pt")],
        env=environment,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    np.testing.assert_allclose([float(value) for value in result.stdout.split()], expected, atol=1e-6)


def test_missing_or_mis_sized_features_name_the_encoder(tiny_pearl):
    features = random_features(batch=2, num_refs=1)
    del features["candidate_features"]["stella"]
    with pytest.raises(ValueError, match=re.escape("candidate_features has no 'stella' features")):
        tiny_pearl(**features)
    features = random_features(batch=2, num_refs=1)
    features["image_features"]["blip2"] = torch.zeros(2, 3, 9)
    with pytest.raises(ValueError, match=re.escape("image_features['blip2'] has size 9, the config says 8")):
        tiny_pearl(**features)
