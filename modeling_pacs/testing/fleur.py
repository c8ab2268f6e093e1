"""Tiny LLaVA-1.5 judges for FLEUR, built offline: a sentencepiece tokenizer trained here (digits are single tokens,
as in Llama's), a tiny CLIP vision tower saved as its own directory, and a tiny Llama with the `mlp2x_gelu`
projector, saved in the layout of the original LLaVA repository (`liuhaotian/llava-v1.5-13b`: `LlavaLlamaForCausalLM`,
`model.mm_projector.*`, `mm_vision_tower`), which `pacs-pp convert-fleur` maps to transformers' layout.

The weights are random but shaped: the language model is mostly a bigram table (the residual stream carries the
current token's embedding to `lm_head`, the layers add a context-dependent perturbation), so that greedy answers are
short numbers such as `0.85` and end with `</s>`. With `forks=True` some steps have two equally strong next tokens,
and the context (image, caption) decides between them: most answers parse, some do not (`1.8`, `A`), which the
parity fixture needs.
"""

import io
import json
from pathlib import Path

import torch

from ..models.inputs import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD

SYSTEM_PROMPT = (
    "A chat between a curious human and an artificial intelligence assistant. The assistant gives helpful, detailed, "
    "and polite answers to the human's questions."
)
TRAINING_TEXT = (
    SYSTEM_PROMPT,
    "Your task is to evaluate and rate the caption on a scale of 0.0 to 1.0 based on the given Grading Criteria.",
    "(Print Real Number Score ONLY) Grading Criteria: 0.0: The caption does not describe the image at all.",
    "1.0: The caption accurately and clearly describes the image. Caption: Score(Choose a rating from 0.0 to 1.0):",
    "USER: ASSISTANT: Reference Captions: Candidate Caption: Why? Tell me the reason.",
    "a red circle on a white background, a blue square, a green triangle, a dog runs on the grass",
    "0 1 2 3 4 5 6 7 8 9 0.85 0.5 1.0",
)
TEXT_WIDTH = 64
VISION_WIDTH = 32
IMAGE_SIZE = 56
PATCH_SIZE = 14


def build_tokenizer_model(vocab_size: int = 400) -> bytes:
    """A BPE sentencepiece model like Llama's (byte fallback, split digits, `<unk>`/`<s>`/`</s>` = 0/1/2)."""
    from ..extras import require

    sentencepiece = require("sentencepiece", "siglip", "Building the tiny LLaVA tokenizer")
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(TRAINING_TEXT * 3), model_writer=model, model_type="bpe", vocab_size=vocab_size,
        split_digits=True, byte_fallback=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1, add_dummy_prefix=True,
        normalization_rule_name="identity", remove_extra_whitespaces=False, allow_whitespace_only_pieces=True,
        character_coverage=1.0, minloglevel=2,
    )  # fmt: skip
    return model.getvalue()


def save_tokenizer(directory: Path) -> None:
    """`tokenizer.model` + the `tokenizer_config.json` of liuhaotian/llava-v1.5-13b (a slow `LlamaTokenizer`)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tokenizer.model").write_bytes(build_tokenizer_model())
    config = {
        "add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
        "pad_token": None, "clean_up_tokenization_spaces": False, "legacy": False, "model_max_length": 2048,
        "padding_side": "right", "sp_model_kwargs": {}, "tokenizer_class": "LlamaTokenizer",
    }  # fmt: skip
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    special = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    (directory / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n", encoding="utf-8")


def save_vision_tower(directory: Path, seed: int) -> None:
    """A tiny `CLIPVisionModel` with its `CLIPImageProcessor` (the role of openai/clip-vit-large-patch14-336)."""
    from transformers import CLIPImageProcessorPil, CLIPVisionConfig, CLIPVisionModel

    torch.manual_seed(seed)
    config = CLIPVisionConfig(
        hidden_size=VISION_WIDTH, intermediate_size=2 * VISION_WIDTH, num_hidden_layers=2, num_attention_heads=4,
        image_size=IMAGE_SIZE, patch_size=PATCH_SIZE, projection_dim=VISION_WIDTH,
    )  # fmt: skip
    CLIPVisionModel(config).save_pretrained(directory)
    # the released towers' keys (openai/clip-vit-large-patch14-336) start with `vision_model.`, which transformers 4.x
    # (the original LLaVA code's) needs and transformers 5 reads too
    from safetensors.torch import load_file, save_file

    weights = load_file(directory / "model.safetensors")
    prefixed = {
        key if key.startswith("vision_model.") else f"vision_model.{key}": value for key, value in weights.items()
    }
    save_file(prefixed, directory / "model.safetensors", metadata={"format": "pt"})
    processor = CLIPImageProcessorPil(
        size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        image_mean=list(OPENAI_CLIP_MEAN), image_std=list(OPENAI_CLIP_STD),
    )  # fmt: skip
    processor.save_pretrained(directory)
    # the original LLaVA code reads it with transformers 4.x's CLIPImageProcessor: name that class
    path = directory / "preprocessor_config.json"
    content = json.loads(path.read_text(encoding="utf-8"))
    content["image_processor_type"] = "CLIPImageProcessor"
    path.write_text(json.dumps(content, indent=2) + "\n", encoding="utf-8")


def piece_id(processor, piece: str) -> int:
    index = processor.piece_to_id(piece)
    if processor.id_to_piece(index) != piece:
        raise ValueError(f"the tiny tokenizer has no piece {piece!r}")
    return index


def shaped_weights(
    vocab: "object",
    seed: int,
    forks: bool,
    context_scale: float,
    fork_strength: float,
    width: int = TEXT_WIDTH,
    layers: int = 2,
) -> dict[str, torch.Tensor]:
    """The language model's and projector's weights, in the original LLaVA names (`model.layers.0...`)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    generator = torch.Generator().manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab.get_piece_size(), hidden_size=width, intermediate_size=2 * width,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=1024,
    )  # fmt: skip
    torch.manual_seed(seed)
    state = {name: tensor.clone() for name, tensor in LlamaForCausalLM(config).state_dict().items()}
    embeddings = torch.randn(config.vocab_size, width, generator=generator)
    state["model.embed_tokens.weight"] = embeddings
    for name in state:  # the layers perturb the residual stream: the context moves the logits a little
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            state[name] = torch.randn(state[name].shape, generator=generator) * context_scale / width**0.5
        elif name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "gate_proj.weight", "up_proj.weight")):
            state[name] = torch.randn(state[name].shape, generator=generator) / width**0.5
    head = torch.randn(config.vocab_size, width, generator=generator) * 0.02
    unit = embeddings / embeddings.norm(dim=-1, keepdim=True)
    ids = {piece: piece_id(vocab, piece) for piece in ("▁", ":", "0", "1", ".", "5", "8", "▁A")}
    eos = vocab.eos_id()
    transitions = [(":", "▁", 1.2), ("▁", "0", 1.2), ("0", ".", 1.2), (".", "8", 1.2), ("8", "5", 1.2), ("5", eos, 1.2)]
    if forks:  # nearly as strong alternatives: the context decides
        alternatives = [(":", "▁A"), ("▁A", eos), ("▁", "1"), ("1", "."), (".", "5"), ("8", eos), ("0", eos)]
        transitions += [(current, following, fork_strength) for current, following in alternatives]
    for current, following, strength in transitions:
        following = following if isinstance(following, int) else ids[following]
        head[following] += strength * unit[ids[current]]
    state["lm_head.weight"] = head
    state["model.mm_projector.0.weight"] = torch.randn(width, VISION_WIDTH, generator=generator) * 0.2
    state["model.mm_projector.0.bias"] = torch.zeros(width)
    state["model.mm_projector.2.weight"] = torch.randn(width, width, generator=generator) * 0.2
    state["model.mm_projector.2.bias"] = torch.zeros(width)
    return {name: tensor.contiguous() for name, tensor in state.items() if "rotary_emb" not in name}


def make_tiny_original_llava(
    directory: str | Path,
    seed: int = 0,
    forks: bool = False,
    context_scale: float = 1.0,
    fork_strength: float = 1.1,
    width: int = TEXT_WIDTH,
    layers: int = 2,
) -> Path:
    """Save a tiny LLaVA-1.5 in the original repository's layout: `directory/` (config, `pytorch_model.bin`,
    tokenizer) and its vision tower in `directory/vision_tower/` (named by `mm_vision_tower`, as an absolute path)."""
    from ..extras import require

    sentencepiece = require("sentencepiece", "siglip", "Building the tiny LLaVA tokenizer")
    directory = Path(directory)
    save_tokenizer(directory)
    save_vision_tower(directory / "vision_tower", seed)
    vocab = sentencepiece.SentencePieceProcessor(model_file=str(directory / "tokenizer.model"))
    state = shaped_weights(vocab, seed, forks, context_scale, fork_strength, width, layers)
    torch.save(state, directory / "pytorch_model.bin")
    config = {
        "architectures": ["LlavaLlamaForCausalLM"], "model_type": "llava", "_name_or_path": "tiny-llava-v1.5",
        "hidden_size": width, "intermediate_size": 2 * width, "num_hidden_layers": layers,
        "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": vocab.get_piece_size(),
        "max_position_embeddings": 1024, "max_sequence_length": 1024, "rms_norm_eps": 1e-5, "hidden_act": "silu",
        "initializer_range": 0.02, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
        "tie_word_embeddings": False, "use_cache": True, "torch_dtype": "float32", "pretraining_tp": 1,
        "rope_scaling": None, "freeze_mm_mlp_adapter": False, "image_aspect_ratio": "pad",
        "mm_hidden_size": VISION_WIDTH, "mm_projector_type": "mlp2x_gelu", "mm_use_im_patch_token": False,
        "mm_use_im_start_end": False, "mm_vision_select_feature": "patch", "mm_vision_select_layer": -2,
        "mm_vision_tower": str((directory / "vision_tower").resolve()), "tune_mm_mlp_adapter": False,
        "use_mm_proj": True,
    }  # fmt: skip
    (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return directory


def make_tiny_fleur(directory: str | Path, seed: int = 0) -> Path:
    """A converted tiny FLEUR directory (the one `tiny:fleur` loads): the original layout, then `convert-fleur`."""
    import tempfile

    from ..fleur.convert import convert_llava

    with tempfile.TemporaryDirectory() as original:
        make_tiny_original_llava(Path(original) / "llava", seed=seed)
        convert_llava(Path(original) / "llava", directory)
    return Path(directory)


def make_tiny(directory: str | Path, variant: str, backbone: str, seed: int) -> None:
    """The registry's tiny builder of FLEUR (`TinyModels.builder`)."""
    make_tiny_fleur(directory, seed=seed)


__all__ = ["make_tiny", "make_tiny_fleur", "make_tiny_original_llava"]
