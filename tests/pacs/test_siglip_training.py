"""Training PAC-S++ and PAC-S on a SigLIP backbone: LoRA targets resolved for SigLIP, the sigmoid loss against
NumPy, a few steps that lower the loss and change only LoRA tensors, and train_pacs.py from a plain SigLIP
checkpoint to a Hub-ready directory."""

import json
from pathlib import Path

import datasets
import numpy as np
import PIL.Image
import pytest
import torch

from modeling_pacs import PACSModel
from modeling_pacs.pacs.training import (
    RECIPES,
    pacs_contrastive_loss,
    prepare_model_for_training,
    sigmoid_contrastive_loss,
)
from modeling_pacs.testing.pacs import build_siglip_tokenizer, make_tiny_model, tiny_siglip_config
from tests.pacs.test_training import load_base, make_trainer

REPO_ROOT = Path(__file__).resolve().parents[2]
COLORS = ["red", "green", "blue", "yellow"]
RGB = {"red": (220, 30, 30), "green": (30, 200, 40), "blue": (30, 40, 220), "yellow": (230, 220, 30)}
NUM_ROWS = 16


def numpy_sigmoid_loss(images: np.ndarray, texts: np.ndarray, logit_scale: float, logit_bias: float) -> float:
    """SigLIP's loss (Zhai et al. 2023, Eq. 1) in float64: -1/N sum_ij log sigmoid(z_ij (t x_i.y_j + b))."""
    images = images / np.linalg.norm(images, axis=1, keepdims=True)
    texts = texts / np.linalg.norm(texts, axis=1, keepdims=True)
    logits = np.exp(logit_scale) * images @ texts.T + logit_bias
    labels = 2 * np.eye(len(images)) - 1
    return float(np.sum(np.logaddexp(0, -labels * logits)) / len(images))


def test_sigmoid_loss_matches_numpy():
    generator = torch.Generator().manual_seed(5)
    v, t, v_synthetic, t_synthetic = (torch.randn(10, 16, generator=generator, dtype=torch.float64) for _ in range(4))
    scale, bias = torch.tensor(np.log(10.0)), torch.tensor(-10.0)
    expected_real = numpy_sigmoid_loss(v.numpy(), t.numpy(), float(scale), float(bias))
    assert float(sigmoid_contrastive_loss(v, t, scale, bias)) == pytest.approx(expected_real, rel=1e-6)
    output = pacs_contrastive_loss(
        v, t, v_synthetic, t_synthetic, logit_scale=scale, lambda_v=0.1, lambda_t=0.001, loss_type="sigmoid",
        logit_bias=bias,
    )  # fmt: skip
    expected = (
        expected_real
        + 0.1 * numpy_sigmoid_loss(v_synthetic.numpy(), t.numpy(), float(scale), float(bias))
        + 0.001 * numpy_sigmoid_loss(v.numpy(), t_synthetic.numpy(), float(scale), float(bias))
    )
    assert float(output.loss) == pytest.approx(expected, rel=1e-6)


def test_sigmoid_loss_needs_a_bias_and_a_known_loss_type():
    embeds = torch.randn(4, 8)
    with pytest.raises(ValueError, match="needs the backbone's logit_bias, which only SigLIP models have"):
        pacs_contrastive_loss(
            embeds, embeds, logit_scale=torch.tensor(1.0), lambda_v=0, lambda_t=0, loss_type="sigmoid"
        )
    with pytest.raises(ValueError, match=r"loss_type must be one of \['info_nce', 'sigmoid'\], got 'hinge'"):
        pacs_contrastive_loss(embeds, embeds, logit_scale=torch.tensor(1.0), lambda_v=0, lambda_t=0, loss_type="hinge")


# ----------------------------------------------------------------------------------------------------- training
@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """16 rows of coloured images with captions naming the colour, and a tiny SigLIP base model at 64 px."""
    root = tmp_path_factory.mktemp("siglip_training")
    (root / "images").mkdir()
    rng = np.random.default_rng(0)
    rows = []
    for index in range(NUM_ROWS):
        color = COLORS[index % len(COLORS)]
        for kind in ("real", "synthetic"):
            pixels = np.clip(np.array(RGB[color]) + rng.integers(-25, 26, (48, 56, 3)), 0, 255).astype(np.uint8)
            PIL.Image.fromarray(pixels).save(root / "images" / f"{kind}{index}.png")
        rows.append(
            {
                "image": str(root / "images" / f"real{index}.png"),
                "caption": f"a {color} picture",
                "synthetic_image": str(root / "images" / f"synthetic{index}.png"),
                "synthetic_caption": f"an image that is {color}",
            }
        )
    data = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(rows), "validation": datasets.Dataset.from_list(rows[:8])}
    )
    data.save_to_disk(str(root / "data"))
    config = tiny_siglip_config(build_siglip_tokenizer(), image_size=64)
    make_tiny_model(root / "base", variant="clip_s", clip_config=config, backbone="siglip", seed=0)
    return {"root": root, "data": data, "base": root / "base"}


@pytest.mark.parametrize("loss_type", ["info_nce", "sigmoid"])
def test_pacs_pp_on_siglip_lowers_the_loss_and_changes_only_lora(workspace, tmp_path, loss_type):
    model = load_base(workspace, "pac_s_pp")
    before = {name: value.clone() for name, value in model.state_dict().items()}
    trainer = make_trainer(model, "pac_s_pp", workspace["data"], tmp_path, loss_type=loss_type, max_steps=12)
    initial_loss = trainer.evaluate(trainer.train_dataset)["eval_loss"]
    trainer.train()
    final_loss = trainer.evaluate(trainer.train_dataset)["eval_loss"]
    assert final_loss < initial_loss - 0.01
    changed = {name for name, value in model.state_dict().items() if not torch.equal(before[name], value)}
    lora_names = {name for name in model.state_dict() if "lora_" in name}
    assert changed and changed <= lora_names
    assert {name for name in changed if "lora_B" in name} == {name for name in lora_names if "lora_B" in name}
    # Resolved for SigLIP: both towers' layers, the patch embedding and the pooling head's MLP are adapted; the
    # MultiheadAttention of the pooling head (whose weights it reads directly) is not.
    adapted = {name.split(".lora_")[0] for name in lora_names}
    assert "clip.vision_model.embeddings.patch_embedding" in adapted
    assert (
        "clip.vision_model.head.mlp.fc1" in adapted and "clip.text_model.encoder.layers.1.self_attn.q_proj" in adapted
    )
    assert not any(".head.attention" in name for name in adapted)
    assert len(adapted) == 2 * 2 * 6 + 2 + 1  # 2 towers x 2 layers x (q, k, v, out, fc1, fc2), head MLP, patches


def test_pac_s_on_siglip_trains_only_the_heads(workspace, tmp_path):
    model = load_base(workspace, "pac_s")
    before = {name: value.clone() for name, value in model.state_dict().items()}
    make_trainer(model, "pac_s", workspace["data"], tmp_path, max_steps=2).train()
    changed = {name for name, value in model.state_dict().items() if not torch.equal(before[name], value)}
    assert changed and all(name.startswith(("clip.vision_model.head.", "clip.text_model.head.")) for name in changed)
    assert {"clip.text_model.head.weight", "clip.vision_model.head.probe"} <= changed


def test_sigmoid_loss_on_clip_is_refused(workspace, tmp_path):
    model = prepare_model_for_training(make_tiny_model(variant="clip_s"), RECIPES["pac_s_pp"])
    with pytest.raises(ValueError, match="loss_type='sigmoid' needs a backbone with a logit_bias"):
        make_trainer(model, "pac_s_pp", workspace["data"], tmp_path, loss_type="sigmoid")


def test_train_script_from_a_plain_siglip_checkpoint(workspace, tmp_path):
    """`train_pacs.py --model_name_or_path <SigLIP checkpoint> --loss sigmoid` writes a Hub-ready PAC-S++ model."""
    base = PACSModel.from_pretrained(workspace["base"], dtype=torch.float32)
    plain = tmp_path / "google-siglip"  # a transformers SigLIP checkpoint, as google/siglip-* on the Hub
    base.clip.save_pretrained(plain)
    base.tokenizer.save_pretrained(plain)
    from modeling_pacs.cli import train_pacs

    output_dir = tmp_path / "run"
    train_pacs.main(
        ["--model_name_or_path", str(plain), "--dataset", str(workspace["root"] / "data"), "--loss", "sigmoid",
         "--output_dir", str(output_dir), "--max_steps", "2", "--per_device_train_batch_size", "8",
         "--use_cpu", "--report_to", "none", "--save_strategy", "no", "--eval_strategy", "no",
         "--disable_tqdm", "true"]
    )  # fmt: skip
    final = output_dir / "model"
    config = json.loads((final / "config.json").read_text())
    assert config["backbone_config"]["model_type"] == "siglip" and config["adapter_path"] == "adapter"
    assert (config["prompt_prefix"], config["max_text_length"], config["variant"]) == ("", 64, "pac_s_pp")
    adapter_config = json.loads((final / "adapter" / "adapter_config.json").read_text())
    assert adapter_config["exclude_modules"] == ["vision_model.head.attention.out_proj"]
    assert adapter_config["base_model_name_or_path"] == "google-siglip"  # the directory's name, never its path
    card = (final / "README.md").read_text()
    assert "SigLIP" in card and "base_model: " in card
    reloaded = PACSModel.from_pretrained(final, dtype=torch.float32)
    assert type(reloaded.clip).__name__ == "SiglipModel" and type(reloaded.tokenizer).__name__ == "SiglipTokenizer"
    with pytest.raises(SystemExit, match="--loss must be one of"):
        train_pacs.main(["--output_dir", str(tmp_path / "x"), "--loss", "hinge", "--dataset", "unused"])
