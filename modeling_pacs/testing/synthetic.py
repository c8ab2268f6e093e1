"""Tiny random BLIP captioner and Stable Diffusion pipeline, built in code and saved as real model folders.

For tests and offline smoke runs of `scripts/generate_synthetic.py`: they load through the same `from_pretrained`
calls as `Salesforce/blip-image-captioning-large` and `stable-diffusion-v1-5/stable-diffusion-v1-5`, with widths of
32 and 2 layers, so a caption or an image costs milliseconds on a CPU. Their outputs are meaningless.
"""

from pathlib import Path

import torch

from ..extras import require
from ..tokenization import build_clip_tokenizer

# A word-piece vocabulary for the tiny BLIP: BERT's special tokens, BLIP's decoder-start token and some words.
TINY_BLIP_WORDS = (
    "a picture of the an with on in at near man woman dog cat bus red blue green small large table street sits "
    "stands runs holding two people grass water sky tree"
).split()
TINY_BLIP_SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[DEC]"]


def make_tiny_blip(directory: str | Path, seed: int = 0, image_size: int = 32) -> Path:
    """Save a random `BlipForConditionalGeneration` + `BlipImageProcessorPil` + BERT tokenizer to `directory`.

    Example:

    ```python
    >>> import tempfile
    >>> from transformers import BlipForConditionalGeneration
    >>> folder = make_tiny_blip(tempfile.mkdtemp())
    >>> BlipForConditionalGeneration.from_pretrained(folder).config.text_config.hidden_size
    32
    ```
    """
    from transformers import BertTokenizer, BlipConfig, BlipForConditionalGeneration, BlipImageProcessorPil

    directory = Path(directory)
    vocab = {token: index for index, token in enumerate(TINY_BLIP_SPECIAL + TINY_BLIP_WORDS)}
    tokenizer = BertTokenizer(vocab=vocab, do_lower_case=True, bos_token="[DEC]", model_max_length=64)
    text_config = {
        "vocab_size": len(vocab),
        "hidden_size": 32,
        "intermediate_size": 37,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "max_position_embeddings": 64,
        "bos_token_id": vocab["[DEC]"],
        "sep_token_id": vocab["[SEP]"],
        "eos_token_id": vocab["[SEP]"],
        "pad_token_id": vocab["[PAD]"],
    }
    vision_config = {
        "hidden_size": 32,
        "intermediate_size": 37,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "image_size": image_size,
        "patch_size": 8,
    }
    torch.manual_seed(seed)
    model = BlipForConditionalGeneration(
        BlipConfig(text_config=text_config, vision_config=vision_config, projection_dim=32)
    ).eval()
    image_processor = BlipImageProcessorPil(size={"height": image_size, "width": image_size})
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    image_processor.save_pretrained(directory)
    return directory


def make_tiny_stable_diffusion(
    directory: str | Path, seed: int = 0, sample_size: int = 16, safety_checker: bool = True
) -> Path:
    """Save a random Stable Diffusion pipeline (UNet, VAE, CLIP text encoder with the real CLIP tokenizer, PNDM
    scheduler configured as SD v1.5's, safety checker and its image processor) to `directory`.

    Images are `2 * sample_size` pixels square (the tiny VAE halves the resolution).

    Example:

    ```python
    >>> import tempfile
    >>> from diffusers import StableDiffusionPipeline
    >>> pipeline = StableDiffusionPipeline.from_pretrained(make_tiny_stable_diffusion(tempfile.mkdtemp()))
    >>> pipeline.unet.config.cross_attention_dim
    32
    ```
    """
    require("diffusers", "generate", "The tiny Stable Diffusion")
    from diffusers import AutoencoderKL, PNDMScheduler, StableDiffusionPipeline, UNet2DConditionModel
    from diffusers.pipelines.stable_diffusion.safety_checker import StableDiffusionSafetyChecker
    from transformers import CLIPConfig, CLIPImageProcessorPil, CLIPTextConfig, CLIPTextModel

    torch.manual_seed(seed)
    unet = UNet2DConditionModel(
        block_out_channels=(32, 64),
        layers_per_block=1,
        sample_size=sample_size,
        in_channels=4,
        out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=32,
        norm_num_groups=32,
    )
    vae = AutoencoderKL(
        block_out_channels=(32, 64),
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 2,
        up_block_types=("UpDecoderBlock2D",) * 2,
        latent_channels=4,
        sample_size=2 * sample_size,
    )
    tokenizer = build_clip_tokenizer()
    text_encoder = CLIPTextModel(
        CLIPTextConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            intermediate_size=37,
            num_hidden_layers=2,
            num_attention_heads=4,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    )
    # SD v1.5's scheduler configuration (scheduler/scheduler_config.json on the Hub).
    scheduler = PNDMScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        num_train_timesteps=1000,
        set_alpha_to_one=False,
        skip_prk_steps=True,
        steps_offset=1,
    )
    checker, feature_extractor = None, None
    if safety_checker:
        small = {"hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 2, "num_attention_heads": 4}
        checker = StableDiffusionSafetyChecker(
            CLIPConfig(text_config=small, vision_config={**small, "image_size": 32, "patch_size": 8}, projection_dim=32)
        )
        feature_extractor = CLIPImageProcessorPil(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    pipeline = StableDiffusionPipeline(
        unet=unet.eval(),
        vae=vae.eval(),
        text_encoder=text_encoder.eval(),
        tokenizer=tokenizer,
        scheduler=scheduler,
        safety_checker=checker.eval() if checker is not None else None,
        feature_extractor=feature_extractor,
        requires_safety_checker=safety_checker,
    )
    pipeline.save_pretrained(directory)
    return Path(directory)


__all__ = ["make_tiny_blip", "make_tiny_stable_diffusion"]
