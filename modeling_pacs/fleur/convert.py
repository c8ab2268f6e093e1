"""`pacs-pp convert-fleur`: a LLaVA-1.5 checkpoint in the original repository's layout (`liuhaotian/llava-v1.5-13b`:
`LlavaLlamaForCausalLM`, `model.mm_projector.*`, the vision tower named by `mm_vision_tower`) mapped to transformers'
`LlavaForConditionalGeneration`, the key mapping of transformers' `convert_llava_weights_to_hf.py`, and saved as a
FLEUR directory. A directory (or Hub id) already in transformers' layout (`llava-hf/llava-1.5-13b-hf`) is taken as is.

As the llava-hf checkpoints do, the tokenizer gains `<image>` and `<pad>` and the embeddings are padded to a multiple
of 64 (the new rows are the mean of the old ones); `FleurConfig.original_vocab_size` keeps the original vocabulary,
over which FLEUR's greedy choice and smoothing run.
"""

import json
import os
import warnings
from pathlib import Path

import torch

from ..errors import InputError
from ..output_paths import check_output_directory, staged_directory

# original name prefix -> transformers' (convert_llava_weights_to_hf.py's KEYS_TO_MODIFY_MAPPING, for the v5 layout)
KEY_MAPPING = (
    ("model.mm_projector.0.", "model.multi_modal_projector.linear_1."),
    ("model.mm_projector.2.", "model.multi_modal_projector.linear_2."),
    ("model.vision_tower.vision_tower.vision_model.", "model.vision_tower."),
    ("model.", "model.language_model."),
    ("lm_head.", "lm_head."),
)
PAD_MULTIPLE = 64  # llava-hf: model.resize_token_embeddings(..., pad_to_multiple_of=64)


def read_config(directory: Path) -> dict:
    path = directory / "config.json"
    if not directory.is_dir():
        raise InputError(f"LLaVA directory '{directory}' does not exist: pass the folder of a LLaVA-1.5 checkpoint")
    if not path.is_file():
        raise InputError(f"'{directory}' has no config.json: pass the folder of a LLaVA-1.5 checkpoint")
    return json.loads(path.read_text(encoding="utf-8"))


def layout_of(config: dict, source: str) -> str:
    """`"original"` (the LLaVA repository's), `"transformers"` (llava-hf's), or an error saying what it is."""
    architectures = config.get("architectures") or []
    if "LlavaLlamaForCausalLM" in architectures and "mm_vision_tower" in config:
        projector = config.get("mm_projector_type", "linear")
        if projector != "mlp2x_gelu":
            raise InputError(
                f"'{source}' is a LLaVA with the {projector!r} projector (LLaVA-1.0/1.1?): FLEUR asks LLaVA-1.5, whose "
                "projector is mlp2x_gelu (liuhaotian/llava-v1.5-13b)"
            )
        return "original"
    if config.get("model_type") == "llava" and "text_config" in config:
        return "transformers"
    raise InputError(
        f"'{source}' is not a LLaVA-1.5 checkpoint (model_type {config.get('model_type')!r}, architectures "
        f"{architectures}): pass liuhaotian/llava-v1.5-13b's folder or llava-hf/llava-1.5-13b-hf"
    )


def read_original_weights(directory: Path) -> dict[str, torch.Tensor]:
    """The state dict of a checkpoint folder: safetensors files, or `pytorch_model*.bin` read with
    `torch.load(weights_only=True)` (no code in them runs)."""
    safetensors = sorted(directory.glob("*.safetensors"))
    binaries = sorted(directory.glob("pytorch_model*.bin"))
    if not safetensors and not binaries:
        raise InputError(f"'{directory}' has no weights (*.safetensors or pytorch_model*.bin)")
    state = {}
    if safetensors:
        from safetensors.torch import load_file

        for path in safetensors:
            state.update(load_file(path))
    else:
        for path in binaries:
            state.update(torch.load(path, map_location="cpu", weights_only=True))
    return state


def map_key(key: str) -> str:
    for old, new in KEY_MAPPING:
        if key.startswith(old):
            return new + key[len(old) :]
    raise InputError(f"unexpected weight {key!r} in a LLaVA-1.5 checkpoint: is this a LLaVA-1.5 directory?")


def transformers_config(original: dict, vision_config: dict, image_token_id: int, vocab_size: int):
    from transformers import LlavaConfig

    text_fields = (
        "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "max_position_embeddings", "rms_norm_eps", "hidden_act", "bos_token_id", "eos_token_id", "rope_scaling",
        "initializer_range", "tie_word_embeddings",
    )  # fmt: skip
    text_config = {field: original[field] for field in text_fields if original.get(field) is not None}
    text_config.update(model_type="llama", vocab_size=vocab_size)
    select = original.get("mm_vision_select_feature", "patch")
    vision = {
        key: value for key, value in vision_config.items() if key not in ("architectures", "transformers_version")
    }
    vision["model_type"] = "clip_vision_model"
    patches = (vision["image_size"] // vision["patch_size"]) ** 2
    return LlavaConfig(
        text_config=text_config,
        vision_config=vision,
        image_token_id=image_token_id,
        projector_hidden_act="gelu",
        vision_feature_select_strategy="default" if select == "patch" else "full",
        vision_feature_layer=original.get("mm_vision_select_layer", -2),
        image_seq_length=patches if select == "patch" else patches + 1,
        tie_word_embeddings=bool(original.get("tie_word_embeddings", False)),
    )


def convert_original(directory: Path, vision_tower: str | None):
    """(LlavaForConditionalGeneration, tokenizer, image processor, original vocabulary size) of an original-layout
    checkpoint."""
    from transformers import AutoTokenizer, CLIPImageProcessorPil, CLIPVisionModel, LlavaForConditionalGeneration

    original = read_config(directory)
    tower = vision_tower or original["mm_vision_tower"]
    if not os.path.isdir(tower) and not tower.count("/") == 1:
        raise InputError(f"vision tower {tower!r} is neither a directory nor a Hub id: pass --vision-tower DIR")
    vision = CLIPVisionModel.from_pretrained(tower, dtype=torch.float32)
    image_processor = CLIPImageProcessorPil.from_pretrained(tower)
    with warnings.catch_warnings():  # it reads config.json, whose `rope_scaling: null` transformers 5 warns on
        warnings.simplefilter("ignore", FutureWarning)
        tokenizer = AutoTokenizer.from_pretrained(directory)
    original_vocab = int(original["vocab_size"])
    tokenizer.add_tokens(["<image>"], special_tokens=True)
    tokenizer.add_special_tokens({"pad_token": "<pad>"})
    image_token_id = tokenizer.convert_tokens_to_ids("<image>")
    padded = -(-len(tokenizer) // PAD_MULTIPLE) * PAD_MULTIPLE
    config = transformers_config(original, vision.config.to_dict(), image_token_id, padded)
    config.text_config.pad_token_id = tokenizer.pad_token_id
    state = {map_key(key): value for key, value in read_original_weights(directory).items()}
    for key, value in vision.state_dict().items():
        state["model.vision_tower." + key.removeprefix("vision_model.")] = value
    for key in ("model.language_model.embed_tokens.weight", "lm_head.weight"):
        weight = state[key].float()
        if weight.shape[0] != original_vocab:
            raise InputError(f"{key} has {weight.shape[0]} rows, the config's vocab_size is {original_vocab}")
        state[key] = torch.cat([weight, weight.mean(0, keepdim=True).expand(padded - original_vocab, -1)])
    with torch.device("meta"):
        model = LlavaForConditionalGeneration(config)
    expected = set(model.state_dict())
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise InputError(
            f"'{directory}' does not map onto LLaVA-1.5: missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    model.load_state_dict({key: value.float() for key, value in state.items()}, strict=True, assign=True)
    return model.eval(), tokenizer, image_processor, original_vocab


def load_transformers_llava(name_or_path: str, dtype=torch.float32, **kwargs):
    """(LlavaForConditionalGeneration, tokenizer, image processor, original vocabulary size) of a transformers-layout
    LLaVA: the original vocabulary is the tokenizer's without its added tokens (32000 for llava-hf's 32064 rows)."""
    from transformers import AutoImageProcessor, AutoTokenizer, CLIPImageProcessorPil, LlavaForConditionalGeneration

    model = LlavaForConditionalGeneration.from_pretrained(name_or_path, dtype=dtype, **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    try:
        image_processor = CLIPImageProcessorPil.from_pretrained(name_or_path)
    except OSError:
        image_processor = AutoImageProcessor.from_pretrained(name_or_path)
    return model.eval(), tokenizer, image_processor, min(tokenizer.vocab_size, model.config.text_config.vocab_size)


def fleur_model(llava, tokenizer, image_processor, original_vocab: int, source: str):
    from ..models.configuration_fleur import FleurConfig
    from ..models.modeling_fleur import FleurModel

    config = FleurConfig(llava_config=llava.config.to_dict(), llava_model=source, original_vocab_size=original_vocab)
    with torch.device("meta"):
        model = FleurModel(config)
    model.llava = llava
    return model.eval().attach_processors(tokenizer, image_processor)


def convert_llava(
    llava: str | os.PathLike, output_dir: str | os.PathLike, vision_tower: str | None = None, overwrite: bool = False
) -> Path:
    """Write a FLEUR directory from a LLaVA-1.5 checkpoint in the original layout, or in transformers' layout (a
    directory or a Hub id), and check that the saved directory loads back with the same weights."""
    from ..models.configuration_fleur import FleurConfig
    from ..models.modeling_fleur import FleurModel

    output_dir = Path(output_dir)
    source = Path(llava)
    check_output_directory(output_dir, inputs=[source], overwrite=overwrite)
    if source.exists():
        layout = layout_of(read_config(source), str(source))
    elif str(llava).count("/") == 1 and not str(llava).startswith((".", "/")):
        layout = "transformers"  # a Hub id
    else:
        raise InputError(f"LLaVA directory '{source}' does not exist: pass the folder of a LLaVA-1.5 checkpoint")
    if layout == "original":
        parts = convert_original(source, vision_tower)
    else:
        parts = load_transformers_llava(str(llava))
    model = fleur_model(*parts, source=str(llava))
    FleurConfig.register_for_auto_class()
    FleurModel.register_for_auto_class("AutoModel")
    with staged_directory(output_dir) as staging:
        model.save_pretrained(staging)
        reloaded = FleurModel.from_pretrained(staging, dtype=torch.float32)
        saved, expected = reloaded.state_dict(), model.state_dict()
        for key, value in expected.items():  # the transformers converters' allclose check
            if not torch.equal(saved[key], value):
                raise RuntimeError(f"{key} changed when saved and loaded back")
    return output_dir


__all__ = ["KEY_MAPPING", "convert_llava", "fleur_model", "layout_of", "load_transformers_llava", "map_key"]
