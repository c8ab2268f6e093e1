"""Model metrics as torchmetrics `Metric`s: `ModelMetric(model=...)` with `update(images, captions, references=None)`
and `compute()`, so that a Lightning `validation_step` can log PAC-S++ (or CLIP-S, Polos, Pearl, ...) like any
torchmetrics metric, with its states gathered across DDP processes.

Each `update` scores its batch with `model.score` (the engine of `pacs-score`) and keeps the per-item scores as a
state reduced by concatenation (`dist_reduce_fx="cat"`); `compute` is their mean, the corpus score `pacs-score`
reports, over every process's items. The scoring model is held outside the module's parameters: it is no part of
the metric's `state_dict` (a Lightning checkpoint does not grow by the metric's weights) and `.to(device)` does not
move it (choose its device with `device=`).

The family classes (`PACSppMetric`, `CLIPSMetric`, `PolosMetric`, ...) live in each family's folder and only set
`default_model`.

Example:

```python
>>> from modeling_pacs.evaluation.torch_metrics import ModelMetric
>>> metric = ModelMetric("tiny:clip_s")  # doctest: +SKIP
>>> metric.update(["examples/images/red_circle.png"], ["a red circle"])  # doctest: +SKIP
>>> float(metric.compute())  # doctest: +SKIP
```
"""

from collections.abc import Sequence
from typing import Any

import torch

from ..errors import InputError
from ..extras import require

torchmetrics = require("torchmetrics", "torchmetrics", "ModelMetric (the torchmetrics Metric of every model metric)")


class ModelMetric(torchmetrics.Metric):
    """A model metric as a torchmetrics `Metric`: the mean of one per-item score over every updated item.

    Args:
        model: anything `load_model` takes (an alias such as `pac_s_pp_vit_b32`, a tiny alias such as
            `tiny:clip_s`, a Hub id, a model directory), or an already loaded scoring model. The family classes
            (`PACSppMetric`, ...) default it to their released model.
        output: the output key computed: `"score"` (PAC-S++, CLIP-S, Pearl-img; Polos' only score) or
            `"ref_score"` (RefPAC-S++, RefCLIP-S, Pearl: `update` then needs references).
        device, dtype, batch_size, long_captions: as `pacs-score` takes them.
        mode: the scoring mode of a metric that has several (`Capabilities.scoring_modes`: `"per_item"`,
            `"official"`); None: the model's default. Each `update` is scored by one `model.score` call, so in
            `"official"` mode the authors' chunks are cut within each update's batch. A metric without scoring modes,
            or a mode it does not have, is refused here, naming the valid ones.
        **kwargs: torchmetrics' own (`sync_on_compute`, `process_group`, `dist_sync_on_step`, ...).

    `higher_is_better` is True (every score of the registry is higher-is-better); `signature()` is the
    reproducibility signature of the computation.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False
    default_model: str | None = None  # the family classes' released model
    metric: str | None = None  # the family classes' metric: a model of another metric is refused

    def __init__(
        self,
        model: Any = None,
        output: str = "score",
        *,
        device: str | None = None,
        dtype: str | None = None,
        batch_size: int = 64,
        long_captions: str = "truncate",
        mode: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        from ..loading import load_model, score_options
        from ..registry import spec_of
        from .coco_scorers import check_metric

        model = model if model is not None else self.default_model
        if model is None:
            raise InputError(f"{type(self).__name__} needs model=: an alias, a tiny alias, a Hub id or a directory")
        if isinstance(model, str):
            entry, model = model, load_model(model, device=device, dtype=dtype)
        else:
            entry = getattr(model.config, "_name_or_path", "") or type(model).__name__
        spec = spec_of(model)
        check_metric(model, spec, self.metric, type(self).__name__)
        scores = [field.key for field in spec.outputs if field.kind == "score"]
        if output not in scores:
            raise InputError(f"output {output!r}: {spec.outputs[0].label_for(model.config)} gives {scores}")
        field = spec.output(output)
        # Held in __dict__, not as a submodule: the scoring model is no part of the metric's state_dict or `.to()`.
        self.__dict__["scoring_model"] = model
        self.entry = entry
        self.output_key = output
        self.needs_references = field.needs_references or spec.capabilities.needs_references
        if not field.higher_is_better:  # torchmetrics makes higher_is_better a class constant
            raise InputError(f"{field.label_for(model.config)} is lower-is-better: ModelMetric serves scores only")
        self.label = field.label_for(model.config)
        self.dtype_name = dtype
        self.long_captions = long_captions
        self.scoring_mode = mode
        self.score_options = score_options(
            model, long_captions, mode, image_batch_size=batch_size, text_batch_size=4 * batch_size, progress=False
        )
        self.reference_counts: set[int] = set()  # this process's, for the signature
        self.add_state("scores", default=[], dist_reduce_fx="cat")

    def update(self, images: Sequence, captions: Sequence[str], references: Sequence[Sequence[str]] | None = None):
        """Score a batch: one image per caption (paths, PIL images, arrays, a (B, C, H, W) tensor, ...) and, for
        reference-based outputs, one list of references per caption."""
        from ..results import result_columns

        if isinstance(images, torch.Tensor) and images.ndim == 4:
            images = list(images)  # one (C, H, W) tensor per caption
        if isinstance(captions, str):
            raise InputError("captions must be a list of strings, got a single string: wrap it in a list")
        if references is None and self.needs_references:
            raise InputError(f"{self.label} is reference-based: pass references= (one list of captions per caption)")
        model = self.__dict__["scoring_model"]
        output = model.score(list(images), list(captions), references=references, **self.score_options)
        column = next(column for column in result_columns(model, output) if column.key == self.output_key)
        self.scores.append(torch.tensor(column.values, dtype=torch.float64, device=self.device))
        if references is not None:
            self.reference_counts.update(len(item) for item in references)

    def reset(self) -> None:
        super().reset()
        self.reference_counts = set()

    def compute(self) -> torch.Tensor:
        """The mean of the per-item scores of every update (of every process, under DDP)."""
        # a list of per-update tensors here, or one tensor once torchmetrics has gathered the processes' lists
        if isinstance(self.scores, list) and not self.scores:
            raise InputError(f"{type(self).__name__}.compute() before any update: nothing to average")
        scores = torchmetrics.utilities.dim_zero_cat(self.scores)
        if not scores.numel():
            raise InputError(f"{type(self).__name__}.compute() before any update: nothing to average")
        return scores.mean()

    def signature(self) -> str:
        """The reproducibility signature (`modeling_pacs/signatures.py`) of this metric's settings and the
        references this process has seen (their count per item)."""
        from ..signatures import model_signature

        counts = sorted(self.reference_counts)
        references = [[""] * count for count in counts] if counts else None
        return model_signature(
            self.__dict__["scoring_model"], self.entry, references, long_captions=self.long_captions,
            dtype=self.dtype_name, mode=self.scoring_mode,
        )  # fmt: skip


__all__ = ["ModelMetric"]
