"""The captioner's evaluation report (docs/spec/pacs.md#scst, PAC-S++ paper Table 9): PAC-S++, RefPAC-S++, CLIP-S,
RefCLIP-S, the grammar measures Rep-1..4 and %Incorrect, and BLEU-4 / CIDEr when `pycocoevalcap` is installed."""

import importlib.util
import math
from collections.abc import Sequence
from typing import Any

import torch
from transformers.utils import logging

from ..models.inputs import load_and_preprocess
from ..models.modeling_captioner import PACSCaptionerForConditionalGeneration
from ..models.modeling_pacs import PACSModel
from .grammar import grammar_measures
from .rewards import simple_tokenize

logger = logging.get_logger(__name__)


def generate_captions(
    captioner: PACSCaptionerForConditionalGeneration,
    tokenizer,
    images: Sequence[Any],
    batch_size: int = 32,
    num_beams: int = 5,
    max_new_tokens: int = 20,
    progress: bool = True,
) -> list[str]:
    """Beam-search captions (the best beam) of `images`, decoded with the CLIP tokenizer."""
    for name, value in (("batch_size", batch_size), ("num_beams", num_beams), ("max_new_tokens", max_new_tokens)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    captioner.eval()
    device = next(captioner.parameters()).device
    size = captioner.config.vision_config.image_size
    starts = range(0, len(images), batch_size)
    if progress and len(images) > batch_size:
        starts = logging.tqdm(starts, desc="generating captions", unit="batch")
    captions = []
    for start in starts:
        indices = range(start, min(start + batch_size, len(images)))
        pixel_values = torch.stack([load_and_preprocess(images[index], index, size) for index in indices])
        with torch.no_grad():
            sequences = captioner.generate(
                pixel_values=pixel_values.to(device), num_beams=num_beams, max_new_tokens=max_new_tokens
            )
        captions.extend(text.strip() for text in tokenizer.batch_decode(sequences, skip_special_tokens=True))
    return captions


def caption_report(
    captions: Sequence[str],
    images: Sequence[Any],
    references: Sequence[Sequence[str]],
    pacs_model: PACSModel | None = None,
    clip_model: PACSModel | None = None,
) -> dict[str, Any]:
    """System-level measures of generated captions (means of per-item scores; grammar measures; n-gram metrics).

    Keys: `pac_s_pp`, `ref_pac_s_pp` (with `pacs_model`), `clip_s`, `ref_clip_s` (with `clip_model`), `rep_1`..`rep_4`,
    `incorrect_percent`, `bleu_4`, `cider` (with pycocoevalcap; else listed in `skipped`), and `num_captions`.
    """
    captions = list(captions)
    report: dict[str, Any] = {"num_captions": len(captions)}
    skipped = []
    for prefix, model in (("pac_s_pp", pacs_model), ("clip_s", clip_model)):
        if model is None:
            skipped.append(f"{prefix}: no model given")
            continue
        output = model.score(list(images), captions, [list(item) for item in references])
        report[prefix] = output.mean_score
        report[f"ref_{prefix}"] = output.mean_ref_score
    report.update(grammar_measures(captions))
    if importlib.util.find_spec("pycocoevalcap") is not None:
        from pycocoevalcap.bleu.bleu import Bleu
        from pycocoevalcap.cider.cider import Cider

        candidates = {index: [simple_tokenize(caption)] for index, caption in enumerate(captions)}
        ground_truth = {index: [simple_tokenize(r) for r in item] for index, item in enumerate(references)}
        bleu, _ = Bleu(4).compute_score(ground_truth, candidates, verbose=0)
        report["bleu_4"] = float(bleu[3])
        report["cider"] = float(Cider().compute_score(ground_truth, candidates)[0])
    else:
        skipped.append("bleu_4, cider: pycocoevalcap is not installed (pip install 'pacs-pp[captioning]')")
    for key, value in list(report.items()):
        if isinstance(value, float) and not math.isfinite(value):
            report[key] = None  # never NaN in JSON (an empty test split)
    report["skipped"] = skipped
    return report


__all__ = ["caption_report", "generate_captions"]
