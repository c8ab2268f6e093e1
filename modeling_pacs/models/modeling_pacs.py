"""PAC-S++: a CLIP dual encoder with LoRA adapters (loaded through PEFT) that scores image-caption pairs.

The whole model is in this file: loading (weights, tokenizer, adapter), encoding (deduplicated, batched, sorted by
length so padding stays small) and scoring (through the pure functions of `scoring.py`).
"""

import json
import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
from transformers import AutoModel, AutoTokenizer, PreTrainedModel
from transformers.utils import ModelOutput, logging

from .artifacts import (
    CorruptArtifactError,
    check_adapter_directory,
    check_model_directory,
    explain_load_errors,
    warn_if_random_weights,
)
from .backbones import (
    backbone_family,
    backbone_spec,
    embedding_dim,
    encode_image_batch,
    encode_text_batch,
    image_preprocessor,
)
from .configuration_pacs import PACSConfig
from .fast_clip import FastCLIPEncoders, FastEncoderSlot
from .inputs import (
    TRUNCATION_FIX,
    ImageInput,
    LongCaptionWarning,
    check_captions,
    check_long_captions,
    check_media_count,
    check_media_list,
    check_positive_int,
    check_references,
    deduplicate,
    image_key,
    plan_caption_pieces,
    prefetch_batches,
    prepare_caption,
    sentence_starts,
    untruncated_token_ids,
)
from .scoring import (
    cosine_similarity,
    harmonic_mean,
    max_reference_similarity,
    mean_or_nan,
    reference_free_score,
    token_weighted_mean,
)
from .video_scoring import VideoScoringMixin

logger = logging.get_logger(__name__)

# Above this many items a progress bar is shown unless `progress=False`.
PROGRESS_THRESHOLD = 512
# Captions are tokenised and sorted by length in chunks of about this many (a multiple of the batch size).
TEXT_CHUNK_SIZE = 8192


@dataclass
class PACSTextFeatures(ModelOutput):
    """
    Text features of [`PACSModel.encode_texts`][modeling_pacs.PACSModel.encode_texts].

    Args:
        text_embeds (`torch.FloatTensor` of shape `(batch_size, projection_dim)`):
            Projected hidden state at the end-of-text position (the caption embedding `E_t(t)`).
        token_embeds (`torch.FloatTensor` of shape `(batch_size, sequence_length, projection_dim)`, *optional*):
            `text_projection(final_layer_norm(hidden_states))` at every position
            ([docs/spec/pacs.md#video](../spec/pacs.md#video), Eq. 8), unnormalised; for SigLIP, its text `head` at
            every position (the pooled embedding is the last position's).
        attention_mask (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            1 from start-of-text through end-of-text, 0 on padding.
        input_ids (`torch.LongTensor` of shape `(batch_size, sequence_length)`, *optional*):
            The token ids, padded with the end-of-text id.
    """

    text_embeds: torch.FloatTensor | None = None
    token_embeds: torch.FloatTensor | None = None
    attention_mask: torch.LongTensor | None = None
    input_ids: torch.LongTensor | None = None


@dataclass
class PACSScoreOutput(ModelOutput):
    """
    Scores of [`PACSModel.score`][modeling_pacs.PACSModel.score], per item and for the corpus.

    Args:
        scores (`torch.FloatTensor` of shape `(num_items,)`):
            Reference-free score of each item (Eq. 4): CLIP-S, PAC-S or PAC-S++ depending on the variant.
        mean_score (`float`):
            Corpus score: the mean of `scores`.
        ref_scores (`torch.FloatTensor` of shape `(num_items,)`, *optional*):
            Reference-based score of each item (Eq. 5), when references were given.
        mean_ref_score (`float`, *optional*):
            The mean of `ref_scores`.
        image_text_cosines (`torch.FloatTensor` of shape `(num_items,)`):
            Raw cosine between image and candidate embeddings (before clipping and w).
        reference_similarities (`torch.FloatTensor` of shape `(num_items,)`, *optional*):
            `max(0, max_r cos(candidate, r))`, the second term of the harmonic mean.
        truncated_tokens (`torch.LongTensor` of shape `(num_items,)`):
            Tokens of each candidate the text encoder did not read (past its context; 0 for a caption that fits,
            and with `long_captions="chunks"` unless one word alone is longer than the context).
        truncated_reference_tokens (`torch.LongTensor` of shape `(num_items,)`, *optional*):
            The same, summed over each item's references.
        num_pieces (`torch.LongTensor` of shape `(num_items,)`):
            How many pieces each candidate was read in: 1 unless `long_captions="chunks"` split it.
    """

    scores: torch.FloatTensor | None = None
    mean_score: float | None = None
    ref_scores: torch.FloatTensor | None = None
    mean_ref_score: float | None = None
    image_text_cosines: torch.FloatTensor | None = None
    reference_similarities: torch.FloatTensor | None = None
    truncated_tokens: torch.LongTensor | None = None
    truncated_reference_tokens: torch.LongTensor | None = None
    num_pieces: torch.LongTensor | None = None


@dataclass
class CaptionSplit:
    """Captions cut into pieces (`PACSModel.split_long_captions`): each piece's text, the caption it belongs to and
    the tokens it reads first (its weight); per caption, the tokens no piece reads and the number of pieces."""

    texts: list[str]
    owner: list[int]
    new_tokens: list[int]
    dropped_tokens: list[int]
    num_pieces: list[int]

    def append(self, owner: int, text: str, new_tokens: int):
        self.texts.append(text)
        self.owner.append(owner)
        self.new_tokens.append(new_tokens)


def warn_truncation(
    truncated: torch.Tensor,
    context_length: int | str,
    what: str = "captions",
    fix: str = TRUNCATION_FIX,
    stacklevel: int = 4,
):
    """Warn, naming the fix, when a caption was truncated (`truncated`: tokens dropped per item). The text is the same
    on every call, so Python shows it once per line that calls `score` / `score_videos`: a loop warns once.
    `context_length` is the encoder's context in tokens, or a phrase naming several ("the text encoders' contexts
    (...)"); `fix` is what to do instead (`TRUNCATION_FIX`, or `SHORTEN_FIX` for models without a piecewise mode)."""
    if bool((truncated > 0).any()):
        context = (
            f"the text encoder's {context_length}-token context" if isinstance(context_length, int) else context_length
        )
        warnings.warn(
            f"some {what} are longer than {context} and were truncated "
            f"(`truncated_tokens` counts the dropped tokens of each item): {fix}",
            LongCaptionWarning,
            stacklevel=stacklevel,
        )


def missing_weights_message(name_or_path: str) -> str:
    """How to get weights when a model is neither a local directory nor reachable on the Hub."""
    looks_like_path = name_or_path.startswith((".", "/", "~")) or "\\" in name_or_path or name_or_path.count("/") > 1
    if looks_like_path:
        problem = f"'{name_or_path}' is not an existing model directory"
    else:
        problem = (
            f"'{name_or_path}' is not a local model directory and the Hugging Face Hub did not provide it "
            "(offline, unreachable, or no such repository)"
        )
    return (
        f"could not load PAC-S++ model: {problem}. To get weights: download a Hub repository on a machine with "
        "internet (`hf download REPO_ID --local-dir DIR`) and pass DIR; or convert "
        "an official checkpoint with `pacs-pp convert --checkpoint FILE --variant ... --output-dir DIR` (pip install "
        "pacs-pp) and pass DIR; or, for an offline smoke test with random weights, run `pacs-pp make-tiny DIR`."
    )


def hub_download_kwargs(kwargs: dict) -> dict:
    """The `from_pretrained` keyword arguments that also apply to the tokenizers and adapters of the same repo."""
    names = ("cache_dir", "revision", "token", "local_files_only", "force_download", "proxies")
    return {key: kwargs[key] for key in names if key in kwargs}


def load_or_explain(load, name_or_path: str, message):
    """`load()`, but a model that is neither a local directory nor on the Hub raises `OSError(message(name))`."""
    try:
        return load()
    except OSError as error:
        if Path(name_or_path).is_dir():
            raise
        raise OSError(message(name_or_path)) from error
    except ValueError as error:  # huggingface_hub's HFValidationError for strings that are not repo ids
        if Path(name_or_path).exists() or "repo" not in str(error).lower():
            raise
        raise OSError(message(name_or_path)) from error


class PACSPreTrainedModel(PreTrainedModel):
    config: PACSConfig
    config_class = PACSConfig
    base_model_prefix = "pacs"
    main_input_name = "pixel_values"
    input_modalities = ("image", "text")
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flash_attn = True
    _no_split_modules = ["CLIPEncoderLayer"]

    def _init_weights(self, module):
        # The backbone knows how to initialise its own modules.
        self.clip._init_weights(module)


class PACSModel(VideoScoringMixin, PACSPreTrainedModel):
    r"""
    PAC-S++ (and CLIP-S / PAC-S): scores how well a caption describes an image.

    `from_pretrained` loads the dual encoder, its tokenizer and, if `config.adapter_path` is set, the LoRA adapter
    through PEFT (merged into the weights unless `config.merge_adapter=False`).

    Example:

    ```python
    >>> from transformers import AutoModel
    >>> model = AutoModel.from_pretrained("path/to/pacs-pp-model", trust_remote_code=True, dtype="float32")
    >>> out = model.score(["cat.jpg"], ["a cat sleeping on a sofa"], references=[["a cat on a couch"]])
    >>> out.scores, out.ref_scores, out.mean_score
    ```
    """

    # True for a model whose config merges its adapter but that was loaded with `merge_adapter=False` (as
    # `evaluate_captions` loads, so that a backbone equal to another model's can be stored once): `merge_adapter()`
    # merges it where it is not shared.
    merge_deferred = False

    def __init__(self, config: PACSConfig):
        super().__init__(config)
        self.clip = AutoModel.from_config(config.backbone_config)
        self.tokenizer = None
        # An optional `cache.EmbeddingCache`: when set, encode_texts / encode_images encode only what it lacks.
        self.embedding_cache = None
        # CLIP towers on CPU in fp32 encode through `fast_clip` (same embeddings, less work); False: transformers'.
        self.fast_cpu_encoders = True
        self._fast_encoders = FastEncoderSlot()
        # `(mean, std)` of the image pipeline when it is not the backbone family's (a metric built on an OpenCLIP
        # LAION checkpoint sets (0.5, 0.5) as open_clip does for that tag); None: the family's.
        self.image_normalisation = None
        self.post_init()

    # ------------------------------------------------------------------------------------------------ loading
    @classmethod
    def from_pretrained(
        cls,
        pretrained_model_name_or_path,
        *model_args,
        load_adapter: bool = True,
        merge_adapter: bool | None = None,
        **kwargs,
    ):
        """Load weights, tokenizer and (when `config.adapter_path` is set) the PEFT adapter, merged into the weights
        when `merge_adapter` says so (None: as `config.merge_adapter` says). A model whose config merges its adapter
        but that is loaded with `merge_adapter=False` has `merge_deferred` set; `merge_adapter()` merges it."""
        name_or_path = os.fspath(pretrained_model_name_or_path)
        hub_kwargs = hub_download_kwargs(kwargs)
        check_model_directory(name_or_path)
        with explain_load_errors(name_or_path):
            model = load_or_explain(
                lambda: super(PACSModel, cls).from_pretrained(name_or_path, *model_args, **kwargs),
                name_or_path,
                missing_weights_message,
            )
        # Passing the backbone config keeps AutoTokenizer from resolving (and prompting for) our remote config.
        model.tokenizer = AutoTokenizer.from_pretrained(name_or_path, config=model.config.backbone_config, **hub_kwargs)
        check_tokenizer(model.tokenizer, model.config.backbone_config, name_or_path)
        if load_adapter and model.config.adapter_path:
            merge = model.config.merge_adapter if merge_adapter is None else merge_adapter
            model.load_lora_adapter(name_or_path, merge=merge, **hub_kwargs)
            model.merge_deferred = model.config.merge_adapter and not merge
        warn_if_random_weights(model.config, name_or_path, logger)
        return model

    @classmethod
    def from_clip(cls, clip_name_or_path: str, variant: str = "clip_s", **kwargs) -> "PACSModel":
        """Wrap a plain transformers CLIP checkpoint (e.g. `openai/clip-vit-base-patch32`): CLIP-S / RefCLIP-S."""
        from transformers import CLIPModel

        hub_kwargs = hub_download_kwargs(kwargs)
        clip = load_or_explain(
            lambda: CLIPModel.from_pretrained(clip_name_or_path, **kwargs), clip_name_or_path, missing_weights_message
        )
        config = PACSConfig(backbone_config=clip.config, variant=variant, adapter_path=None)
        model = cls(config)
        model.clip = clip
        model.tokenizer = AutoTokenizer.from_pretrained(clip_name_or_path, **hub_kwargs)
        check_tokenizer(model.tokenizer, config.backbone_config, clip_name_or_path)
        return model.eval()

    @classmethod
    def from_siglip(cls, siglip_name_or_path: str, variant: str = "clip_s", **kwargs) -> "PACSModel":
        """Wrap a plain transformers SigLIP checkpoint (e.g. `google/siglip-base-patch16-224`, or a fixed-resolution
        SigLIP 2 one such as `google/siglip2-base-patch16-224`) with SigLIP's own pipelines (`backbones.py`)."""
        from transformers import AutoConfig

        hub_kwargs = hub_download_kwargs(kwargs)

        def load_siglip():
            backbone_family(AutoConfig.from_pretrained(siglip_name_or_path, **hub_kwargs))  # refuses NaFlex first
            return AutoModel.from_pretrained(siglip_name_or_path, **kwargs)

        siglip = load_or_explain(load_siglip, siglip_name_or_path, missing_weights_message)
        base_model_id = siglip_name_or_path
        if Path(siglip_name_or_path).is_dir():
            base_model_id = Path(siglip_name_or_path).resolve().name  # never a local path in a published adapter
            logger.warning(
                f"base_model_id is '{base_model_id}' (the directory's name): set config.base_model_id to the "
                "backbone's Hub id before publishing an adapter trained on it"
            )
        config = PACSConfig(
            backbone_config=siglip.config, variant=variant, adapter_path=None, base_model_id=base_model_id
        )
        model = cls(config)
        model.clip = siglip
        model.tokenizer = AutoTokenizer.from_pretrained(siglip_name_or_path, **hub_kwargs)
        if type(model.tokenizer).__name__.startswith("Gemma"):
            # A SigLIP 2 checkpoint: it was trained on lowercased text, which the Hub's GemmaTokenizer does not do and
            # transformers' Siglip2Tokenizer (same vocabulary) does.
            from transformers import Siglip2Tokenizer

            model.tokenizer = Siglip2Tokenizer.from_pretrained(siglip_name_or_path, **hub_kwargs)
        return model.eval()

    def merge_adapter(self) -> None:
        """Merge an unmerged adapter into the backbone's weights (what loading does unless `merge_adapter=False`)."""
        if self.peft_model is not None:
            self.clip = self.peft_model.merge_and_unload()
            self.config.adapter_path = None
            self._peft_model = None
        self.merge_deferred = False

    def load_lora_adapter(self, model_name_or_path: str, merge: bool = True, **hub_kwargs):
        """Load the PEFT LoRA adapter of `config.adapter_path` into the backbone; merge it unless `merge=False`.

        `adapter_path` is an absolute path, or a sub-folder of `model_name_or_path` (a local directory or a Hub
        repository). A relative path is never resolved against the current directory: scoring from inside another
        model's folder must not pick up that folder's adapter.
        """
        from peft import PeftModel

        adapter_path = self.config.adapter_path
        if Path(adapter_path).is_absolute():
            if not Path(adapter_path).is_dir():
                raise OSError(f"the LoRA adapter folder '{adapter_path}' named by the config does not exist")
            location, subfolder = adapter_path, None
        elif Path(model_name_or_path).is_dir():
            local_candidate = Path(model_name_or_path) / adapter_path
            if not local_candidate.is_dir():
                raise OSError(
                    f"the config of '{model_name_or_path}' names a LoRA adapter at '{adapter_path}', which does not "
                    f"exist in that folder ('{local_candidate}'): restore the adapter folder, or set `adapter_path` "
                    "to null if the weights are already merged"
                )
            location, subfolder = str(local_candidate), None
        else:
            location, subfolder = model_name_or_path, adapter_path
        peft_kwargs = dict(hub_kwargs)
        if subfolder:
            peft_kwargs["subfolder"] = subfolder
        local_adapter = Path(location) / (subfolder or "")
        other_base = None
        if local_adapter.is_dir():
            module_names = {name for name, _ in self.clip.named_modules()}
            check_adapter_directory(local_adapter, module_names)
            other_base = adapter_base_model(local_adapter, self.config.base_model_id)
        try:
            peft_model = PeftModel.from_pretrained(self.clip, location, **peft_kwargs)
        except (ValueError, RuntimeError) as error:  # PEFT's NoMatchingPeftModuleError, a size mismatch, ...
            if not local_adapter.is_dir() or isinstance(error, CorruptArtifactError):
                raise
            problem = f"PEFT could not load the adapter ({type(error).__name__}: {str(error).strip().splitlines()[0]})"
            if other_base is not None:
                problem = (
                    f"the adapter was trained on '{other_base}', but this model's backbone is "
                    f"'{self.config.base_model_id}' (config base_model_id), and its weights do not fit: {problem}"
                )
            raise CorruptArtifactError(local_adapter / "adapter_config.json", problem) from error
        if other_base is not None:  # the shapes fit (e.g. two checkpoints of one architecture): load, but say so
            logger.warning(
                f"the LoRA adapter '{local_adapter}' was trained on '{other_base}', but this model's backbone is "
                f"'{self.config.base_model_id}' (config base_model_id): the scores are those of neither model unless "
                "the two are the same checkpoint; use the adapter with its own backbone"
            )
        if merge:
            self.clip = peft_model.merge_and_unload()
            # The weights now contain the adapter: saving this model must not apply it a second time.
            self.config.adapter_path = None
            self._peft_model = None
        else:
            self._peft_model = peft_model
        return peft_model

    @property
    def peft_model(self):
        """The PEFT wrapper of the backbone while an adapter is attached unmerged, else `None`."""
        return self.__dict__.get("_peft_model")

    def __setattr__(self, name, value):
        # The PEFT wrapper stays out of the module tree: it shares its layers with `self.clip`.
        if name == "_peft_model":
            self.__dict__["_peft_model"] = value
            return
        super().__setattr__(name, value)

    def base_state_dict(self) -> dict[str, torch.Tensor]:
        """State dict without LoRA tensors: with an unmerged adapter, the base weights under their plain names."""
        state_dict = {}
        for key, value in self.state_dict().items():
            if "lora_" in key:
                continue
            state_dict[key.replace(".base_layer.", ".")] = value
        return state_dict

    def save_pretrained(self, save_directory, **kwargs):
        """Save config, weights, tokenizer and, with an unmerged adapter, the adapter in `config.adapter_path`."""
        save_directory = Path(save_directory)
        if self.peft_model is not None:
            kwargs.setdefault("state_dict", self.base_state_dict())
        super().save_pretrained(save_directory, **kwargs)
        if self.peft_model is not None:
            adapter_directory = save_directory / self.config.adapter_path
            self.peft_model.save_pretrained(adapter_directory)
            set_adapter_base_model(adapter_directory, self.config.base_model_id)
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(save_directory)
        make_world_readable(save_directory)

    # ------------------------------------------------------------------------------------------------ encoding
    def tokenize(self, captions: list[str], prompt_prefix: str | None = None) -> dict[str, torch.Tensor]:
        """Prefix, clean and tokenize captions; truncate keeping end-of-text last.

        CLIP: captions are cleaned as the original tokenizer does and padded to the longest. SigLIP: captions are
        passed as given and padded to `max_text_length`, as the model was trained (`backbones.py`). The attention
        mask marks the real tokens (SigLIP's text tower is run without it). `prompt_prefix` replaces
        `config.prompt_prefix` when given (the video metric tokenizes without it).
        """
        if self.tokenizer is None:
            raise ValueError(
                "this PACSModel has no tokenizer: load it with from_pretrained, or set model.tokenizer = "
                "AutoTokenizer.from_pretrained(...)"
            )
        return self.tokenizer(
            self.prepare_texts(captions, prompt_prefix),
            padding=backbone_spec(self.config.backbone_config).text_padding,
            truncation=True,
            max_length=self.config.max_text_length,
            return_tensors="pt",
            return_attention_mask=True,
        )

    def prepare_texts(self, captions: list[str], prompt_prefix: str | None = None) -> list[str]:
        """The strings the tokenizer reads: the prompt prefix prepended, then CLIP's cleaning where it applies."""
        prefix = self.config.prompt_prefix if prompt_prefix is None else prompt_prefix
        if backbone_spec(self.config.backbone_config).clean_text:
            return [prepare_caption(caption, prefix) for caption in captions]
        return [prefix + caption for caption in captions]

    def count_tokens(self, captions: list[str], prompt_prefix: str | None = None) -> torch.LongTensor:
        """How many tokens each caption has before truncation, special tokens and the prompt prefix included."""
        if not captions:
            return torch.zeros(0, dtype=torch.long)
        token_ids = untruncated_token_ids(self.tokenizer, self.prepare_texts(captions, prompt_prefix))
        return torch.tensor([len(ids) for ids in token_ids], dtype=torch.long)

    def truncated_tokens(self, captions: list[str], prompt_prefix: str | None = None) -> torch.LongTensor:
        """How many tokens of each caption the encoder drops: those past `config.max_text_length` (0 if it fits)."""
        return (self.count_tokens(captions, prompt_prefix) - self.config.max_text_length).clamp(min=0)

    def split_long_captions(self, captions: list[str], prompt_prefix: str | None = None) -> CaptionSplit:
        """Cut each caption longer than the context into pieces that each fit (`inputs.plan_caption_pieces`).

        A caption that fits is one piece, itself. A longer one is read first as today (truncated), then from later
        sentence starts; every piece gets the prompt prefix, as any caption does. Counts are in tokens of each
        whitespace word tokenized alone, which add up to the caption's tokens for CLIP's and SigLIP's tokenizers.
        """
        counts = self.count_tokens(captions, prompt_prefix).tolist()
        prefix = self.config.prompt_prefix if prompt_prefix is None else prompt_prefix
        prefix_tokens = len(
            untruncated_token_ids(self.tokenizer, self.prepare_texts([""], prefix), add_special_tokens=False)[0]
        )
        capacity = self.config.max_text_length - self.tokenizer.num_special_tokens_to_add() - prefix_tokens
        if capacity < 1:
            raise ValueError(
                f"the prompt prefix {prefix!r} fills the whole {self.config.max_text_length}-token context: no room "
                "is left for caption pieces; use a shorter prompt_prefix"
            )
        split = CaptionSplit(texts=[], owner=[], new_tokens=[], dropped_tokens=[], num_pieces=[])
        for item, (caption, count) in enumerate(zip(captions, counts)):
            words = caption.split()
            pieces, dropped = [], 0
            if count > self.config.max_text_length:
                spaced = [word if index == 0 else " " + word for index, word in enumerate(words)]
                word_ids = untruncated_token_ids(
                    self.tokenizer, self.prepare_texts(spaced, ""), add_special_tokens=False
                )
                word_tokens = [len(ids) for ids in word_ids]
                pieces, dropped = plan_caption_pieces(word_tokens, sentence_starts(words), capacity)
            if len(pieces) <= 1:
                split.append(item, caption, 1)
            else:
                split.append(item, caption, pieces[0].new_tokens)
                for piece in pieces[1:]:
                    split.append(item, " ".join(words[piece.first_word : piece.end_word]), piece.new_tokens)
            split.dropped_tokens.append(dropped if len(pieces) > 1 else max(0, count - self.config.max_text_length))
            split.num_pieces.append(max(1, len(pieces)))
        return split

    def encode_texts(
        self,
        captions: list[str],
        batch_size: int = 256,
        return_tokens: bool = False,
        progress: bool | None = None,
        prompt_prefix: str | None = None,
    ) -> torch.Tensor | PACSTextFeatures:
        """Projected end-of-text embeddings `E_t(t)` of `[N, projection_dim]` (unnormalised, fp32).

        With `return_tokens=True`, returns a [`PACSTextFeatures`][modeling_pacs.PACSTextFeatures] that also holds the
        projected embedding of every
        token (padded to the longest caption) for fine-grained video scoring. Captions are sorted by length into
        batches, so each batch pads little; padding changes results only at float rounding level (<= 1e-6).
        """
        captions = check_captions(captions, "caption")
        batch_size = check_positive_int(batch_size, "text batch_size")
        cache = self.embedding_cache
        if cache is not None and not return_tokens and prompt_prefix is None and not cache.is_filling():
            return cache.encode(
                self,
                "text",
                captions,
                lambda missing: self.encode_texts([captions[i] for i in missing], batch_size, progress=progress),
            )
        chunk_size = batch_size * max(1, TEXT_CHUNK_SIZE // batch_size)
        if not return_tokens and len(captions) > chunk_size:
            # Tokenising all captions at once holds every tokenizer Encoding (~6 KiB each): stream chunks instead.
            text_embeds = torch.empty(len(captions), embedding_dim(self.config.backbone_config))
            starts = range(0, len(captions), chunk_size)
            for start in self.progress_bar(starts, "encoding texts", len(captions), progress):
                chunk = captions[start : start + chunk_size]
                text_embeds[start : start + len(chunk)] = self.encode_texts(
                    chunk, batch_size, progress=False, prompt_prefix=prompt_prefix
                )
            return text_embeds
        tokens = self.tokenize(captions, prompt_prefix) if captions else None
        if tokens is None:
            empty = torch.zeros(0, embedding_dim(self.config.backbone_config))
            return PACSTextFeatures(text_embeds=empty) if return_tokens else empty
        lengths = tokens["attention_mask"].sum(dim=1)
        order = torch.argsort(lengths, descending=True, stable=True)
        text_embeds = torch.empty(len(captions), embedding_dim(self.config.backbone_config))
        family = backbone_family(self.config.backbone_config)
        # SigLIP pools the last position: its texts keep the length they were tokenised to.
        trim_padding = backbone_spec(self.config.backbone_config).text_padding == "longest"
        full_length = tokens["input_ids"].shape[1]
        token_embeds = None
        if return_tokens:
            token_embeds = torch.zeros(len(captions), tokens["input_ids"].shape[1], text_embeds.shape[1])
        batches = list(torch.split(order, batch_size))
        fast = None if return_tokens else self.fast_encoders()
        with torch.inference_mode():
            for batch in self.progress_bar(batches, "encoding texts", len(captions), progress):
                length = int(lengths[batch].max()) if trim_padding else full_length
                input_ids = tokens["input_ids"][batch, :length].to(self.device)
                attention_mask = tokens["attention_mask"][batch, :length].to(self.device)
                if fast is not None:
                    pooled, projected = fast.encode_texts(input_ids), None
                else:
                    pooled, projected = encode_text_batch(self.clip, family, input_ids, attention_mask, return_tokens)
                text_embeds[batch] = pooled.float().cpu()
                if return_tokens:
                    token_embeds[batch, :length] = projected.float().cpu()
        if not return_tokens:
            return text_embeds
        return PACSTextFeatures(
            text_embeds=text_embeds,
            token_embeds=token_embeds,
            attention_mask=tokens["attention_mask"],
            input_ids=tokens["input_ids"],
        )

    def encode_images(
        self,
        images: list[ImageInput],
        batch_size: int = 64,
        progress: bool | None = None,
        num_workers: int | None = None,
        item_indices: list[int] | None = None,
    ) -> torch.Tensor:
        """Projected image embeddings `E_v(v)` of `[N, projection_dim]` (unnormalised, fp32).

        Images are decoded and preprocessed in a thread pool (PIL releases the GIL) while the encoder runs.
        `item_indices` are the indices that error messages name (default: positions in `images`).
        """
        images = list(images)
        batch_size = check_positive_int(batch_size, "image batch_size")
        if num_workers is not None:
            num_workers = check_positive_int(num_workers, "num_workers")
        item_indices = item_indices or list(range(len(images)))
        cache = self.embedding_cache
        if cache is not None and not cache.is_filling():
            return cache.encode(
                self,
                "image",
                images,
                lambda missing: self.encode_images(
                    [images[i] for i in missing], batch_size, progress, num_workers, [item_indices[i] for i in missing]
                ),
            )
        preprocess = image_preprocessor(self.config.backbone_config, self.image_normalisation)
        embeds = torch.empty(len(images), embedding_dim(self.config.backbone_config))
        num_workers = num_workers or min(8, os.cpu_count() or 1)
        starts = range(0, len(images), batch_size)
        dtype = self.clip.vision_model.embeddings.patch_embedding.weight.dtype
        encode = self.image_batch_encoder()
        with ThreadPoolExecutor(max_workers=num_workers) as pool, torch.inference_mode():
            batches = [range(start, min(start + batch_size, len(images))) for start in starts]
            loaded = prefetch_batches(pool, lambda i: preprocess(images[i], item_indices[i]), batches)
            for start in self.progress_bar(starts, "encoding images", len(images), progress):
                indices = range(start, min(start + batch_size, len(images)))
                pixels = next(loaded)
                pixel_values = torch.stack(pixels).to(device=self.device, dtype=dtype)
                embeds[start : start + len(indices)] = encode(pixel_values).float().cpu()
        return embeds

    # ------------------------------------------------------------------------------------------------ scoring
    def score(
        self,
        images: list[ImageInput],
        candidates: list[str],
        references: list[list[str]] | None = None,
        image_batch_size: int = 64,
        text_batch_size: int = 256,
        progress: bool | None = None,
        long_captions: str = "truncate",
    ) -> PACSScoreOutput:
        """Score each candidate caption against its image (Eq. 4) and, with references, Eq. 5.

        Args:
            images: one image per candidate: paths, bytes, PIL images, NumPy arrays (HxWxC), torch tensors (CxHxW)
                or `datasets.Image` dicts, by the rules of
                [docs/concepts/image-inputs.md](../concepts/image-inputs.md) (anything else raises an
                `ImageInputError` naming the item). Repeated images (same path, same bytes or array content, same
                PIL object) are encoded once.
            candidates: one caption per image. Empty captions are scored (the prompt prefix alone is encoded).
            references: optional, one non-empty list of reference captions per candidate.
            long_captions: `"truncate"` (the official behaviour: the encoder reads the first `max_text_length`
                tokens; `truncated_tokens` says how many it dropped and a warning names the fix) or `"chunks"`:
                captions and references longer than the context are read in pieces and their scores combined by a
                token-weighted mean ([docs/guides/long-captions.md](../guides/long-captions.md)). Captions that
                fit keep their `"truncate"` scores: bit for bit when nothing in the call is split, else within fp32
                rounding (other batches).

        Returns:
            [`PACSScoreOutput`][modeling_pacs.PACSScoreOutput] with per-item scores and their corpus means.
        """
        candidates = check_captions(candidates)
        image_batch_size = check_positive_int(image_batch_size, "image_batch_size")
        text_batch_size = check_positive_int(text_batch_size, "text_batch_size")
        check_long_captions(long_captions)
        images = check_media_list(images)
        check_media_count(images, candidates)
        if references is not None:
            references = check_references(references, len(candidates))
        candidate_split = reference_splits = None
        if long_captions == "chunks":
            candidate_split = self.split_long_captions(candidates)
            if references is not None:
                reference_splits = [self.split_long_captions(item_references) for item_references in references]
            if len(candidate_split.texts) > len(candidates) or any(
                len(split.texts) > len(split.num_pieces) for split in reference_splits or []
            ):
                return self.score_in_pieces(
                    images, candidate_split, reference_splits, image_batch_size, text_batch_size, progress
                )
        output = self.score_truncated(images, candidates, references, image_batch_size, text_batch_size, progress)
        if candidate_split is not None:  # every caption fits: the scores above are the chunk mode's
            output.truncated_tokens = torch.tensor(candidate_split.dropped_tokens, dtype=torch.long)
            if reference_splits is not None:
                output.truncated_reference_tokens = torch.tensor(
                    [sum(split.dropped_tokens) for split in reference_splits], dtype=torch.long
                )
            return output
        output.truncated_tokens, output.truncated_reference_tokens = self.count_truncation(candidates, references)
        return output

    def count_truncation(
        self,
        candidates: list[str],
        references: list[list[str]] | None,
        prompt_prefix: str | None = None,
        fix: str = TRUNCATION_FIX,
    ) -> tuple[torch.LongTensor, torch.LongTensor | None]:
        """Tokens each candidate loses to truncation, and those its references lose (summed per item; `None`
        without references); one `LongCaptionWarning` naming `fix` for each kind of text that lost any."""
        truncated = self.truncated_tokens(candidates, prompt_prefix)
        warn_truncation(truncated, self.config.max_text_length, fix=fix)
        if references is None:
            return truncated, None
        per_reference = self.truncated_tokens([text for item in references for text in item], prompt_prefix)
        warn_truncation(per_reference, self.config.max_text_length, "references", fix=fix)
        owner = torch.tensor([item for item, texts in enumerate(references) for _ in texts], dtype=torch.long)
        return truncated, torch.zeros(len(candidates), dtype=torch.long).index_add(0, owner, per_reference)

    def score_in_pieces(
        self,
        images: list[ImageInput],
        candidate_split: CaptionSplit,
        reference_splits: list[CaptionSplit] | None,
        image_batch_size: int,
        text_batch_size: int,
        progress: bool | None,
    ) -> PACSScoreOutput:
        """`long_captions="chunks"`: score every piece as a caption of its item's image, then combine per item.

        Eq. 4 and the clipped best reference cosine are token-weighted means over the candidate's pieces; a piece's
        best reference cosine is taken over every piece of every reference of its item; Eq. 5 is the harmonic mean
        of the two means ([docs/guides/long-captions.md](../guides/long-captions.md)).
        """
        owner = torch.tensor(candidate_split.owner, dtype=torch.long)
        new_tokens = torch.tensor(candidate_split.new_tokens, dtype=torch.long)
        piece_references = None
        if reference_splits is not None:
            piece_references = [reference_splits[item].texts for item in candidate_split.owner]
        pieces = self.score_truncated(
            [images[item] for item in candidate_split.owner],
            candidate_split.texts,
            piece_references,
            image_batch_size,
            text_batch_size,
            progress,
        )
        num_items = len(candidate_split.num_pieces)
        scores = token_weighted_mean(pieces.scores, owner, new_tokens, num_items)
        output = PACSScoreOutput(
            scores=scores,
            mean_score=mean_or_nan(scores),
            image_text_cosines=token_weighted_mean(pieces.image_text_cosines, owner, new_tokens, num_items),
            truncated_tokens=torch.tensor(candidate_split.dropped_tokens, dtype=torch.long),
            num_pieces=torch.tensor(candidate_split.num_pieces, dtype=torch.long),
        )
        if reference_splits is not None:
            similarities = token_weighted_mean(pieces.reference_similarities, owner, new_tokens, num_items)
            output.reference_similarities = similarities
            output.ref_scores = harmonic_mean(scores, similarities)
            output.mean_ref_score = mean_or_nan(output.ref_scores)
            output.truncated_reference_tokens = torch.tensor(
                [sum(split.dropped_tokens) for split in reference_splits], dtype=torch.long
            )
        return output

    def score_truncated(
        self,
        images: list[ImageInput],
        candidates: list[str],
        references: list[list[str]] | None,
        image_batch_size: int,
        text_batch_size: int,
        progress: bool | None,
    ) -> PACSScoreOutput:
        """Eqs. 4 and 5 on validated inputs, each text read up to the context length (the official behaviour)."""

        unique_images, image_index, first_items = deduplicate(images, image_key)
        texts = list(candidates)
        reference_owner = []
        if references is not None:
            for item, item_references in enumerate(references):
                texts.extend(item_references)
                reference_owner.extend([item] * len(item_references))
        unique_texts, text_index, first_texts = deduplicate(texts, lambda text: text)

        # Errors name the first item that uses a broken image, not its position among the unique images.
        unique_image_embeds = self.encode_images(unique_images, image_batch_size, progress, item_indices=first_items)
        check_finite(unique_image_embeds, [f"image {item}" for item in first_items])
        image_embeds = unique_image_embeds[image_index]
        unique_text_embeds = self.encode_texts(unique_texts, text_batch_size, progress=progress)
        check_finite(
            unique_text_embeds,
            [
                f"candidate {position}"
                if position < len(candidates)
                else f"a reference of item {reference_owner[position - len(candidates)]}"
                for position in first_texts
            ],
        )
        text_embeds = unique_text_embeds[text_index]
        candidate_embeds = text_embeds[: len(candidates)]

        w = self.config.w
        cosines = cosine_similarity(image_embeds, candidate_embeds)
        scores = reference_free_score(image_embeds, candidate_embeds, w)
        output = PACSScoreOutput(scores=scores, mean_score=mean_or_nan(scores), image_text_cosines=cosines)
        if references is not None:
            similarities = max_reference_similarity(
                candidate_embeds, text_embeds[len(candidates) :], torch.tensor(reference_owner, dtype=torch.long)
            )
            output.reference_similarities = similarities
            output.ref_scores = harmonic_mean(scores, similarities)
            output.mean_ref_score = mean_or_nan(output.ref_scores)
        output.num_pieces = torch.ones(len(candidates), dtype=torch.long)
        return output

    def forward(self, pixel_values: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None):
        """Reference-free scores (Eq. 4) of aligned batches of preprocessed images and tokenized captions."""
        family = backbone_family(self.config.backbone_config)
        image_embeds = encode_image_batch(self.clip, family, pixel_values)
        text_embeds, _ = encode_text_batch(self.clip, family, input_ids, attention_mask, return_tokens=False)
        return PACSScoreOutput(
            scores=reference_free_score(image_embeds, text_embeds, self.config.w),
            image_text_cosines=cosine_similarity(image_embeds, text_embeds),
        )

    def fast_encoders(self) -> FastCLIPEncoders | None:
        """The packed fast path of `fast_clip` for this model's current weights, or None where it does not apply
        (`fast_cpu_encoders=False`, not a CLIP backbone, not fp32 on CPU, a LoRA variant it does not compute, training
        mode); an unmerged vanilla LoRA adapter runs on it (`fast_clip`).
        Rebuilt when a weight is replaced or changed in place."""
        if not self.fast_cpu_encoders or self.clip.training or backbone_family(self.config.backbone_config) != "clip":
            self._fast_encoders.clear()
            return None
        return self._fast_encoders.get(self.clip)

    def image_batch_encoder(self):
        """`pixel_values [B, 3, H, W] -> [B, projection_dim]` for images and video frames: `fast_clip` where it
        applies, else transformers' forward."""
        fast = self.fast_encoders()
        if fast is not None:
            return fast.encode_images
        return partial(encode_image_batch, self.clip, backbone_family(self.config.backbone_config))

    @staticmethod
    def progress_bar(iterable, description: str, num_items: int, progress: bool | None):
        """Wrap `iterable` in a tqdm bar when asked to, or automatically for long jobs."""
        show = progress if progress is not None else num_items > PROGRESS_THRESHOLD
        if not show:
            return iterable
        return logging.tqdm(iterable, desc=description, unit="batch")


def check_finite(embeds: torch.Tensor, names: list[str]):
    """A NaN or infinite embedding means broken weights (or an fp16 overflow): raise instead of scoring it."""
    finite = torch.isfinite(embeds).all(dim=-1)
    if not bool(finite.all()):
        first = int((~finite).nonzero()[0])
        raise ValueError(
            f"the model produced a non-finite embedding for {names[first]}: its weights contain NaN/Inf, or fp16 "
            "overflowed. Check the checkpoint (re-convert it), or score in fp32"
        )


def check_tokenizer(tokenizer, backbone_config, name_or_path: str):
    """A model folder missing its tokenizer files can load a stub tokenizer that maps every caption alike."""
    text_config = getattr(backbone_config, "text_config", backbone_config)
    vocab_size = getattr(text_config, "vocab_size", None)
    if vocab_size and abs(len(tokenizer) - vocab_size) > 0.01 * vocab_size:
        present = sorted(path.name for path in Path(name_or_path).glob("*")) if Path(name_or_path).is_dir() else []
        expected = [name for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt")]
        missing = [name for name in expected if present and name not in present]
        raise OSError(
            f"the tokenizer loaded from '{name_or_path}' has {len(tokenizer)} tokens but the model's vocabulary has "
            f"{vocab_size}: the tokenizer files are missing or belong to another model"
            + (f" (missing: {', '.join(missing)})" if missing else "")
            + ". Copy the tokenizer files of the backbone into the folder (e.g. from the directory it was converted "
            "or trained from)"
        )


def adapter_base_model(adapter_directory: Path, base_model_id: str) -> str | None:
    """The base model an adapter's `adapter_config.json` names, when it is another than `base_model_id` (the config's
    backbone); None when they agree or the adapter names none. A local path counts by its folder's name."""
    try:
        named = json.loads((Path(adapter_directory) / "adapter_config.json").read_text()).get("base_model_name_or_path")
    except (OSError, ValueError):
        return None  # check_adapter_directory has reported what is wrong with the file
    if not isinstance(named, str) or not named.strip():
        return None
    if named == base_model_id or Path(named).name == Path(base_model_id).name:
        return None
    return named


def set_adapter_base_model(adapter_directory: Path, base_model_id: str):
    """PEFT records the local path of the base model; a published adapter must name its Hub id instead."""
    config_path = Path(adapter_directory) / "adapter_config.json"
    adapter_config = json.loads(config_path.read_text())
    adapter_config["base_model_name_or_path"] = base_model_id
    config_path.write_text(json.dumps(adapter_config, indent=2, sort_keys=True) + "\n")


def make_world_readable(directory: Path):
    """safetensors writes files with mode 0600; files meant for the Hub and for other users need 0644."""
    for path in Path(directory).rglob("*"):
        if path.is_file():
            path.chmod(0o644)


__all__ = ["PACSModel", "PACSPreTrainedModel", "PACSScoreOutput", "PACSTextFeatures"]
