"""BLIP-2 image-text-matching features (docs/spec/pearl.md#encoders): `Salesforce/blip2-itm-vit-g`, the LAVIS model
Pearl used.

Image: the Q-Former query outputs through `vision_projection`, L2-normalised: `[B, 32, 256]`.
Text: the `[CLS]` output through `text_projection`, L2-normalised: `[B, 256]`, after LAVIS' caption normalisation (A13).
"""

import json
import re
from pathlib import Path

import torch
from transformers import AutoTokenizer, Blip2TextModelWithProjection, Blip2VisionModelWithProjection

from ..models.inputs import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, ImageInput, check_positive_int
from .base import EMPTY_TEXT, batched_features, load_square_batch, replace_empty, tokenize

# LAVIS `BlipCaptionProcessor` (eval): max_words 50; the Q-Former text length of blip2_image_text_matching is 32.
BLIP_MAX_WORDS = 50
BLIP_MAX_TEXT_LENGTH = 32


def blip_caption_normalise(caption: str, max_words: int = BLIP_MAX_WORDS) -> str:
    """LAVIS `BlipCaptionProcessor.pre_caption`: lowercase, drop `.!"()*#:;~`, collapse spaces, keep `max_words`."""
    caption = re.sub(r"([.!\"()*#:;~])", " ", caption.lower())
    caption = re.sub(r"\s{2,}", " ", caption)
    caption = caption.rstrip("\n").strip(" ")
    words = caption.split(" ")
    return " ".join(words[:max_words]) if len(words) > max_words else caption


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
        self.tokenizer = tokenizer
        self.name = name
        self.dim = vision_model.config.image_text_hidden_size
        self.tokens = vision_model.config.num_query_tokens
        self.image_size = vision_model.config.vision_config.image_size
        self.image_mean, self.image_std = tuple(image_mean), tuple(image_std)
        self.empty_text = empty_text
        self.batch_size = check_positive_int(batch_size, "batch_size")

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
            return self.vision_model(pixel_values=pixels).image_embeds

        return batched_features(len(images), self.batch_size, encode, (self.tokens, self.dim))

    def encode_text(self, texts: list[str]) -> torch.Tensor:
        texts = [blip_caption_normalise(text) for text in replace_empty(texts, self.empty_text)]

        def encode(rows: slice) -> torch.Tensor:
            tokens = tokenize(self.tokenizer, texts[rows], BLIP_MAX_TEXT_LENGTH, self.text_model.device)
            embeds = self.text_model(input_ids=tokens["input_ids"], attention_mask=tokens["attention_mask"])
            return embeds.text_embeds[:, 0]

        return batched_features(len(texts), 4 * self.batch_size, encode, (self.dim,))
