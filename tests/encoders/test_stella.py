"""StellaEncoder on Stella's real remote-code class: `Alibaba-NLP/new-impl`'s `NewConfig` / `NewModel`, loaded through
`AutoModel.from_pretrained(dir, trust_remote_code=True)` from a tiny directory laid out as the Hub copy of
`NovaSearch/stella_en_400M_v5` is (config.json with an `auto_map`, the two code files, model.safetensors, a BERT
tokenizer, `2_Dense_768/`).

This repository carries no third-party model code, so the `new-impl` files come from outside: the folder named by
`PACS_NEW_IMPL_DIR` (e.g. `hf download Alibaba-NLP/new-impl configuration.py modeling.py --local-dir D`),
or the Hub cache once Stella has been loaded on this machine. Without them the test is skipped and says why.
"""

import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, dynamic_module_utils
from transformers.dynamic_module_utils import get_class_from_dynamic_module

from modeling_pacs.encoders.stella import StellaEncoder, extended_attention_mask
from modeling_pacs.testing.pearl import TINY_VOCAB, write_bert_tokenizer
from tests.fixtures.pearl import one_torch_thread  # noqa: F401 (autouse fixture)

NEW_IMPL_FILES = ("configuration.py", "modeling.py")
# stella_en_400M_v5's config.json at width 32 (the same switches: RoPE with NTK scaling, packed QKV, unpadded
# xformers attention, two token types).
TINY_STELLA_SETTINGS = {
    "architectures": ["NewModel"],
    "auto_map": {"AutoConfig": "configuration.NewConfig", "AutoModel": "modeling.NewModel"},
    "model_type": "new",
    "vocab_size": len(TINY_VOCAB),
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.0,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "initializer_range": 0.2,
    "layer_norm_type": "layer_norm",
    "layer_norm_eps": 1e-12,
    "position_embedding_type": "rope",
    "rope_theta": 160000,
    "rope_scaling": {"type": "ntk", "factor": 2.0},
    "pack_qkv": True,
    "unpad_inputs": True,
    "use_memory_efficient_attention": True,
    "logn_attention_scale": False,
    "logn_attention_clip1": False,
    "pad_token_id": 0,
}
DENSE_OUT = 24


def new_impl_directory() -> Path | None:
    """A folder holding new-impl's configuration.py and modeling.py: PACS_NEW_IMPL_DIR, else the Hub cache."""
    if os.environ.get("PACS_NEW_IMPL_DIR"):
        return Path(os.environ["PACS_NEW_IMPL_DIR"])
    from huggingface_hub import try_to_load_from_cache

    found = [try_to_load_from_cache("Alibaba-NLP/new-impl", name) for name in NEW_IMPL_FILES]
    return Path(found[0]).parent if all(isinstance(path, str) for path in found) else None


@pytest.fixture(scope="module")
def tiny_stella_directory(tmp_path_factory):
    code = new_impl_directory()
    if code is None or not all((code / name).is_file() for name in NEW_IMPL_FILES):
        pytest.skip(
            "Alibaba-NLP/new-impl's configuration.py and modeling.py are not here: set PACS_NEW_IMPL_DIR to a folder "
            "holding them (hf download Alibaba-NLP/new-impl configuration.py modeling.py --local-dir D)"
        )
    # Everything below writes under tmp: the remote code's module copies (transformers' HF_MODULES_CACHE, by default
    # ~/.cache/huggingface/modules) and any Hub cache (HF_HOME). Only the new-impl files above are read from outside.
    isolated = tmp_path_factory.mktemp("hf_home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HOME", str(isolated))
        patch.setattr(dynamic_module_utils, "HF_MODULES_CACHE", str(isolated / "modules"))
        yield build_tiny_stella(code, tmp_path_factory.mktemp("stella_remote"))
    assert not any(Path(path).is_relative_to(Path.home() / ".cache") for path in stella_module_files())


def stella_module_files() -> list[str]:
    """Where the imported copies of the tiny Stella's remote code live."""
    return [
        module.__file__ for name, module in list(sys.modules.items())
        if name.startswith("transformers_modules") and "stella_remote" in name and getattr(module, "__file__", None)
    ]  # fmt: skip


def build_tiny_stella(code: Path, directory: Path) -> Path:
    for name in NEW_IMPL_FILES:
        shutil.copy(code / name, directory / name)
    # Build the weights with the padded attention (no xformers here), then write Stella's own switches.
    (directory / "config.json").write_text(json.dumps({**TINY_STELLA_SETTINGS, "unpad_inputs": False,
                                                       "use_memory_efficient_attention": False}))  # fmt: skip
    config = AutoConfig.from_pretrained(directory, trust_remote_code=True)
    torch.manual_seed(0)
    model_class = get_class_from_dynamic_module("modeling.NewModel", str(directory))
    save_file({name: tensor.contiguous() for name, tensor in model_class(config).state_dict().items()},
              directory / "model.safetensors", metadata={"format": "pt"})  # fmt: skip
    (directory / "config.json").write_text(json.dumps(TINY_STELLA_SETTINGS))
    write_bert_tokenizer(directory)
    dense = directory / "2_Dense_768"
    dense.mkdir()
    settings = {"in_features": 32, "out_features": DENSE_OUT, "bias": True,
                "activation_function": "torch.nn.modules.linear.Identity"}  # fmt: skip
    (dense / "config.json").write_text(json.dumps(settings))
    linear = torch.nn.Linear(32, DENSE_OUT)
    save_file(
        {"linear.weight": linear.weight.detach(), "linear.bias": linear.bias.detach()}, dense / "model.safetensors"
    )
    return directory


def test_stella_encoder_on_the_real_new_impl_class_matches_pooling_by_hand(tiny_stella_directory):
    directory = tiny_stella_directory
    encoder = StellaEncoder.from_pretrained(str(directory))
    model_class = type(encoder.model)
    assert (model_class.__name__, model_class.__module__.split(".")[0]) == ("NewModel", "transformers_modules")
    texts = ["a dog on the sofa", "two people riding horses in a field", "a cat"]
    features = encoder.encode_text(texts)  # one padded batch: masking goes through get_extended_attention_mask
    assert features.shape == (3, DENSE_OUT)

    # Independently: the class built by hand with the saved weights, each text alone (no padding, so no mask
    # bias: every position attends), then mean pooling, the Dense layer and L2 normalisation in NumPy.
    config = AutoConfig.from_pretrained(directory, trust_remote_code=True)
    config.use_memory_efficient_attention = config.unpad_inputs = False
    reference = get_class_from_dynamic_module("modeling.NewModel", str(directory))(config).eval()
    reference.load_state_dict(load_file(directory / "model.safetensors"), strict=True)
    reference.get_extended_attention_mask = lambda mask, shape: torch.zeros(mask.shape[0], 1, 1, mask.shape[1])
    dense = load_file(directory / "2_Dense_768" / "model.safetensors")
    weight, bias = dense["linear.weight"].numpy(), dense["linear.bias"].numpy()
    for row, text in enumerate(texts):
        tokens = encoder.tokenizer([text], return_tensors="pt")
        with torch.no_grad():
            hidden = reference(**tokens).last_hidden_state[0].numpy().astype(np.float64)
        projected = weight @ hidden.mean(axis=0) + bias
        np.testing.assert_allclose(features[row].numpy(), projected / np.linalg.norm(projected), rtol=0, atol=1e-5)


def test_transformers_4_attention_mask_for_remote_code():
    model = torch.nn.Linear(2, 2)
    model.dtype = torch.float32
    bias = extended_attention_mask(model, torch.tensor([[1, 1, 0], [1, 0, 0]]))
    minimum = np.finfo(np.float32).min
    assert bias.shape == (2, 1, 1, 3)
    np.testing.assert_array_equal(bias[:, 0, 0].numpy(), [[0, 0, minimum], [0, minimum, minimum]])
