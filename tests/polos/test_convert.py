"""The released Polos checkpoint layout (Lightning 1.2 dict, callback states keyed by class, fp16 CLIP tensors)
converts safely and scores like a direct computation: original CLIP code, transformers' RoBERTa, NumPy mix and head."""

import os
import sys
import types
from contextlib import contextmanager

import numpy as np
import pytest
import torch
import yaml
from transformers import RobertaModel

from modeling_pacs import PolosModel
from modeling_pacs.cli import main as pacs_pp_main
from modeling_pacs.pacs.convert import CheckpointError
from modeling_pacs.polos.convert import load_polos_checkpoint
from modeling_pacs.testing.polos import build_tiny_roberta_tokenizer, tiny_roberta_config
from tests.fixtures.helpers import assert_scores_close, random_image
from tests.models.test_polos import numpy_features, numpy_scalar_mix
from tests.references.original_clip import (
    build_original_clip,
    original_clip_module,
    original_features,
    original_preprocess,
    original_tokenize,
)

HIDDEN_SIZES = [48, 24]
HPARAMS = {
    "model": "PolosEstimator",
    "encoder_model": "BERT",
    "pretrained_model": "princeton-nlp/sup-simcse-roberta-base",
    "layer": "mix",
    "scalar_mix_dropout": 0.1,
    "pool": "cls",
    "hidden_sizes": ",".join(map(str, HIDDEN_SIZES)),
    "activations": "Tanh",
    "dropout": 0.1,
    "final_activation": False,
    "batch_size": 64,
    "learning_rate": 3e-05,
    "loss": "mse",
    "monitor": "pearson",
}


@contextmanager
def fake_lightning():
    """Modules named like pytorch_lightning's callbacks, only while the test checkpoint is pickled."""
    names = ["pytorch_lightning", "pytorch_lightning.callbacks"]
    classes = {}
    for module_name, class_name in (("early_stopping", "EarlyStopping"), ("model_checkpoint", "ModelCheckpoint")):
        full_name = f"pytorch_lightning.callbacks.{module_name}"
        module = types.ModuleType(full_name)
        cls = type(class_name, (), {"__module__": full_name})
        setattr(module, class_name, cls)
        sys.modules[full_name] = module
        names.append(full_name)
        classes[class_name] = cls
    for name in names[:2]:
        sys.modules[name] = types.ModuleType(name)
    try:
        yield classes
    finally:
        for name in names:
            sys.modules.pop(name, None)


def released_state_dict(seed: int = 5):
    """Weights in the released key layout: paper-time fp16/fp32 CLIP split made by the original `convert_weights`."""
    clip = build_original_clip(activation="quick_gelu", seed=seed)
    original_clip_module("quick_gelu").convert_weights(clip)
    tokenizer = build_tiny_roberta_tokenizer()
    roberta_config = tiny_roberta_config(len(tokenizer))
    torch.manual_seed(seed)
    roberta = RobertaModel(roberta_config, add_pooling_layer=True)
    state = {f"clip.{key}": value for key, value in clip.state_dict().items()}
    state |= {
        f"encoder.model.{key}": value for key, value in roberta.state_dict().items() if "token_type_ids" not in key
    }
    generator = torch.Generator().manual_seed(seed)
    for index in range(roberta_config.num_hidden_layers + 1):
        state[f"scalar_mix.scalar_parameters.{index}"] = torch.randn(1, generator=generator)
    state["scalar_mix.gamma"] = torch.tensor([1.4])
    state["scalar_mix.dropout_mask"] = torch.zeros(roberta_config.num_hidden_layers + 1)
    state["scalar_mix.dropout_fill"] = torch.full((roberta_config.num_hidden_layers + 1,), -1e20)
    sizes = [4 * 32 + 6 * 32, *HIDDEN_SIZES, 1]
    for index, (inputs, outputs) in enumerate(zip(sizes[:-1], sizes[1:]), start=1):
        state[f"ff.0.ff.linear_{index}.weight"] = torch.randn(outputs, inputs, generator=generator) * 0.3
        state[f"ff.0.ff.linear_{index}.bias"] = torch.randn(outputs, generator=generator) * 0.1
    return state, roberta_config, tokenizer


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    folder = tmp_path_factory.mktemp("reprod")
    state, roberta_config, tokenizer = released_state_dict()
    encoder_dir = folder / "sup-simcse-roberta-base"
    roberta_config.save_pretrained(encoder_dir)
    tokenizer.save_pretrained(encoder_dir)
    with fake_lightning() as callbacks:
        checkpoint = {
            "epoch": 7,
            "global_step": 1234,
            "pytorch-lightning_version": "1.2.10",
            "state_dict": state,
            "callbacks": {
                callbacks["EarlyStopping"]: {"wait_count": 0, "stopped_epoch": 0, "best_score": torch.tensor(0.5)},
                callbacks["ModelCheckpoint"]: {"monitor": "pearson", "best_model_score": torch.tensor(0.5)},
            },
            "optimizer_states": [{"state": {}, "param_groups": [{"lr": 3e-5, "params": [0, 1]}]}],
            "lr_schedulers": [],
            "hparams_name": "hparams",
            "hyper_parameters": dict(HPARAMS),
        }
        torch.save(checkpoint, folder / "reprod.ckpt")
    (folder / "hparams.yaml").write_text(yaml.safe_dump(HPARAMS))
    output = folder.parent / "converted"
    code = pacs_pp_main(
        ["convert-polos", "--checkpoint", str(folder / "reprod.ckpt"), "--text-encoder", str(encoder_dir),
         "--output-dir", str(output), "--head-dim", "8"]
    )  # fmt: skip
    assert code == 0
    return {"folder": folder, "state": state, "config": roberta_config, "tokenizer": tokenizer, "output": output}


def direct_scores(state, roberta_config, tokenizer, images, candidates, references):
    """Per-item Polos with no port code: original CLIP, transformers RoBERTa, NumPy ScalarMix/features/head."""
    clip_state = {key.removeprefix("clip."): value.float() for key, value in state.items() if key.startswith("clip.")}
    pixels = torch.stack([original_preprocess(image) for image in images])
    flat = [reference for item in references for reference in item]
    tokens = original_tokenize(["A photo depicts " + text for text in candidates + flat])
    image_clip, text_clip = (features.double().numpy() for features in original_features(clip_state, pixels, tokens))
    roberta = RobertaModel(roberta_config, add_pooling_layer=True).eval()
    roberta.load_state_dict({key.removeprefix("encoder.model."): value for key, value in state.items()
                             if key.startswith("encoder.model.")}, strict=False)  # fmt: skip
    weights = np.array(
        [float(state[f"scalar_mix.scalar_parameters.{i}"]) for i in range(roberta_config.num_hidden_layers + 1)]
    )
    gamma = float(state["scalar_mix.gamma"])

    def sentence(text):
        ids = torch.tensor([tokenizer(text)["input_ids"]])
        with torch.no_grad():
            hidden = torch.stack(roberta(input_ids=ids, output_hidden_states=True).hidden_states).numpy()
        return numpy_scalar_mix(hidden, np.ones(ids.shape), weights, gamma, np.array([0]))[0, 0]

    layers = [(state[f"ff.0.ff.linear_{i}.weight"].double().numpy(), state[f"ff.0.ff.linear_{i}.bias"].double().numpy())
              for i in (1, 2, 3)]  # fmt: skip

    def head(features):
        hidden = features
        for weight, bias in layers[:-1]:
            hidden = np.tanh(hidden @ weight.T + bias)
        return 1 / (1 + np.exp(-(hidden @ layers[-1][0].T + layers[-1][1])[0]))

    scores, offset = [], len(candidates)
    for item, candidate in enumerate(candidates):
        pair = []
        for reference in references[item]:
            features = numpy_features(sentence(reference), sentence(candidate), image_clip[item], text_clip[item],
                                      text_clip[offset])  # fmt: skip
            pair.append(head(features))
            offset += 1
        scores.append(max(pair))
    return np.array(scores)


def test_released_layout_converts_and_scores_like_direct_computation(release):
    model = PolosModel.from_pretrained(release["output"], dtype=torch.float32).eval()
    images = [random_image(index, (240, 200 + 20 * index)) for index in range(3)]
    candidates = ["a cat on a sofa", "a dog running", "people on the beach"]
    references = [["a cat sleeping", "a cat"], ["a dog in the park"], ["two people", "a beach", "horses"]]
    expected = direct_scores(release["state"], release["config"], release["tokenizer"], images, candidates, references)
    assert_scores_close(model.score(images, candidates, references).scores, expected, atol=1e-5)
    # The fp16 CLIP tensors became fp32 holding the same values.
    clip_weight = model.clip_encoder.clip.visual_projection.weight
    assert clip_weight.dtype == torch.float32
    assert torch.equal(clip_weight, release["state"]["clip.visual.proj"].float().t())
    assert model.config.hidden_sizes == HIDDEN_SIZES and model.config.dropout == 0.1


def test_converted_directory_has_model_card_and_remote_code(release):
    files = sorted(path.name for path in release["output"].iterdir())
    for name in ("README.md", "config.json", "configuration_polos.py", "modeling_polos.py", "model.safetensors",
                 "clip_tokenizer", "text_tokenizer"):  # fmt: skip
        assert name in files
    card = (release["output"] / "README.md").read_text()
    assert "## Results reported by the authors (not re-measured here)" in card
    assert "| Polaris, Kendall tau-c | 57.8 |" in card and "float16/float32" in card
    assert oct((release["output"] / "model.safetensors").stat().st_mode & 0o777) == "0o644"


def test_lightning_globals_are_placeholders_and_code_never_runs(release, tmp_path, capsys):
    checkpoint = load_polos_checkpoint(release["folder"] / "reprod.ckpt")
    callback_classes = sorted(f"{cls.__module__}.{cls.__name__}" for cls in checkpoint["callbacks"])
    assert callback_classes == [
        "pytorch_lightning.callbacks.early_stopping.EarlyStopping",
        "pytorch_lightning.callbacks.model_checkpoint.ModelCheckpoint",
    ]
    assert "pytorch_lightning" not in sys.modules

    marker = tmp_path / "code-ran"

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    evil = tmp_path / "evil.ckpt"
    torch.save({"state_dict": dict(release["state"]), "payload": Exploit()}, evil)
    output = tmp_path / "out"
    assert pacs_pp_main(["convert-polos", "--checkpoint", str(evil), "--output-dir", str(output)]) == 2
    assert "refused to load" in capsys.readouterr().err
    assert not marker.exists() and not output.exists()


def test_wrong_keys_and_shapes_are_named(release, tmp_path):
    state = dict(release["state"])
    state.pop("scalar_mix.gamma")
    state["ff.0.ff.linear_2.bias"] = torch.zeros(7)
    state["encoder.model.extra.weight"] = torch.zeros(1)
    path = tmp_path / "bad.ckpt"
    torch.save({"state_dict": state}, path)
    (tmp_path / "hparams.yaml").write_text(yaml.safe_dump(HPARAMS))
    encoder = str(release["folder"] / "sup-simcse-roberta-base")
    from modeling_pacs.polos.convert import convert_polos_checkpoint

    with pytest.raises(CheckpointError, match=r"unexpected keys \(1\): extra.weight"):
        convert_polos_checkpoint(path, tmp_path / "out", text_encoder=encoder, head_dim=8, log=lambda _: None)
    state.pop("encoder.model.extra.weight")
    torch.save({"state_dict": state}, path)
    with pytest.raises(
        CheckpointError, match=r"(?s)part scalar_mix.\* \(ScalarMix\) .* 3 hidden states:.*missing keys \(1\): gamma"
    ):
        convert_polos_checkpoint(path, tmp_path / "out", text_encoder=encoder, head_dim=8, log=lambda _: None)
    state["scalar_mix.gamma"] = torch.tensor([1.0])
    torch.save({"state_dict": state}, path)
    with pytest.raises(CheckpointError, match=r"wrong shapes \(1\): ff.0.ff.linear_2.bias \(7,\) \(expected \(24,\)\)"):
        convert_polos_checkpoint(path, tmp_path / "out", text_encoder=encoder, head_dim=8, log=lambda _: None)
    hparams = dict(HPARAMS)
    hparams.pop("final_activation")
    (tmp_path / "hparams.yaml").write_text(yaml.safe_dump(hparams))
    with pytest.raises(CheckpointError, match="hparams lack 'final_activation'"):
        convert_polos_checkpoint(path, tmp_path / "out", text_encoder=encoder, head_dim=8, log=lambda _: None)
    assert not (tmp_path / "out").exists()


def test_existing_output_needs_overwrite(release, capsys):
    code = pacs_pp_main(
        [
            "convert-polos",
            "--checkpoint",
            str(release["folder"] / "reprod.ckpt"),
            "--output-dir",
            str(release["output"]),
        ]
    )
    assert code == 2
    assert "exists and is not empty: choose another, or pass --overwrite" in capsys.readouterr().err


@pytest.mark.parametrize("hidden_sizes", ["2304,1152", [2304, 1152]])
def test_hparams_hidden_sizes_forms(hidden_sizes):
    from modeling_pacs.polos.convert import check_hparams

    settings = check_hparams({"final_activation": False, "hidden_sizes": hidden_sizes})
    assert settings["hidden_sizes"] == [2304, 1152]
    assert settings["pretrained_model"] == "princeton-nlp/sup-simcse-roberta-base"
    with pytest.raises(CheckpointError, match="hparams 'hidden_sizes' 'a,b' is not a comma-separated list of ints"):
        check_hparams({"final_activation": False, "hidden_sizes": "a,b"})
    with pytest.raises(CheckpointError, match=r"hparams 'layer' is 12: only 'mix' \(the released Polos\) is supported"):
        check_hparams({"final_activation": False, "layer": 12})
