"""The PAC-S++ SCST captioner: a 3 + 3 layer encoder-decoder Transformer on frozen CLIP grid features (Eq. 15).

Remote code: imports only torch, transformers and its own configuration. Generation (greedy and beam search) comes
from `GenerationMixin`; the decoder recomputes its prefix at each step (no key/value cache: captions are short).
"""

from dataclasses import dataclass

import torch
from torch import nn
from transformers import CLIPVisionModel, GenerationConfig, GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput
from transformers.utils import ModelOutput

from .configuration_captioner import PACSCaptionerConfig


@dataclass
class PACSCaptionerEncoderOutput(BaseModelOutput):
    """
    Output of [`PACSCaptionerEncoder`].

    Args:
        last_hidden_state (`torch.FloatTensor` of shape `(batch_size, num_features, hidden_size)`):
            The encoded visual features the decoder attends to.
    """


class PACSCaptionerEncoder(nn.Module):
    """Frozen CLIP visual encoder -> grid features before the last layer norm and projection -> Transformer layers."""

    main_input_name = "pixel_values"

    def __init__(self, config: PACSCaptionerConfig):
        super().__init__()
        self.vision_model = CLIPVisionModel(config.vision_config)
        self.vision_model.requires_grad_(False)
        self.input_projection = nn.Linear(config.vision_config.hidden_size, config.hidden_size)
        self.input_norm = nn.LayerNorm(config.hidden_size)
        self.dropout = nn.Dropout(config.dropout)
        layer = nn.TransformerEncoderLayer(
            config.hidden_size,
            config.num_attention_heads,
            config.intermediate_size,
            config.dropout,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )
        self.layers = nn.TransformerEncoder(layer, config.encoder_layers, enable_nested_tensor=False)

    def visual_features(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """Eq. 15's `e^1..e^R`: the last layer's tokens of the CLIP visual encoder, before `post_layernorm` and the
        projection (transformers' CLIP applies both only to the pooled token, so `last_hidden_state` is exactly it)."""
        with torch.no_grad():
            return self.vision_model(pixel_values=pixel_values).last_hidden_state

    def forward(
        self, pixel_values: torch.Tensor | None = None, visual_features: torch.Tensor | None = None, **kwargs
    ) -> PACSCaptionerEncoderOutput:
        if visual_features is None:
            if pixel_values is None:
                raise ValueError("pass pixel_values (preprocessed images) or visual_features (precomputed grids)")
            visual_features = self.visual_features(pixel_values)
        dtype = self.input_projection.weight.dtype
        hidden = self.dropout(self.input_norm(self.input_projection(visual_features.to(dtype))))
        return PACSCaptionerEncoderOutput(last_hidden_state=self.layers(hidden))


class PACSCaptionerPreTrainedModel(PreTrainedModel):
    config: PACSCaptionerConfig
    config_class = PACSCaptionerConfig
    base_model_prefix = "captioner"
    main_input_name = "pixel_values"
    input_modalities = ("image",)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, std=0.02)
        elif isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)


class PACSCaptionerForConditionalGeneration(PACSCaptionerPreTrainedModel, GenerationMixin):
    r"""
    The captioner of PAC-S++'s SCST experiments (Sec. 4.2): trained with cross-entropy (Eq. 16), then with SCST and
    PAC-S++ as reward (Eqs. 17-19). The CLIP visual encoder is frozen; pass `pixel_values` (the CLIP image pipeline)
    or precomputed `visual_features` (the grid of Eq. 15, e.g. from a feature cache).

    Example:

    ```python
    >>> import torch
    >>> from modeling_pacs.models.configuration_captioner import PACSCaptionerConfig
    >>> from modeling_pacs.models.modeling_captioner import PACSCaptionerForConditionalGeneration
    >>> vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4}
    >>> config = PACSCaptionerConfig(vision_config=vision, hidden_size=32, num_attention_heads=4, intermediate_size=64)
    >>> model = PACSCaptionerForConditionalGeneration(config).eval()
    >>> pixel_values = torch.randn(2, 3, 224, 224)
    >>> model.generate(pixel_values=pixel_values, num_beams=5, max_new_tokens=5).shape[0]
    2
    ```
    """

    _tied_weights_keys = {"lm_head.weight": "embed_tokens.weight"}

    def __init__(self, config: PACSCaptionerConfig):
        super().__init__(config)
        self.encoder = PACSCaptionerEncoder(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.embed_positions = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.dropout = nn.Dropout(config.dropout)
        layer = nn.TransformerDecoderLayer(
            config.hidden_size,
            config.num_attention_heads,
            config.intermediate_size,
            config.dropout,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )
        self.decoder = nn.TransformerDecoder(layer, config.decoder_layers)
        self.final_norm = nn.LayerNorm(config.hidden_size)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()
        # The CLIP tower keeps its own initialisation (and, in practice, pretrained weights).
        self.encoder.vision_model.requires_grad_(False)
        self.generation_config = GenerationConfig(
            bos_token_id=config.bos_token_id,
            eos_token_id=config.eos_token_id,
            pad_token_id=config.pad_token_id,
            decoder_start_token_id=config.decoder_start_token_id,
            max_new_tokens=20,
            use_cache=False,
        )

    @classmethod
    def from_clip(cls, clip: str | PreTrainedModel, **config_kwargs) -> "PACSCaptionerForConditionalGeneration":
        """A new captioner (random decoder) on the visual tower of a CLIP checkpoint: a Hub id or directory of a
        `CLIPModel` / `CLIPVisionModel` (e.g. `openai/clip-vit-base-patch32`), or a loaded one."""
        if isinstance(clip, str):
            clip = CLIPVisionModel.from_pretrained(clip, dtype=torch.float32)
        vision_model = clip if isinstance(clip, CLIPVisionModel) else clip.vision_model
        config = PACSCaptionerConfig(vision_config=vision_model.config.to_dict(), **config_kwargs)
        model = cls(config)
        model.encoder.vision_model.load_state_dict(vision_model.state_dict())
        return model

    @classmethod
    def from_pretrained(cls, *args, **kwargs) -> "PACSCaptionerForConditionalGeneration":
        model = super().from_pretrained(*args, **kwargs)
        # Loading materialises new parameters, which require gradients: the CLIP tower is frozen again (else DDP
        # waits for gradients it never gets, and optimizers hold the whole tower).
        model.encoder.vision_model.requires_grad_(False)
        return model

    def get_encoder(self, modality: str | None = None) -> PACSCaptionerEncoder:
        return self.encoder

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding):
        self.embed_tokens = value

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head

    def shift_right(self, labels: torch.Tensor) -> torch.Tensor:
        """Decoder inputs of teacher forcing: start token, then the labels without their last position."""
        shifted = labels.new_full(labels.shape, self.config.pad_token_id)
        shifted[:, 0] = self.config.decoder_start_token_id
        shifted[:, 1:] = labels[:, :-1]
        return shifted.masked_fill(shifted == -100, self.config.pad_token_id)

    def decode(
        self, decoder_input_ids: torch.Tensor, encoder_hidden_states: torch.Tensor, logits_to_keep: int = 0
    ) -> torch.Tensor:
        """Logits `[batch, length, vocab]` of the next token at every position (causal self-attention); only at the
        last `logits_to_keep` positions when it is > 0 (generation needs the last one)."""
        length = decoder_input_ids.shape[1]
        if length > self.config.max_position_embeddings:
            raise ValueError(
                f"decoder input of {length} tokens exceeds max_position_embeddings "
                f"({self.config.max_position_embeddings}): generate fewer tokens (max_new_tokens)"
            )
        positions = torch.arange(length, device=decoder_input_ids.device)
        hidden = self.dropout(self.embed_tokens(decoder_input_ids) + self.embed_positions(positions))
        causal_mask = nn.Transformer.generate_square_subsequent_mask(length, device=hidden.device, dtype=hidden.dtype)
        hidden = self.decoder(hidden, encoder_hidden_states, tgt_mask=causal_mask, tgt_is_causal=True)
        if logits_to_keep > 0:
            hidden = hidden[:, -logits_to_keep:]
        return self.lm_head(self.final_norm(hidden))

    def forward(
        self,
        pixel_values: torch.Tensor | None = None,
        visual_features: torch.Tensor | None = None,
        decoder_input_ids: torch.Tensor | None = None,
        encoder_outputs: ModelOutput | tuple | None = None,
        labels: torch.Tensor | None = None,
        logits_to_keep: int = 0,
        num_items_in_batch: int | torch.Tensor | None = None,
        **kwargs,
    ) -> Seq2SeqLMOutput:
        """Next-token logits; with `labels` (padding = -100), the cross-entropy of Eq. 16 averaged over tokens.

        `num_items_in_batch` (passed by transformers' `Trainer`: the target tokens of the whole optimisation step,
        over every gradient-accumulation micro-batch and every process) makes the loss the sum over this batch's
        tokens divided by it, so that accumulated and multi-process steps average over all the step's tokens exactly
        as one large batch would; without it the loss is this batch's token mean.

        `decoder_input_ids` may hold several rows per image (the beams of SCST, adjacent): the encoder runs once per
        image and its output is repeated for them.
        """
        if encoder_outputs is None:
            encoder_outputs = self.encoder(pixel_values=pixel_values, visual_features=visual_features)
        encoder_hidden_states = encoder_outputs[0]
        if decoder_input_ids is None:
            if labels is None:
                raise ValueError("pass decoder_input_ids, or labels for teacher forcing")
            decoder_input_ids = self.shift_right(labels)
        if decoder_input_ids.shape[0] != encoder_hidden_states.shape[0]:
            encoder_hidden_states = expand_to_rows(encoder_hidden_states, decoder_input_ids.shape[0])
        logits = self.decode(decoder_input_ids, encoder_hidden_states, logits_to_keep)
        loss = None
        if labels is not None:
            flat_logits, flat_labels = logits.flatten(0, 1).float(), labels.flatten()
            if num_items_in_batch is None:
                loss = nn.functional.cross_entropy(flat_logits, flat_labels, ignore_index=-100)
            else:
                total = nn.functional.cross_entropy(flat_logits, flat_labels, ignore_index=-100, reduction="sum")
                if torch.is_tensor(num_items_in_batch):
                    num_items_in_batch = num_items_in_batch.to(total.device)
                loss = total / num_items_in_batch
        return Seq2SeqLMOutput(loss=loss, logits=logits, encoder_last_hidden_state=encoder_hidden_states)

    def prepare_inputs_for_generation(self, input_ids: torch.Tensor, encoder_outputs=None, **kwargs) -> dict:
        # No key/value cache: the decoder re-reads the whole prefix at each step.
        return {"decoder_input_ids": input_ids, "encoder_outputs": encoder_outputs, "logits_to_keep": 1}


def expand_to_rows(encoder_hidden_states: torch.Tensor, num_rows: int) -> torch.Tensor:
    """Repeat each image's encoder states for its `num_rows / num_images` adjacent decoder rows."""
    num_images = encoder_hidden_states.shape[0]
    if num_rows % num_images:
        raise ValueError(
            f"{num_rows} decoder rows for {num_images} images: pass the same number of rows (beams) for every image"
        )
    return encoder_hidden_states.repeat_interleave(num_rows // num_images, dim=0)


__all__ = ["PACSCaptionerEncoder", "PACSCaptionerForConditionalGeneration", "PACSCaptionerPreTrainedModel"]
