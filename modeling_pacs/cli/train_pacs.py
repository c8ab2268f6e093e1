#!/usr/bin/env python3
"""Train PAC-S++ (LoRA, lambda_v=0.1, lambda_t=0.001) or PAC-S (projections, 0.05 / 0.1) with positive-augmented
contrastive learning (docs/spec/pacs.md#training), and write a Hub-ready model directory.

Data: COCO Karpathy (`--karpathy_json dataset_coco.json --image_root COCO_DIR --synthetic_data SHARDS`) or any
`datasets` dataset with the columns `image`, `caption`, `synthetic_image`, `synthetic_caption`
(`--dataset NAME_OR_DIR`, with `--train_split` / `--validation_split`).

Examples:

    # one process
    python scripts/train_pacs.py --recipe pac_s_pp --karpathy_json dataset_coco.json --image_root coco/ \\
        --synthetic_data synthetic/ --output_dir runs/pacs_pp --per_device_train_batch_size 256

    # 8 GPUs, global batch 256: the contrastive negatives come from all 256 rows
    torchrun --nproc_per_node 8 scripts/train_pacs.py --recipe pac_s_pp ... --per_device_train_batch_size 32

    # continue an interrupted run
    python scripts/train_pacs.py ... --resume_from_checkpoint runs/pacs_pp/checkpoint-3000
"""

import logging
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from transformers import HfArgumentParser, TrainingArguments, set_seed

from modeling_pacs.errors import InputError
from modeling_pacs.hub import save_remote_code_model
from modeling_pacs.loading import load_model
from modeling_pacs.logs import setup_command_logging
from modeling_pacs.output_paths import check_output_directory
from modeling_pacs.pacs.model_card import write_trained_model_card
from modeling_pacs.pacs.training import (
    LOSS_TYPES,
    RECIPES,
    SYNTHETIC_CAPTION_COLUMN,
    SYNTHETIC_IMAGE_COLUMN,
    PACSDataCollator,
    PACSEncoderForTraining,
    PACSTrainer,
    StepPatienceEarlyStopping,
    TrainingDataRecord,
    check_resumed_data,
    load_training_data,
    prepare_model_for_training,
    required_columns,
)
from modeling_pacs.registry import PRETRAINED_MODELS, parse_tiny_alias
from modeling_pacs.tokenization import build_processor

from .arguments import add_example
from .errors import reports_errors

logger = logging.getLogger("pacs_pp.train_pacs")


@dataclass
class ModelArguments:
    """Which model to start from and which recipe to train."""

    model_name_or_path: str = field(
        default="openai/clip-vit-base-patch32",
        metadata={
            "help": "CLIP or SigLIP Hub id or directory (e.g. google/siglip-base-patch16-224), a PAC-S++ model "
            "directory, or an alias of modeling_pacs.loading"
        },
    )
    recipe: str = field(default="pac_s_pp", metadata={"help": "pac_s_pp (LoRA) or pac_s (final projections only)"})
    lambda_v: float | None = field(default=None, metadata={"help": "weight of L(V',T); default: the recipe's"})
    lambda_t: float | None = field(default=None, metadata={"help": "weight of L(V,T'); default: the recipe's"})
    loss: str = field(
        default="info_nce",
        metadata={"help": "contrastive term: info_nce (the paper's, Eq. 1) or sigmoid (SigLIP's; SigLIP backbones)"},
    )
    final_model_dir: str | None = field(
        default=None, metadata={"help": "where the Hub-ready model is written; default: OUTPUT_DIR/model"}
    )


@dataclass
class DataArguments:
    """Where the (image, caption, synthetic image, synthetic caption) tuples come from."""

    dataset: str | None = field(
        default=None, metadata={"help": "a datasets Hub id, a save_to_disk directory, or a data directory"}
    )
    train_split: str = field(default="train")
    validation_split: str | None = field(default="validation")
    karpathy_json: str | None = field(default=None, metadata={"help": "COCO Karpathy dataset_coco.json"})
    image_root: str | None = field(default=None, metadata={"help": "COCO image folder (holds train2014/, val2014/)"})
    synthetic_data: str | None = field(
        default=None,
        metadata={
            "help": "synthetic shards: a save_to_disk directory or a folder of .parquet/.jsonl files with rows "
            "{sentid, synthetic_image} (image generated from that caption) and {cocoid, synthetic_caption}"
        },
    )
    max_train_samples: int | None = field(default=None)
    max_eval_samples: int | None = field(default=None)
    skip_bad_images: bool = field(
        default=False,
        metadata={
            "help": "drop rows whose image does not decode (logged with a count) instead of refusing the data; every "
            "image is decoded once before training either way"
        },
    )
    early_stopping_steps: int = field(
        default=1500, metadata={"help": "stop when the validation loss has not improved for this many steps"}
    )


@reports_errors("train_pacs")
def main(argv: list[str] | None = None):
    parser = HfArgumentParser((ModelArguments, DataArguments, TrainingArguments))
    # docs/spec/pacs.md#training: AdamW at a constant 1e-4 (the paper names no schedule); command-line flags override
    # these.
    parser.set_defaults(learning_rate=1e-4, lr_scheduler_type="constant", optim="adamw_torch")
    add_example(
        parser,
        "python scripts/train_pacs.py --recipe pac_s_pp --karpathy_json dataset_coco.json --image_root coco/",
    )
    model_args, data_args, training_args = parser.parse_args_into_dataclasses(args=argv)
    setup_command_logging(level=logging.INFO if training_args.should_log else logging.WARNING)
    if model_args.recipe not in RECIPES:
        raise InputError(f"--recipe must be one of {sorted(RECIPES)}, got {model_args.recipe!r}")
    if model_args.loss not in LOSS_TYPES:
        raise InputError(f"--loss must be one of {list(LOSS_TYPES)}, got {model_args.loss!r}")
    recipe = RECIPES[model_args.recipe]
    lambda_v = recipe.lambda_v if model_args.lambda_v is None else model_args.lambda_v
    lambda_t = recipe.lambda_t if model_args.lambda_t is None else model_args.lambda_t
    columns = required_columns(lambda_v != 0, lambda_t != 0)

    for name, value in (("--lambda_v", lambda_v), ("--lambda_t", lambda_t)):
        if not math.isfinite(value) or value < 0:
            raise InputError(f"{name} must be a finite number >= 0, got {value}")
    if data_args.early_stopping_steps < 1:
        raise InputError(f"--early_stopping_steps must be >= 1, got {data_args.early_stopping_steps}")
    try:
        check_output_directory(
            training_args.output_dir,
            inputs=[data_args.karpathy_json, data_args.image_root, data_args.synthetic_data, data_args.dataset],
            allow_existing=True,  # checkpoints of this run live there: --resume_from_checkpoint continues them
        )
    except ValueError as error:
        raise InputError(f"--output_dir: {error}") from None

    with reports_errors("train_pacs", ValueError, TypeError, KeyError, FileNotFoundError):
        data = load_training_data(
            columns,
            Path(training_args.output_dir) / "training-data",
            dataset=data_args.dataset,
            train_split=data_args.train_split,
            validation_split=data_args.validation_split,
            karpathy_json=data_args.karpathy_json,
            image_root=data_args.image_root,
            synthetic_data=data_args.synthetic_data,
            max_train_samples=data_args.max_train_samples,
            max_eval_samples=data_args.max_eval_samples,
            skip_bad_images=data_args.skip_bad_images,
        )
        if training_args.resume_from_checkpoint:
            check_resumed_data(training_args.resume_from_checkpoint, data.digests)
    train, validation = data.train, data.validation
    # Seed before the model is built: the LoRA matrices are initialised randomly when the adapter is attached, and
    # Trainer seeds only later, so two runs with the same --seed would otherwise start from different weights.
    set_seed(training_args.seed)
    model = load_model(model_args.model_name_or_path)
    if model_args.loss == "sigmoid" and getattr(model.clip, "logit_bias", None) is None:
        raise InputError("--loss sigmoid needs a SigLIP backbone (it has the logit_bias): use --loss info_nce")
    name = model_args.model_name_or_path
    if not (Path(name).is_dir() or parse_tiny_alias(name)):
        # The adapter's adapter_config.json names the Hub id of the weights it was trained on.
        model.config.base_model_id = PRETRAINED_MODELS.get(name, name)
    model = prepare_model_for_training(model, recipe).train()
    collator = PACSDataCollator(
        model,
        use_synthetic_images=SYNTHETIC_IMAGE_COLUMN in columns,
        use_synthetic_captions=SYNTHETIC_CAPTION_COLUMN in columns,
        image_sources=data.image_sources,
    )
    callbacks = [TrainingDataRecord(data.digests)]
    if validation is not None and training_args.eval_strategy != "no":
        callbacks.append(StepPatienceEarlyStopping(patience_steps=data_args.early_stopping_steps))
    trainer = PACSTrainer(
        model=PACSEncoderForTraining(model),
        args=training_args,
        train_dataset=train,
        eval_dataset=validation,
        data_collator=collator,
        callbacks=callbacks,
        lambda_v=lambda_v,
        lambda_t=lambda_t,
        loss_type=model_args.loss,
    )
    result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    metrics = dict(result.metrics)
    if validation is not None:
        metrics.update(trainer.evaluate())
    trainer.log_metrics("train", metrics)
    trainer.save_metrics("all", metrics)
    if trainer.is_world_process_zero():
        final_dir = Path(model_args.final_model_dir or Path(training_args.output_dir) / "model")
        save_remote_code_model(model, final_dir, processor=build_processor(model.config, model.tokenizer))
        write_trained_model_card(
            final_dir, model, model_args.model_name_or_path, recipe, lambda_v, lambda_t, model_args.loss, metrics
        )
        logger.info(f"Hub-ready model written to {final_dir}")
    return metrics


if __name__ == "__main__":
    main(sys.argv[1:])
