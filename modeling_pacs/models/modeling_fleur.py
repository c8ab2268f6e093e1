"""FLEUR and RefFLEUR (Lee et al., ACL 2024; docs/spec/fleur.md) on transformers' `LlavaForConditionalGeneration`:
a LLaVA-1.5 judge rates each caption from 0.0 to 1.0, and the score smoothing (`scoring_fleur.py`) replaces the
printed number by the expectation over the digit tokens.

Exact to the authors' procedure (`Yebin46/FLEUR` fleur.py, reffleur.py, fleur_exp.py, through LLaVA's own code):
- the prompt is LLaVA's `llava_v1` conversation with `<image>\n` before the instruction, tokenized as LLaVA's
  `tokenizer_image_token` does: the text on each side of the image separately, so the text after the image keeps its
  leading `▁` (transformers' `LlavaProcessor` drops it);
- images are pasted on a square of the processor's mean colour before resizing (`process_images` with `pad`);
- decoding is greedy up to `</s>`; the softmax of the smoothing and the greedy choice run over the original
  vocabulary (the llava-hf checkpoints pad theirs).
Unlike the authors' loop, every row is scored, and an answer that gives no number scores NaN with its outcome named
(`outcomes`) and counted (`failed_answers`, `num_failed`), never the previous caption's score.

Batched: many prompts per `generate` call, left-padded, with the KV cache; each distinct image is encoded once for
all of its captions and both prompts (the image features are spliced into `inputs_embeds`).
"""

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from PIL import Image
from transformers import (
    AutoTokenizer,
    CLIPImageProcessorPil,
    LlavaConfig,
    LlavaForConditionalGeneration,
    LogitsProcessor,
    LogitsProcessorList,
    PreTrainedModel,
)
from transformers.utils import ModelOutput
from transformers.utils import logging as transformers_logging

from .configuration_fleur import FleurConfig
from .inputs import check_captions, check_media_count, check_references, image_key, load_image
from .scoring_fleur import FAILURES, score_answer

logger = logging.getLogger(__name__)

# Above this many answers in one call a progress bar is shown unless `progress=False` (a 13B answer takes seconds).
PROGRESS_THRESHOLD = 32


def expand2square(image: Image.Image, background: tuple[int, ...]) -> Image.Image:
    """LLaVA's `expand2square` (llava/mm_utils.py:17): the image centred on a square of `background`."""
    width, height = image.size
    if width == height:
        return image
    side = max(width, height)
    square = Image.new(image.mode, (side, side), background)
    square.paste(image, (0, (width - height) // 2) if width > height else ((height - width) // 2, 0))
    return square


def conversation_prompt(config: FleurConfig, turns: Sequence[tuple[str, str | None]]) -> str:
    """LLaVA's `Conversation.get_prompt` for `SeparatorStyle.TWO` (llava/conversation.py:50): the system prompt, then
    `ROLE: message` closed by `sep` (user) or `sep2` (assistant); the open assistant turn ends with `ROLE:`."""
    separators = (config.sep, config.sep2)
    prompt = config.system + separators[0]
    for index, (role, message) in enumerate(turns):
        prompt += f"{role}: {message}{separators[index % 2]}" if message else f"{role}:"
    return prompt


def tokenize_with_image(tokenizer, prompt: str, image_token: str, image_slot: int) -> list[int]:
    """LLaVA's `tokenizer_image_token` (llava/mm_utils.py:46): each piece of text between images is tokenized on its
    own (with `<s>` and the leading `▁`), the first piece keeps its `<s>`, the others lose it; `image_slot` marks
    where the image goes."""
    pieces = [tokenizer(piece).input_ids for piece in prompt.split(image_token)]
    offset = 1 if pieces and pieces[0] and pieces[0][0] == tokenizer.bos_token_id else 0
    ids = [pieces[0][0]] if offset else []
    for index, piece in enumerate(pieces):
        if index:
            ids.append(image_slot)
        ids.extend(piece[offset:])
    return ids


class OriginalVocabulary(LogitsProcessor):
    """Greedy choices among the original vocabulary only: the padded rows of llava-hf's `lm_head` are never chosen."""

    def __init__(self, size: int):
        self.size = size

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        scores[:, self.size :] = float("-inf")
        return scores


@dataclass
class FleurOutput(ModelOutput):
    """FLEUR's per-item results.

    Args:
        scores (`torch.FloatTensor` of shape `(N,)`): FLEUR, NaN where the answer gave no score.
        ref_scores (`torch.FloatTensor` of shape `(N,)`, optional): RefFLEUR, when references were given.
        mean_score, mean_ref_score (`float`): means over the items that have a score (NaN when none has).
        answers, ref_answers (`list[str]`): the judge's answers, as decoded (with the stop string `</s>`).
        printed, ref_printed (`list[float | None]`): the numbers the answers print.
        outcomes, ref_outcomes (`list[str]`): `ok`, or why there is no score: `unparsable`, `out_of_range`,
            `digit_not_found` (docs/spec/fleur.md#failures).
        failed_answers (`torch.LongTensor` of shape `(N,)`): per item, how many of its answers gave no score.
        num_failed (`int`): answers without a score in the call.
        explanations (`list[str | None]`, optional): the judge's reasons (`explain=True`, fleur_exp.py).
    """

    scores: torch.FloatTensor | None = None
    ref_scores: torch.FloatTensor | None = None
    mean_score: float | None = None
    mean_ref_score: float | None = None
    answers: list | None = None
    ref_answers: list | None = None
    printed: list | None = None
    ref_printed: list | None = None
    outcomes: list | None = None
    ref_outcomes: list | None = None
    failed_answers: torch.LongTensor | None = None
    num_failed: int | None = None
    explanations: list | None = None


def nan_mean(values: torch.Tensor) -> float:
    kept = values[~torch.isnan(values)]
    return float(kept.mean()) if kept.numel() else float("nan")


class FleurModel(PreTrainedModel):
    r"""
    FLEUR and RefFLEUR (docs/spec/fleur.md): `score(images, candidates, references=None, explain=False)`.

    Holds transformers' `LlavaForConditionalGeneration` as `llava`, with its tokenizer and image processor (loaded and
    saved with the model). Build one from a LLaVA-1.5 checkpoint with `pacs-pp convert-fleur`, or load
    `llava-hf/llava-1.5-13b-hf` as is with `load_model`.

    Example:

    ```python
    >>> from modeling_pacs.loading import load_model
    >>> judge = load_model("tiny:fleur")  # random weights, shaped to print numbers
    >>> out = judge.score(["examples/images/red_circle.png"], ["a red circle"], references=[["a red disc"]])
    >>> out.outcomes, out.answers
    (['ok'], ['0.85</s>'])
    ```
    """

    config_class = FleurConfig
    base_model_prefix = "fleur"
    main_input_name = "input_ids"
    _no_split_modules = ["LlamaDecoderLayer", "CLIPEncoderLayer"]

    def __init__(self, config: FleurConfig):
        super().__init__(config)
        self.llava = LlavaForConditionalGeneration(LlavaConfig.from_dict(config.llava_config))
        self.tokenizer = None
        self.image_processor = None
        self.post_init()

    # ------------------------------------------------------------------------------------------------ loading
    def attach_processors(self, tokenizer, image_processor) -> "FleurModel":
        """Set the judge's tokenizer and image processor (`from_pretrained` loads them from the same directory)."""
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        return self

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        model = super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)
        shared = {key: kwargs[key] for key in ("cache_dir", "revision", "local_files_only", "token") if key in kwargs}
        return model.attach_processors(
            AutoTokenizer.from_pretrained(pretrained_model_name_or_path, config=model.llava.config, **shared),
            CLIPImageProcessorPil.from_pretrained(pretrained_model_name_or_path, **shared),
        )

    def save_pretrained(self, save_directory, *args, **kwargs):
        super().save_pretrained(save_directory, *args, **kwargs)
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(save_directory)
        if self.image_processor is not None:
            self.image_processor.save_pretrained(save_directory)

    # ------------------------------------------------------------------------------------------------ inputs
    @property
    def digit_tokens(self) -> list[int]:
        """The token of each digit 0-9: the last token of `tokenizer.encode(str(digit))` (fleur.py:55)."""
        return [self.tokenizer.encode(str(digit))[-1] for digit in range(10)]

    @property
    def image_token_count(self) -> int:
        vision = self.llava.config.vision_config
        patches = (vision.image_size // vision.patch_size) ** 2
        return patches + (self.llava.config.vision_feature_select_strategy == "full")

    def pixel_values(self, image: Image.Image) -> torch.Tensor:
        """LLaVA's `process_images` (llava/mm_utils.py:32): with `pad`, the image on a square of the processor's mean
        colour (`int(x * 255)`), then the processor's resize, crop and normalisation."""
        if self.config.image_aspect_ratio == "pad":
            image = expand2square(image, tuple(int(x * 255) for x in self.image_processor.image_mean))
        return self.image_processor(image, return_tensors="pt")["pixel_values"][0]

    def prompt_ids(self, instruction: str, answer: str | None = None) -> list[int]:
        """The token ids of one question (and, for the explanation turn, its answer and the follow-up), with
        `-1` where the image's features go."""
        roles = self.config.roles
        message = f"{self.config.image_token}\n{instruction}"
        turns = [(roles[0], message), (roles[1], answer)]
        if answer is not None:
            turns += [(roles[0], self.config.explanation_prompt), (roles[1], None)]
        prompt = conversation_prompt(self.config, turns)
        return tokenize_with_image(self.tokenizer, prompt, self.config.image_token, -1)

    def encode_images(self, images: list, batch_size: int) -> torch.Tensor:
        """The projected features of each image, `(num_images, image_token_count, hidden)`."""
        config = self.llava.config
        features = []
        for start in range(0, len(images), batch_size):
            pixels = torch.stack([self.pixel_values(image) for image in images[start : start + batch_size]])
            pixels = pixels.to(self.llava.device, self.llava.dtype)
            output = self.llava.model.get_image_features(
                pixel_values=pixels,
                vision_feature_layer=config.vision_feature_layer,
                vision_feature_select_strategy=config.vision_feature_select_strategy,
            )
            output = getattr(output, "pooler_output", output)
            features.append(torch.stack(list(output)) if isinstance(output, (list, tuple)) else output)
        return torch.cat(features)

    # ------------------------------------------------------------------------------------------------ generation
    @torch.no_grad()
    def generate_answers(
        self, prompts: list[list[int]], image_index: list[int], image_features: torch.Tensor, max_new_tokens: int,
        batch_size: int, progress: bool | None = False, description: str = "judging captions",
    ) -> list[tuple[list[int], list[torch.Tensor]]]:  # fmt: skip
        """Greedy answers to `prompts` (ids with one `-1` where image `image_index[i]`'s features go): for each, the
        generated ids up to and including `</s>` and the logits of each step over the original vocabulary.
        `progress`: a bar of answers with their rate and the time left (None: above `PROGRESS_THRESHOLD` answers)."""
        embed = self.llava.get_input_embeddings()
        device = embed.weight.device
        vocabulary = min(self.config.original_vocab_size, self.llava.config.text_config.vocab_size)
        eos = self.tokenizer.eos_token_id
        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))  # similar lengths share a batch
        results: list = [None] * len(prompts)
        slots = self.image_token_count
        show = progress if progress is not None else len(prompts) > PROGRESS_THRESHOLD
        bar = transformers_logging.tqdm(total=len(prompts), desc=description, unit="answer", disable=not show)
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            lengths = [len(prompts[i]) - 1 + slots for i in batch]
            width = max(lengths)
            hidden = embed.weight.shape[1]
            inputs = torch.zeros(len(batch), width, hidden, dtype=embed.weight.dtype, device=device)
            mask = torch.zeros(len(batch), width, dtype=torch.long, device=device)
            for row, (index, length) in enumerate(zip(batch, lengths, strict=True)):
                ids = prompts[index]
                slot = ids.index(-1)
                before = embed(torch.tensor(ids[:slot], device=device))
                after = embed(torch.tensor(ids[slot + 1 :], device=device))
                image = image_features[image_index[index]].to(device, embed.weight.dtype)
                inputs[row, width - length :] = torch.cat([before, image, after])  # left padding
                mask[row, width - length :] = 1
            output = self.llava.generate(
                inputs_embeds=inputs, attention_mask=mask, do_sample=False, num_beams=1,
                max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=eos, use_cache=True,
                logits_processor=LogitsProcessorList([OriginalVocabulary(vocabulary)]),
                output_logits=True, return_dict_in_generate=True,
            )  # fmt: skip
            for row, index in enumerate(batch):
                generated = output.sequences[row].tolist()
                if eos in generated:
                    generated = generated[: generated.index(eos) + 1]
                logits = [output.logits[step][row, :vocabulary].float() for step in range(len(generated))]
                results[index] = (generated, logits)
            bar.update(len(batch))
        bar.close()
        return results

    # ------------------------------------------------------------------------------------------------ scoring
    def check_prompt_lengths(self, prompts: list[list[int]], what: str) -> None:
        context = self.llava.config.text_config.max_position_embeddings
        for index, ids in enumerate(prompts):
            length = len(ids) - 1 + self.image_token_count
            if length >= context:
                raise ValueError(
                    f"{what} of item {index}: the prompt is {length} tokens with the image, and the judge reads "
                    f"{context}: shorten the caption (or its references)"
                )

    def score(
        self,
        images: Sequence[Any],
        candidates: Sequence[str],
        references: Sequence[Sequence[str]] | None = None,
        explain: bool = False,
        batch_size: int = 8,
        progress: bool | None = None,
    ) -> FleurOutput:
        """FLEUR for each (image, candidate), RefFLEUR too when `references` are given, and the judge's reasons with
        `explain=True` (a second turn, "Why? Tell me the reason.", after the smoothed score, as fleur_exp.py asks).

        Empty captions are refused; an answer that prints no usable number scores NaN (`outcomes` says why) and is
        counted in `failed_answers` and `num_failed`, with one warning for the call. `progress`: a bar of the
        judge's answers with the time left (None: when a call asks for more than `PROGRESS_THRESHOLD` answers).
        """
        if self.tokenizer is None or self.image_processor is None:
            raise ValueError(
                "FleurModel has no tokenizer or image processor: load it with from_pretrained or load_model"
            )
        if not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        candidates = check_captions(candidates)
        images = list(images)
        check_media_count(images, candidates)
        for index, caption in enumerate(candidates):
            if not caption.strip():
                raise ValueError(f"candidate {index} is empty: FLEUR asks the judge about a caption; drop the item")
        if self.config.normalize_whitespace:  # the authors' loader: ' '.join(caption.split())
            candidates = [" ".join(caption.split()) for caption in candidates]
        if references is not None:
            references = check_references(references, len(candidates), empty_fix="drop the item, or score FLEUR alone")
        keys = {}
        image_index = []
        unique = []
        for index, image in enumerate(images):  # each distinct image is decoded and encoded once
            key = image_key(image)
            if key is None or key not in keys:
                if key is not None:
                    keys[key] = len(unique)
                unique.append(load_image(image, index))
                image_index.append(len(unique) - 1)
            else:
                image_index.append(keys[key])
        instructions = [self.config.prompt.format(candidate=caption) for caption in candidates]
        prompts = [self.prompt_ids(instruction) for instruction in instructions]
        self.check_prompt_lengths(prompts, "the candidate")
        requests = [(prompts, image_index)]
        if references is not None:
            ref_prompts = [
                self.prompt_ids(
                    self.config.ref_prompt.format(
                        reference=self.config.reference_separator.join(item), candidate=caption
                    )
                )
                for caption, item in zip(candidates, references, strict=True)
            ]
            self.check_prompt_lengths(ref_prompts, "the references and candidate")
            requests.append((ref_prompts, image_index))
        features = self.encode_images(unique, batch_size)
        all_prompts = [ids for group, _ in requests for ids in group]
        all_images = [index for _, group in requests for index in group]
        answers = self.generate_answers(
            all_prompts, all_images, features, self.config.max_new_tokens, batch_size, progress
        )
        digits = self.digit_tokens
        results = []
        for generated, logits in answers:
            text = self.tokenizer.decode(generated).strip()  # fleur.py:125, with the stop string
            score, outcome, printed = score_answer(text, generated, logits, digits, self.config.smoothing)
            results.append((score, outcome, printed, text))
        count = len(candidates)
        fleur, ref_fleur = results[:count], results[count:]
        scores = torch.tensor([item[0] for item in fleur], dtype=torch.float32)
        failed = torch.tensor([int(item[1] in FAILURES) for item in fleur], dtype=torch.long)
        output = FleurOutput(
            scores=scores, mean_score=nan_mean(scores), answers=[item[3] for item in fleur],
            printed=[item[2] for item in fleur], outcomes=[item[1] for item in fleur],
        )  # fmt: skip
        if references is not None:
            output.ref_scores = torch.tensor([item[0] for item in ref_fleur], dtype=torch.float32)
            output.mean_ref_score = nan_mean(output.ref_scores)
            output.ref_answers = [item[3] for item in ref_fleur]
            output.ref_printed = [item[2] for item in ref_fleur]
            output.ref_outcomes = [item[1] for item in ref_fleur]
            failed = failed + torch.tensor([int(item[1] in FAILURES) for item in ref_fleur], dtype=torch.long)
        output.failed_answers = failed
        output.num_failed = int(failed.sum())
        if output.num_failed:
            logger.warning(
                "%d answer(s) of the judge gave no score (NaN): %s; `outcomes` names each "
                "(docs/spec/fleur.md#failures)",
                output.num_failed,
                ", ".join(f"item {i}" for i in torch.nonzero(failed).flatten().tolist()[:5]),
            )
        if explain:
            output.explanations = self.explain(scores, instructions, image_index, features, batch_size, progress)
        return output

    def explain(
        self, scores: torch.Tensor, instructions: list[str], image_index: list[int], features: torch.Tensor,
        batch_size: int, progress: bool | None = False,
    ) -> list[str | None]:  # fmt: skip
        """fleur_exp.py:181-190: the conversation goes on with the smoothed score as the judge's answer
        (`str(score.item()) + '</s>'`) and "Why? Tell me the reason."; None for an item without a score."""
        wanted = [index for index, score in enumerate(scores.tolist()) if score == score]
        prompts = [self.prompt_ids(instructions[index], f"{scores[index].item()}</s>") for index in wanted]
        self.check_prompt_lengths(prompts, "the explanation turn")
        answers = self.generate_answers(
            prompts, [image_index[index] for index in wanted], features, self.config.explanation_max_new_tokens,
            batch_size, progress, "explaining scores",
        )  # fmt: skip
        explanations: list[str | None] = [None] * len(scores)
        for index, (generated, _) in zip(wanted, answers, strict=True):
            explanations[index] = self.tokenizer.decode(generated, skip_special_tokens=True).strip()
        return explanations


__all__ = ["FleurModel", "FleurOutput", "conversation_prompt", "expand2square", "tokenize_with_image"]
