"""Training PAC-S++ and PAC-S: the positive-augmented contrastive loss, its distributed gather, data and Trainer.

docs/spec/pacs.md#training (PAC-S++ paper Sec. 3.2 and 5.1). Not part of the published remote code: it may import
`datasets`.

Data flows one way: dataset rows `(image, caption, synthetic_image, synthetic_caption)` -> `PACSDataCollator`
(decoding, official preprocessing, tokenisation with the scoring-time prompt prefix) -> `PACSEncoderForTraining`
(one forward through both towers, so DDP sees it) -> `gather_with_gradient` (global batch) ->
[`pacs_contrastive_loss`][modeling_pacs.pacs.training.pacs_contrastive_loss] (Eqs. 1-3).

The prompt prefix: the official training code is not public. We tokenise training captions exactly as captions are
tokenised at scoring time (`PACSModel.tokenize`, which prepends `config.prompt_prefix`, "A photo depicts "), so the
adapted text encoder sees the input distribution it is evaluated on.
"""

import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from transformers import Trainer, TrainerCallback
from transformers.trainer_callback import ExportableState
from transformers.utils import ModelOutput, logging

from ..data.synthetic_pairs import SYNTHETIC_CAPTION_COLUMN, SYNTHETIC_IMAGE_COLUMN
from ..data.validation import check_captions, check_data_path, check_images, check_not_empty, looks_like_local_path
from ..jobs import write_text_atomically
from ..models.backbones import (
    backbone_family,
    default_w,
    encode_image_batch,
    encode_text_batch,
    image_preprocessor,
    multihead_attention_projections,
    projection_modules,
)
from ..models.modeling_pacs import PACSModel

if TYPE_CHECKING:
    import datasets

    from ..data.sources import RowSource

logger = logging.get_logger(__name__)

IMAGE_COLUMN = "image"
CAPTION_COLUMN = "caption"
# Added by `add_row_index` so that decoding errors name the dataset row, not the position in the batch.
ROW_INDEX_COLUMN = "row_index"
PATCH_EMBEDDING_MODULE = "patch_embedding"
# The contrastive term of Eqs. 1-3: InfoNCE as in the paper, or SigLIP's pairwise sigmoid loss (SigLIP backbones).
LOSS_TYPES = ("info_nce", "sigmoid")


# ----------------------------------------------------------------------------------------------------- recipes
@dataclass(frozen=True)
class TrainingRecipe:
    """What is trained and how the three loss terms are weighted
    ([docs/spec/pacs.md#training](../spec/pacs.md#training)).

    Args:
        variant: the `PACSConfig.variant` of the trained model.
        lambda_v: weight of the (synthetic image, real caption) term of Eq. 3.
        lambda_t: weight of the (real image, synthetic caption) term of Eq. 3.
        use_lora: train LoRA adapters (base weights frozen); otherwise train only the two final projections.
    """

    variant: str
    lambda_v: float
    lambda_t: float
    use_lora: bool


RECIPES = {
    "pac_s_pp": TrainingRecipe(variant="pac_s_pp", lambda_v=0.1, lambda_t=0.001, use_lora=True),
    "pac_s": TrainingRecipe(variant="pac_s", lambda_v=0.05, lambda_t=0.1, use_lora=False),
}


# ----------------------------------------------------------------------------------------------------- loss
@dataclass
class PACSLossOutput(ModelOutput):
    """
    The loss of Eq. 3 and its three terms.

    Args:
        loss (`torch.FloatTensor`): `L(V,T) + lambda_v * L(V',T) + lambda_t * L(V,T')`.
        real_loss (`torch.FloatTensor`): `L(V,T)`, Eq. 1.
        synthetic_image_loss (`torch.FloatTensor`, *optional*): `L(V',T)`, when synthetic images are used.
        synthetic_caption_loss (`torch.FloatTensor`, *optional*): `L(V,T')`, Eq. 2, when synthetic captions are used.
    """

    loss: torch.FloatTensor | None = None
    real_loss: torch.FloatTensor | None = None
    synthetic_image_loss: torch.FloatTensor | None = None
    synthetic_caption_loss: torch.FloatTensor | None = None


def symmetric_info_nce(
    image_embeds: torch.Tensor, text_embeds: torch.Tensor, logit_scale: torch.Tensor
) -> torch.Tensor:
    """Eq. 1: the mean of the image-to-text and text-to-image InfoNCE losses over the N x N cosine matrix.

    `logit_scale` is CLIP's log-parametrised inverse temperature: logits are `exp(logit_scale) * cos`.

    Example:

    ```python
    >>> import math, torch
    >>> embeds = torch.eye(2)
    >>> float(symmetric_info_nce(embeds, embeds, torch.tensor(0.0)))  # doctest: +ELLIPSIS
    0.3132...
    >>> math.log(1 + math.exp(-1))  # each row: correct logit 1, wrong logit 0
    0.31326168751822286
    ```
    """
    image_embeds = F.normalize(image_embeds.float(), dim=-1)
    text_embeds = F.normalize(text_embeds.float(), dim=-1)
    logits = logit_scale.float().exp() * image_embeds @ text_embeds.T
    targets = torch.arange(logits.shape[0], device=logits.device)
    return (F.cross_entropy(logits, targets) + F.cross_entropy(logits.T, targets)) / 2


def sigmoid_contrastive_loss(
    image_embeds: torch.Tensor, text_embeds: torch.Tensor, logit_scale: torch.Tensor, logit_bias: torch.Tensor
) -> torch.Tensor:
    """SigLIP's pairwise sigmoid loss (Zhai et al. 2023, Eq. 1): every image-text pair is a binary problem,
    `-1/N sum_ij log sigmoid(z_ij (exp(logit_scale) cos_ij + logit_bias))` with `z_ij = 1` on the diagonal, else -1.

    Example:

    ```python
    >>> import math, torch
    >>> embeds = torch.eye(2)
    >>> float(sigmoid_contrastive_loss(embeds, embeds, torch.tensor(0.0), torch.tensor(0.0)))  # doctest: +ELLIPSIS
    1.0064...
    >>> (2 * math.log(1 + math.exp(-1)) + 2 * math.log(2)) / 2  # positives have logit 1, negatives 0; N = 2
    1.0064088680781682
    ```
    """
    image_embeds = F.normalize(image_embeds.float(), dim=-1)
    text_embeds = F.normalize(text_embeds.float(), dim=-1)
    logits = logit_scale.float().exp() * image_embeds @ text_embeds.T + logit_bias.float()
    signs = 2 * torch.eye(logits.shape[0], device=logits.device) - 1
    return -F.logsigmoid(signs * logits).sum() / logits.shape[0]


def pacs_contrastive_loss(
    image_embeds: torch.Tensor,
    text_embeds: torch.Tensor,
    synthetic_image_embeds: torch.Tensor | None = None,
    synthetic_text_embeds: torch.Tensor | None = None,
    *,
    logit_scale: torch.Tensor,
    lambda_v: float,
    lambda_t: float,
    loss_type: str = "info_nce",
    logit_bias: torch.Tensor | None = None,
) -> PACSLossOutput:
    """Eq. 3: `L(V,T) + lambda_v * L(V',T) + lambda_t * L(V,T')`, each term a symmetric InfoNCE (Eqs. 1, 2).

    Row i of every tensor belongs to the same training tuple `(v_i, t_i, v'_i, t'_i)`; the other rows are the
    negatives. A term whose lambda is 0 is skipped and its embeddings may be `None`.

    Args:
        image_embeds, text_embeds: `[N, D]` embeddings of the real images and human captions (unnormalised).
        synthetic_image_embeds: `[N, D]` embeddings of the images generated from the captions.
        synthetic_text_embeds: `[N, D]` embeddings of the captions generated from the images.
        logit_scale: CLIP's `logit_scale` parameter (the log of the inverse temperature).
        lambda_v, lambda_t: weights of the synthetic-image and synthetic-caption terms.
        loss_type: `"info_nce"` (Eq. 1, the paper) or `"sigmoid"` (SigLIP's loss for every term, with `logit_bias`).
        logit_bias: SigLIP's `logit_bias` parameter; required by the sigmoid loss.

    Example:

    ```python
    >>> import torch
    >>> v, t = torch.randn(8, 16), torch.randn(8, 16)
    >>> out = pacs_contrastive_loss(v, t, v, t, logit_scale=torch.tensor(4.6052), lambda_v=0.1, lambda_t=0.001)
    >>> bool(out.loss > out.real_loss)
    True
    ```
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {list(LOSS_TYPES)}, got {loss_type!r}")
    if loss_type == "sigmoid" and logit_bias is None:
        raise ValueError(
            "the sigmoid loss needs the backbone's logit_bias, which only SigLIP models have: use a SigLIP backbone "
            "or loss_type='info_nce'"
        )

    def contrastive(images: torch.Tensor, texts: torch.Tensor) -> torch.Tensor:
        if loss_type == "sigmoid":
            return sigmoid_contrastive_loss(images, texts, logit_scale, logit_bias)
        return symmetric_info_nce(images, texts, logit_scale)

    real_loss = contrastive(image_embeds, text_embeds)
    output = PACSLossOutput(loss=real_loss, real_loss=real_loss)
    for weight, images, texts, name, field in (
        (lambda_v, synthetic_image_embeds, text_embeds, "synthetic_image_embeds", "synthetic_image_loss"),
        (lambda_t, image_embeds, synthetic_text_embeds, "synthetic_text_embeds", "synthetic_caption_loss"),
    ):
        if weight == 0:
            continue
        if images is None or texts is None:
            raise ValueError(f"{name} is None but its loss weight is {weight}: pass the embeddings or set it to 0")
        term = contrastive(images, texts)
        output[field] = term
        output.loss = output.loss + weight * term
    return output


class _GatherWithGradient(torch.autograd.Function):
    """All-gather along dim 0 whose backward hands each process the summed gradient of its own rows."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        ctx.rank, ctx.num_rows = dist.get_rank(), tensor.shape[0]
        gathered = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, tensor.contiguous())
        return torch.cat(gathered)

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor) -> torch.Tensor:
        # Every process computed the same global loss; summing their gradients and DDP's averaging of the
        # parameter gradients together give exactly the single-process gradient of the global-batch loss.
        grad = grad_output.contiguous()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        return grad[ctx.rank * ctx.num_rows : (ctx.rank + 1) * ctx.num_rows]


def gather_with_gradient(tensor: torch.Tensor) -> torch.Tensor:
    """Concatenate `tensor` from every process (rank order), keeping the gradient path to the local rows.

    Without an initialised process group (or with one process) it returns `tensor` unchanged. Every process must
    pass the same number of rows (the Trainer's dataloaders guarantee it with even batches).

    Example:

    ```python
    >>> import torch
    >>> gather_with_gradient(torch.ones(2, 3)).shape  # single process
    torch.Size([2, 3])
    ```
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return tensor
    return _GatherWithGradient.apply(tensor)


# ----------------------------------------------------------------------------------------------------- model
class PACSEncoderForTraining(nn.Module):
    """Both towers of a [`PACSModel`][modeling_pacs.PACSModel] behind one `forward`, so DDP wraps and synchronises a
    single call.

    Returns the projected (unnormalised) image and text embeddings and CLIP's `logit_scale`.

    Example:

    ```python
    >>> from modeling_pacs.testing.pacs import make_tiny_model
    >>> encoder = PACSEncoderForTraining(make_tiny_model(variant="clip_s"))
    ```
    """

    def __init__(self, pacs_model: PACSModel):
        super().__init__()
        self.pacs_model = pacs_model

    def forward(
        self, pixel_values: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        clip = self.pacs_model.clip
        family = backbone_family(self.pacs_model.config.backbone_config)
        image_embeds = encode_image_batch(clip, family, pixel_values)
        text_embeds, _ = encode_text_batch(clip, family, input_ids, attention_mask, return_tokens=False)
        return image_embeds, text_embeds, clip.logit_scale


def prepare_model_for_training(model: PACSModel, recipe: TrainingRecipe) -> PACSModel:
    """Freeze what the recipe keeps fixed and attach what it trains; record the recipe in `model.config`.

    PAC-S++: a fresh PEFT LoRA adapter (config's rank and alpha; r=4, alpha=1) on q/k/v/out, fc1, fc2 of both
    towers and on the vision patch-embedding convolution, stored as `model._peft_model` so `save_pretrained` writes
    the base weights plus `adapter/`. SigLIP has the same module names; the linears inside its pooling head's
    `nn.MultiheadAttention` are excluded (it reads their weights directly, so LoRA there would never act), its
    MLP is adapted. PAC-S: only the projections are trainable (CLIP's `visual_projection` and `text_projection`;
    SigLIP's pooling head and text `head`).

    Example:

    ```python
    >>> from modeling_pacs.testing.pacs import make_tiny_model
    >>> model = prepare_model_for_training(make_tiny_model(variant="clip_s"), RECIPES["pac_s_pp"])
    >>> "patch_embedding" in model.config.lora_target_modules
    True
    ```
    """
    if model.peft_model is not None:
        raise ValueError(
            "this model has an unmerged LoRA adapter attached: load it with merge_adapter=True (the default) so "
            "training starts from merged weights"
        )
    model.requires_grad_(False)
    model.config.variant = recipe.variant
    model.config.w = default_w(model.config.backbone_config, recipe.variant)
    if recipe.use_lora:
        from peft import LoraConfig, get_peft_model

        targets = list(dict.fromkeys([*model.config.lora_target_modules, PATCH_EMBEDDING_MODULE]))
        lora_config = LoraConfig(
            r=model.config.lora_rank,
            lora_alpha=model.config.lora_alpha,
            target_modules=targets,
            exclude_modules=multihead_attention_projections(model.clip) or None,
            lora_dropout=0.0,
        )
        model._peft_model = get_peft_model(model.clip, lora_config)
        model.config.lora_target_modules = targets
        model.config.adapter_path = "adapter"
        model.config.merge_adapter = True
    else:
        for module in projection_modules(model.clip, backbone_family(model.config.backbone_config)):
            module.requires_grad_(True)
        model.config.adapter_path = None
    return model


# ----------------------------------------------------------------------------------------------------- data
def required_columns(use_synthetic_images: bool = True, use_synthetic_captions: bool = True) -> list[str]:
    """The dataset columns a training run reads."""
    columns = [IMAGE_COLUMN, CAPTION_COLUMN]
    if use_synthetic_images:
        columns.append(SYNTHETIC_IMAGE_COLUMN)
    if use_synthetic_captions:
        columns.append(SYNTHETIC_CAPTION_COLUMN)
    return columns


def check_training_columns(column_names: Iterable[str], columns: list[str], what: str = "training dataset"):
    """Raise naming the expected and the present columns when one is missing."""
    column_names = list(column_names)
    missing = [column for column in columns if column not in column_names]
    if missing:
        raise ValueError(
            f"the {what} lacks column(s) {missing}: expected columns {columns} (images as paths, bytes or "
            f"datasets.Image; captions as strings), found {column_names}. Rename columns with "
            "dataset.rename_column, or set the loss weight of a missing synthetic column to 0"
        )


def prepare_training_dataset(
    dataset: "datasets.Dataset", columns: list[str], what: str = "training dataset"
) -> "datasets.Dataset":
    """Check the columns, keep images undecoded (decoding errors then name the row) and add `row_index`.

    Example:

    ```python
    >>> import datasets
    >>> rows = datasets.Dataset.from_dict({"image": ["a.jpg"], "caption": ["a cat"]})
    >>> prepare_training_dataset(rows, ["image", "caption"])[0]
    {'image': 'a.jpg', 'caption': 'a cat', 'row_index': 0}
    ```
    """
    import datasets

    check_training_columns(dataset.column_names, columns, what)
    for column in (IMAGE_COLUMN, SYNTHETIC_IMAGE_COLUMN):
        feature = dataset.features.get(column)
        if isinstance(feature, datasets.Image) and feature.decode:
            dataset = dataset.cast_column(column, datasets.Image(decode=False))
    if ROW_INDEX_COLUMN not in dataset.column_names:
        dataset = dataset.add_column(ROW_INDEX_COLUMN, list(range(len(dataset))))
    return dataset


class PACSDataCollator:
    """Turn rows with `image`, `caption` (and `synthetic_image`, `synthetic_caption`) into model tensors.

    Images (paths, bytes, PIL, arrays or `datasets.Image` dicts) go through the official preprocessing
    (`modeling_pacs.models.inputs.load_and_preprocess`); captions through `PACSModel.tokenize`, the scoring-time text
    pipeline (prompt prefix included). Real and synthetic captions are padded together, so they share one length.
    With `image_sources` (column -> `RowSource`), that column holds row numbers and the batch's images are read
    from the source here, so a training set's image bytes stay on disk until their batch (see `modeling_pacs.data`).

    Example:

    ```python
    >>> from modeling_pacs.testing.pacs import make_tiny_model
    >>> collator = PACSDataCollator(make_tiny_model(variant="clip_s"), use_synthetic_images=False)
    >>> batch = collator([{"image": "cat.jpg", "caption": "a cat", "synthetic_caption": "a cat on a sofa"}])
    >>> sorted(batch)
    ['attention_mask', 'input_ids', 'pixel_values', 'synthetic_attention_mask', 'synthetic_input_ids']
    ```
    """

    def __init__(
        self,
        model: PACSModel,
        use_synthetic_images: bool = True,
        use_synthetic_captions: bool = True,
        image_sources: "dict[str, RowSource] | None" = None,
    ):
        self.model = model
        self.image_size = model.config.backbone_config.vision_config.image_size
        self.preprocess = image_preprocessor(model.config.backbone_config)
        self.use_synthetic_images = use_synthetic_images
        self.use_synthetic_captions = use_synthetic_captions
        self.image_sources = dict(image_sources or {})

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        rows_index = [row.get(ROW_INDEX_COLUMN, position) for position, row in enumerate(rows)]
        image_columns = [IMAGE_COLUMN] + ([SYNTHETIC_IMAGE_COLUMN] if self.use_synthetic_images else [])
        caption_columns = [CAPTION_COLUMN] + ([SYNTHETIC_CAPTION_COLUMN] if self.use_synthetic_captions else [])
        for row in rows:
            check_training_columns(row.keys(), image_columns + caption_columns, "training row")
        batch = {}
        for column in image_columns:
            images = self.batch_images(rows, rows_index, column)
            pixels = [self.load_image(image, index, column) for image, index in zip(images, rows_index)]
            batch[column_key(column, "pixel_values")] = torch.stack(pixels)
        captions = []
        for column in caption_columns:
            for row, index in zip(rows, rows_index):
                if not isinstance(row[column], str):
                    raise TypeError(
                        f"row {index}, column '{column}': got {type(row[column]).__name__} ({row[column]!r}), "
                        "expected a string"
                    )
                captions.append(row[column])
        tokens = self.model.tokenize(captions)
        for position, column in enumerate(caption_columns):
            rows_slice = slice(position * len(rows), (position + 1) * len(rows))
            batch[column_key(column, "input_ids")] = tokens["input_ids"][rows_slice]
            batch[column_key(column, "attention_mask")] = tokens["attention_mask"][rows_slice]
        return batch

    def batch_images(self, rows: list[dict[str, Any]], rows_index: list[int], column: str) -> list[Any]:
        """The column's images of the batch: as the rows hold them, or read from the column's row source, where the
        rows hold row numbers (the image bytes of a batch are read here, and only here)."""
        source = self.image_sources.get(column)
        if source is None:
            return [row[column] for row in rows]
        references = [row[column] for row in rows]
        for reference, index in zip(references, rows_index):
            if isinstance(reference, bool) or not isinstance(reference, int):
                raise TypeError(
                    f"row {index}, column '{column}': got {reference!r}, expected the row number of its image in "
                    f"{source} (rows without an image are skipped when the data is prepared)"
                )
        return source.take_images(column, references)

    def load_image(self, image: Any, row_index: int, column: str) -> torch.Tensor:
        try:
            return self.preprocess(image, row_index)
        except (OSError, ValueError, TypeError) as error:
            raise type(error)(f"row {row_index}, column '{column}': {error}") from error


def column_key(column: str, tensor_name: str) -> str:
    """Batch key of a column's tensor: `pixel_values` for `image`, `synthetic_input_ids` for `synthetic_caption`."""
    return f"synthetic_{tensor_name}" if column.startswith("synthetic_") else tensor_name


# ----------------------------------------------------------------------------------------------------- trainer
class PACSTrainer(Trainer):
    """A `Trainer` whose loss is Eq. 3 over the global batch (all processes' rows are the negatives).

    The model is a `PACSEncoderForTraining`; the data collator a `PACSDataCollator`. Under `torchrun` or
    `accelerate launch` each process encodes its own rows, the embeddings are gathered with their gradient, and every
    process computes the global-batch loss, so 8 processes x 32 rows train exactly the loss of 256 rows on one.

    Example:

    ```python
    >>> trainer = PACSTrainer(model=PACSEncoderForTraining(model), args=args, train_dataset=train,
    ...                       data_collator=PACSDataCollator(model), lambda_v=0.1, lambda_t=0.001)
    >>> trainer.train()
    ```
    """

    def __init__(self, *args, lambda_v: float = 0.1, lambda_t: float = 0.001, loss_type: str = "info_nce", **kwargs):
        if loss_type not in LOSS_TYPES:
            raise ValueError(f"loss_type must be one of {list(LOSS_TYPES)}, got {loss_type!r}")
        super().__init__(*args, **kwargs)
        self.lambda_v = lambda_v
        self.lambda_t = lambda_t
        self.loss_type = loss_type
        backbone = self.accelerator.unwrap_model(self.model).pacs_model.clip
        if loss_type == "sigmoid" and getattr(backbone, "logit_bias", None) is None:
            raise ValueError(
                "loss_type='sigmoid' needs a backbone with a logit_bias (SigLIP); this one has none: use "
                "loss_type='info_nce' (the paper's loss) or a SigLIP model"
            )

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        num_rows = inputs["pixel_values"].shape[0]
        use_synthetic_images = self.lambda_v != 0
        use_synthetic_captions = self.lambda_t != 0
        pixel_values = inputs["pixel_values"]
        if use_synthetic_images:
            pixel_values = torch.cat([pixel_values, inputs["synthetic_pixel_values"]])
        input_ids, attention_mask = inputs["input_ids"], inputs["attention_mask"]
        if use_synthetic_captions:
            input_ids = torch.cat([input_ids, inputs["synthetic_input_ids"]])
            attention_mask = torch.cat([attention_mask, inputs["synthetic_attention_mask"]])
        image_embeds, text_embeds, logit_scale = model(
            pixel_values=pixel_values, input_ids=input_ids, attention_mask=attention_mask
        )
        image_embeds = gather_with_gradient(image_embeds)
        text_embeds = gather_with_gradient(text_embeds)
        # After the gather, each process's rows are [real; synthetic] blocks in rank order: split them back.
        world_size = image_embeds.shape[0] // pixel_values.shape[0]
        image_blocks = image_embeds.view(world_size, -1, image_embeds.shape[-1])
        text_blocks = text_embeds.view(world_size, -1, text_embeds.shape[-1])
        output = pacs_contrastive_loss(
            image_blocks[:, :num_rows].flatten(0, 1),
            text_blocks[:, :num_rows].flatten(0, 1),
            image_blocks[:, num_rows:].flatten(0, 1) if use_synthetic_images else None,
            text_blocks[:, num_rows:].flatten(0, 1) if use_synthetic_captions else None,
            logit_scale=logit_scale,
            lambda_v=self.lambda_v,
            lambda_t=self.lambda_t,
            loss_type=self.loss_type,
            # Frozen, so reading it outside the DDP-wrapped forward is safe.
            logit_bias=getattr(self.accelerator.unwrap_model(model).pacs_model.clip, "logit_bias", None),
        )
        return (output.loss, output) if return_outputs else output.loss

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        # The validation output is the contrastive loss alone: no labels, no logits to collect.
        inputs = self._prepare_inputs(inputs)
        with torch.no_grad(), self.compute_loss_context_manager():
            loss = self.compute_loss(model, inputs)
        return loss.detach(), None, None

    def _remove_unused_columns(self, dataset, description=None):
        # The collator reads the image and caption columns that the encoder's forward signature does not name.
        return dataset


class StepPatienceEarlyStopping(TrainerCallback, ExportableState):
    """Stop when the validation loss has not improved for `patience_steps` optimisation steps
    (docs/spec/pacs.md#training: 1,500).

    transformers' `EarlyStoppingCallback` counts evaluations; the paper counts iterations. The best loss and its step
    are saved in checkpoints, so a resumed run keeps counting from the right step.

    Example:

    ```python
    >>> trainer.add_callback(StepPatienceEarlyStopping(patience_steps=1500))
    ```
    """

    def __init__(self, patience_steps: int = 1500, threshold: float = 0.0, metric: str = "eval_loss"):
        self.patience_steps = patience_steps
        self.threshold = threshold
        self.metric = metric
        self.best_loss = math.inf
        self.best_step = 0

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        loss = (metrics or {}).get(self.metric)
        if loss is None:
            return
        if loss < self.best_loss - self.threshold:
            self.best_loss, self.best_step = float(loss), state.global_step
        elif state.global_step - self.best_step >= self.patience_steps:
            logger.info(
                f"early stopping at step {state.global_step}: {self.metric} has not improved on {self.best_loss:.6f} "
                f"(step {self.best_step}) for {state.global_step - self.best_step} steps"
            )
            control.should_training_stop = True

    def state(self) -> dict:
        return {
            "args": {"patience_steps": self.patience_steps, "threshold": self.threshold, "metric": self.metric},
            "attributes": {"best_loss": self.best_loss, "best_step": self.best_step},
        }


# ----------------------------------------------------------------------------------------------------- data
TRAINING_DATA_RECORD = "training_data.json"


@dataclass
class PreparedTrainingData:
    """The splits a run trains and validates on, the row sources their image columns refer to, and the digest of
    each split's rows (a resumed run checks them: the same digest means the same rows, hence the same data order)."""

    train: "datasets.Dataset"
    validation: "datasets.Dataset | None"
    image_sources: "dict[str, RowSource]"
    digests: dict[str, dict[str, Any]]


def load_training_data(
    columns: list[str],
    data_dir: str | os.PathLike,
    *,
    dataset: str | None = None,
    train_split: str = "train",
    validation_split: str | None = "validation",
    karpathy_json: str | None = None,
    image_root: str | None = None,
    synthetic_data: str | None = None,
    max_train_samples: int | None = None,
    max_eval_samples: int | None = None,
    skip_bad_images: bool = False,
    decode_images: bool = True,
) -> PreparedTrainingData:
    """The training data of `scripts/train_pacs.py`, memory-mapped, with no image held in memory.

    COCO Karpathy (`karpathy_json` + `image_root` + `synthetic_data`): captions of `train` + `restval` (training) and
    `val` (validation) joined by key with the synthetic shards (`modeling_pacs.data.karpathy_training_rows`); the
    row tables go to `data_dir`. Or any `datasets` dataset with the columns `image`, `caption`, `synthetic_image`,
    `synthetic_caption` (`dataset`: a Hub id or a `save_to_disk` folder), memory-mapped by `datasets` itself.

    Every split is checked before it is returned ([`validate_training_split`]): rows, captions, and every image
    decoded once, unless `decode_images=False`; `skip_bad_images` drops (and logs) rows whose image does not decode
    instead of refusing the data.
    """
    from ..data import karpathy_training_rows, load_datasets, select_split

    for path, option in (
        (karpathy_json, "--karpathy_json"),
        (image_root, "--image_root"),
        (synthetic_data, "--synthetic_data"),
    ):
        check_data_path(path, option)
    if dataset and looks_like_local_path(dataset):
        check_data_path(dataset, "--dataset")
    image_sources: dict = {}
    if karpathy_json:
        if not (image_root and synthetic_data):
            raise ValueError("--karpathy_json needs --image_root and --synthetic_data")
        prepared = karpathy_training_rows(
            karpathy_json,
            image_root,
            synthetic_data,
            data_dir,
            use_synthetic_images=SYNTHETIC_IMAGE_COLUMN in columns,
            use_synthetic_captions=SYNTHETIC_CAPTION_COLUMN in columns,
        )
        train, validation = prepared["train"].dataset, prepared["validation"].dataset
        image_sources = prepared["train"].image_sources
        digests = {name: {"rows": len(rows.dataset), "sha256": rows.digest} for name, rows in prepared.items()}
    elif dataset:
        loaded = load_datasets(dataset)
        train = select_split(loaded, train_split, dataset)
        validation = loaded.get(validation_split) if validation_split and train is not loaded else None
        digests = {
            name: {"rows": len(split), "fingerprint": split._fingerprint}
            for name, split in (("train", train), ("validation", validation))
            if split is not None
        }
    else:
        raise ValueError("give --dataset, or --karpathy_json with --image_root and --synthetic_data")
    if max_train_samples is not None:
        train = train.select(range(min(max_train_samples, len(train))))
        digests["train"]["first_rows"] = len(train)
    if validation is not None and max_eval_samples is not None:
        validation = validation.select(range(min(max_eval_samples, len(validation))))
        digests["validation"]["first_rows"] = len(validation)
    file = dataset or karpathy_json
    train = prepare_training_dataset(train, columns, f"training data {file} (split '{train_split}')")
    train = validate_training_split(train, columns, image_sources, file, train_split, skip_bad_images, decode_images)
    if validation is not None:
        split = validation_split if dataset else "val"
        validation = prepare_training_dataset(validation, columns, f"validation data {file} (split '{split}')")
        validation = validate_training_split(
            validation, columns, image_sources, file, split, skip_bad_images, decode_images
        )
    return PreparedTrainingData(train, validation, image_sources, digests)


def validate_training_split(
    rows: "datasets.Dataset",
    columns: list[str],
    image_sources: "dict[str, RowSource]",
    file: Any,
    split: str,
    skip_bad_images: bool = False,
    decode_images: bool = True,
) -> "datasets.Dataset":
    """Refuse a split that cannot be trained on before any step runs: no rows, a caption that is not a non-empty
    string, an image that does not decode (`modeling_pacs.data.validation`). With `skip_bad_images`, rows whose image
    does not decode are dropped and counted in a log line instead."""
    check_not_empty(len(rows), file, split)
    row_numbers = rows[ROW_INDEX_COLUMN]
    chunk = 10_000
    for column in (CAPTION_COLUMN, SYNTHETIC_CAPTION_COLUMN):
        if column in columns:
            for start in range(0, len(rows), chunk):
                values = rows[start : start + chunk][column]
                check_captions(zip(row_numbers[start : start + chunk], values), file, split, column)
    bad: set[int] = set()
    for column in (IMAGE_COLUMN, SYNTHETIC_IMAGE_COLUMN):
        if column not in columns or not decode_images:
            continue
        source = image_sources.get(column)

        def read(positions: range, column: str = column, source=source) -> list:
            values = rows[positions.start : positions.stop][column]
            return source.take_images(column, values) if source is not None else values

        bad.update(check_images(row_numbers, read, file, split, column, skip_bad_images))
    if bad:
        rows = rows.select([position for position, row in enumerate(row_numbers) if row not in bad])
        check_not_empty(len(rows), file, f"{split}, after skipping the rows whose image does not decode")
    return rows


class TrainingDataRecord(TrainerCallback):
    """Writes the digests of the training rows into every checkpoint, for `check_resumed_data`."""

    def __init__(self, digests: dict[str, dict[str, Any]]):
        self.digests = digests

    def on_save(self, args, state, control, **kwargs):
        checkpoint = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero and checkpoint.is_dir():
            write_text_atomically(checkpoint / TRAINING_DATA_RECORD, [json.dumps(self.digests, indent=2) + "\n"])


def check_resumed_data(checkpoint: str | os.PathLike, digests: dict[str, dict[str, Any]]):
    """Refuse to resume from a checkpoint that was trained on other rows: the data order would silently differ.

    A checkpoint written before this record existed is resumed with a log line.
    """
    record = Path(checkpoint) / TRAINING_DATA_RECORD
    if not record.is_file():
        logger.warning(f"{checkpoint} has no {TRAINING_DATA_RECORD}: the training rows cannot be checked; resuming")
        return
    recorded = json.loads(record.read_text(encoding="utf-8"))
    changed = [name for name in sorted(set(recorded) | set(digests)) if recorded.get(name) != digests.get(name)]
    if changed:
        details = "; ".join(f"{name}: {recorded.get(name)} -> {digests.get(name)}" for name in changed)
        raise ValueError(
            f"the training data differs from the data {checkpoint} was trained on ({details}): resuming would change "
            "the rows and their order. Resume with the same data and options (--max_train_samples included), or "
            "start a new run in another --output_dir"
        )


__all__ = [
    "PreparedTrainingData",
    "TrainingDataRecord",
    "check_resumed_data",
    "load_training_data",
    "RECIPES",
    "PACSDataCollator",
    "PACSEncoderForTraining",
    "PACSLossOutput",
    "PACSTrainer",
    "StepPatienceEarlyStopping",
    "TrainingRecipe",
    "check_training_columns",
    "LOSS_TYPES",
    "gather_with_gradient",
    "pacs_contrastive_loss",
    "prepare_model_for_training",
    "prepare_training_dataset",
    "required_columns",
    "sigmoid_contrastive_loss",
    "symmetric_info_nce",
]
