"""BLIP-2 image-text-matching features (docs/spec/pearl.md#encoders): `Salesforce/blip2-itm-vit-g`, the LAVIS model
Pearl used.

Image: the Q-Former query outputs through `vision_projection`, L2-normalised: `[B, 32, 256]`.
Text: the `[CLS]` output through `text_projection`, L2-normalised: `[B, 256]`, after LAVIS' caption normalisation (A13).
"""

import json
import re
from pathlib import Path

import torch
from torch import nn
from transformers import AutoTokenizer, Blip2TextModelWithProjection, Blip2VisionModelWithProjection

from ..models.fast_clip import FastEncoderSlot, FastLayer, packed_linear_available, use_packed_linears
from ..models.inputs import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, ImageInput, check_positive_int
from .base import EMPTY_TEXT, batched_features, load_square_batch, replace_empty, token_counts, tokenize

# LAVIS `BlipCaptionProcessor` (eval): max_words 50; the Q-Former text length of blip2_image_text_matching is 32.
BLIP_MAX_WORDS = 50
BLIP_MAX_TEXT_LENGTH = 32


def blip_caption_normalise(caption: str, max_words: int | None = BLIP_MAX_WORDS) -> str:
    """LAVIS `BlipCaptionProcessor.pre_caption`: lowercase, drop `.!"()*#:;~`, collapse spaces, keep `max_words`
    (`None`: every word)."""
    caption = re.sub(r"([.!\"()*#:;~])", " ", caption.lower())
    caption = re.sub(r"\s{2,}", " ", caption)
    caption = caption.rstrip("\n").strip(" ")
    words = caption.split(" ")
    return " ".join(words[:max_words]) if max_words is not None and len(words) > max_words else caption


class FastBlip2Vision:
    """BLIP-2's ViT (EVA ViT-g/14 for `blip2-itm-vit-g`) on `fast_clip`'s packed layers: the post-layernorm hidden
    states of `Blip2VisionModel`, the same arithmetic (fused q/k/v, packed matrices, torch's exact `gelu` in place).
    The Q-Former reads every position, so every layer runs in full."""

    def __init__(self, vision: nn.Module):
        self.vision = vision
        with torch.no_grad():
            self.layers = [
                FastLayer.from_parts(
                    layer.self_attn.qkv,
                    layer.self_attn.projection,
                    layer.mlp.fc1,
                    layer.mlp.fc2,
                    "gelu",
                    layer.layer_norm1,
                    layer.layer_norm2,
                    layer.self_attn.num_heads,
                    layer.self_attn.scale,
                )
                for layer in vision.encoder.layers
            ]

    @classmethod
    def build(cls, vision: nn.Module) -> "FastBlip2Vision | None":
        """The fast ViT of a `Blip2VisionModel`, or None where it does not apply (device, dtype, activation)."""
        parameter = next(vision.parameters())
        if not packed_linear_available() or parameter.device.type != "cpu" or parameter.dtype != torch.float32:
            return None
        if vision.config.hidden_act != "gelu":
            return None
        for layer in vision.encoder.layers:
            linears = (layer.self_attn.qkv, layer.self_attn.projection, layer.mlp.fc1, layer.mlp.fc2)
            if any(type(linear) is not nn.Linear for linear in linears):
                return None
        try:
            return cls(vision)
        except RuntimeError:
            return None

    def __call__(self, pixel_values: torch.Tensor) -> torch.Tensor:
        hidden = self.vision.embeddings(pixel_values)
        for layer in self.layers:
            hidden = layer(hidden, causal=False)
        return self.vision.post_layernorm(hidden)


class BLIP2Encoder:
    """BLIP-2 ITM projections through transformers' `Blip2VisionModelWithProjection` / `Blip2TextModelWithProjection`.

    Example:

    ```python
    >>> from modeling_pacs.encoders import BLIP2Encoder
    >>> encoder = BLIP2Encoder.from_pretrained("Salesforce/blip2-itm-vit-g")  # needs the Hub or a local copy
    >>> encoder.encode_text(["a dog"]).shape
    torch.Size([1, 256])
    ```
    """

    max_text_length = BLIP_MAX_TEXT_LENGTH

    def __init__(
        self,
        vision_model: Blip2VisionModelWithProjection,
        text_model: Blip2TextModelWithProjection,
        tokenizer,
        name: str = "blip2",
        image_mean=OPENAI_CLIP_MEAN,
        image_std=OPENAI_CLIP_STD,
        empty_text: str | None = EMPTY_TEXT,
        batch_size: int = 32,
    ):
        self.vision_model = vision_model.eval()
        self.text_model = text_model.eval()
        use_packed_linears(self.vision_model)  # the Q-Former's and projections' products (the ViT: FastBlip2Vision)
        use_packed_linears(self.text_model)
        self.tokenizer = tokenizer
        self.name = name
        self.dim = vision_model.config.image_text_hidden_size
        self.tokens = vision_model.config.num_query_tokens
        self.image_size = vision_model.config.vision_config.image_size
        self.image_mean, self.image_std = tuple(image_mean), tuple(image_std)
        self.empty_text = empty_text
        self.batch_size = check_positive_int(batch_size, "batch_size")
        # On CPU in fp32 the ViT runs `FastBlip2Vision` (same features, less work); False: transformers' forward.
        self.fast_cpu_vision = True
        self._fast_vision = FastEncoderSlot(FastBlip2Vision.build)

    def image_embeds(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """`Blip2VisionModelWithProjection(pixel_values).image_embeds`: `[B, 32, dim]`, the ViT on the fast path
        where it applies (CPU, fp32, no gradients)."""
        model = self.vision_model
        fast = None
        if self.fast_cpu_vision and not model.training and not torch.is_grad_enabled():
            fast = self._fast_vision.get(model.vision_model)
        if fast is None:
            return model(pixel_values=pixel_values).image_embeds
        # The rest of Blip2VisionModelWithProjection.forward: the Q-Former's queries read every image position.
        image = fast(pixel_values)
        mask = torch.ones(image.shape[:-1], dtype=torch.long, device=image.device)
        queries = model.query_tokens.expand(image.shape[0], -1, -1)
        embeds = model.qformer(query_embeds=queries, encoder_hidden_states=image, encoder_attention_mask=mask)[0]
        return nn.functional.normalize(model.vision_projection(embeds.to(model.vision_projection.weight.dtype)), dim=-1)

    @classmethod
    def from_pretrained(
        cls, path: str, name: str = "blip2", device: str | None = None, empty_text: str | None = EMPTY_TEXT
    ) -> "BLIP2Encoder":
        vision = Blip2VisionModelWithProjection.from_pretrained(path, dtype=torch.float32).to(device or "cpu")
        text = Blip2TextModelWithProjection.from_pretrained(path, dtype=torch.float32).to(device or "cpu")
        mean, std = OPENAI_CLIP_MEAN, OPENAI_CLIP_STD
        processor_config = Path(path) / "preprocessor_config.json"
        if processor_config.is_file():
            settings = json.loads(processor_config.read_text())
            settings = settings.get("image_processor", settings)
            mean, std = settings.get("image_mean", mean), settings.get("image_std", std)
        return cls(vision, text, AutoTokenizer.from_pretrained(path), name, mean, std, empty_text)

    def encode_image(self, images: list[ImageInput], item_indices: list[int] | None = None) -> torch.Tensor:
        item_indices = item_indices or list(range(len(images)))

        def encode(rows: slice) -> torch.Tensor:
            pixels = load_square_batch(
                images[rows], item_indices[rows], self.image_size, self.image_mean, self.image_std
            )
            pixels = pixels.to(self.vision_model.device, self.vision_model.dtype)
            return self.image_embeds(pixels)

        return batched_features(len(images), self.batch_size, encode, (self.tokens, self.dim))

    def encode_text(self, texts: list[str]) -> torch.Tensor:
        texts = [blip_caption_normalise(text) for text in replace_empty(texts, self.empty_text)]

        def encode(rows: slice) -> torch.Tensor:
            tokens = tokenize(self.tokenizer, texts[rows], BLIP_MAX_TEXT_LENGTH, self.text_model.device)
            embeds = self.text_model(input_ids=tokens["input_ids"], attention_mask=tokens["attention_mask"])
            return embeds.text_embeds[:, 0]

        return batched_features(len(texts), 4 * self.batch_size, encode, (self.dim,))

    def truncated_tokens(self, texts: list[str]) -> torch.LongTensor:
        """Tokens of each text that the Q-Former does not read: those of the normalised caption (before LAVIS'
        50-word cut) minus the `min(32, ...)` tokens of the text `encode_text` tokenizes. Both cuts are the official
        preprocessing; a caption over 50 words is always over 32 tokens, so the 32-token context is what cuts."""
        texts = replace_empty(texts, self.empty_text)
        total = token_counts(self.tokenizer, [blip_caption_normalise(text, max_words=None) for text in texts])
        read = token_counts(self.tokenizer, [blip_caption_normalise(text) for text in texts])
        return total - read.clamp(max=BLIP_MAX_TEXT_LENGTH)
