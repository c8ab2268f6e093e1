#!/usr/bin/env python3
"""Train Polos on Polaris (docs/spec/polos.md#training) and write a Hub-ready PolosModel directory.

The code's recipe by default (head + ScalarMix trained, encoders frozen, summed MSE, Adam lr 3e-5, batch 64 x 4
accumulation, clip 1.0, seed 42) with the paper's early stopping (validation Kendall tau-c, patience 5);
`--early_stopping code` selects the released code's (Pearson, patience 1).

Data: the original CSVs (`--train data_en/polaris/polaris_train.csv --validation .../polaris_val.csv`, images in
`images/` beside them or `--image_root`) or the Hub parquet files (`--train train.parquet --validation val.parquet`).
The starting model is a Polos directory (e.g. from `pacs-pp convert-polos`, or `tiny:polos` for a smoke run).

Continue an interrupted run:

    python scripts/train_polos.py ... --output_dir runs/polos --resume_from_checkpoint runs/polos/checkpoint-300
"""

import argparse
import sys
from pathlib import Path

from modeling_pacs.cli.arguments import (
    add_example,
    add_renamed_argument,
    add_verbose_argument,
    positive_float,
    positive_int,
)
from modeling_pacs.cli.errors import reports_errors
from modeling_pacs.errors import InputError
from modeling_pacs.loading import load_model
from modeling_pacs.logs import setup_command_logging
from modeling_pacs.models.modeling_polos import PolosModel
from modeling_pacs.polos.training import (
    EARLY_STOPPING,
    NORMALIZATIONS,
    PolarisCollator,
    PolosTrainer,
    polos_training_arguments,
    prepare_polos_for_training,
    read_polaris,
)
from modeling_pacs.supervised.data import read_training_splits
from modeling_pacs.supervised.training import train_and_save


@reports_errors("train_polos")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_renamed_argument(
        parser, "--model_name_or_path", "--model", required=True,
        help="Polos directory, Hub id or 'tiny:polos' to start from",
    )  # fmt: skip
    parser.add_argument("--train", required=True, type=Path, help="Polaris train split (.csv or .parquet)")
    parser.add_argument("--validation", required=True, type=Path, help="Polaris validation split (.csv or .parquet)")
    parser.add_argument("--image_root", type=Path, help="CSV layout: image folder (default: images/ beside the CSV)")
    parser.add_argument("--output_dir", required=True, type=Path, help="checkpoints, and the final model in final/")
    parser.add_argument("--early_stopping", choices=sorted(EARLY_STOPPING), default="paper")
    parser.add_argument("--normalization", choices=NORMALIZATIONS, default="official")
    parser.add_argument("--cache_features", action="store_true", help="encode each image and text once (no dropout)")
    parser.add_argument("--batch_size", type=positive_int, default=64)
    parser.add_argument("--gradient_accumulation_steps", type=positive_int, default=4)
    parser.add_argument("--learning_rate", type=positive_float, default=3e-5)
    parser.add_argument("--num_train_epochs", type=positive_int, default=100)
    parser.add_argument("--resume_from_checkpoint", help="a checkpoint-N folder of --output_dir")
    parser.add_argument(
        "--skip_bad_images",
        action="store_true",
        help="drop rows whose image does not decode (logged with a count) instead of refusing the data",
    )
    add_example(
        parser,
        "python scripts/train_polos.py --model_name_or_path polos-init --train polaris_train.csv "
        "--validation polaris_val.csv --output_dir runs/polos",
    )
    add_verbose_argument(parser)
    args = parser.parse_args(argv)
    setup_command_logging(args.verbose)

    # Every row and image is checked before the model is built and any step runs.
    with reports_errors("train_polos", ValueError, FileNotFoundError):  # RowError, TrainingDataError

        def read(path: Path) -> tuple[list[dict], str]:
            return read_polaris(path, args.image_root), "polaris_csv" if path.suffix.lower() == ".csv" else "polaris"

        splits = read_training_splits(args.train, args.validation, read, args.skip_bad_images)
    train, validation = splits["train"], splits["validation"]
    model = load_model(args.model_name_or_path)
    if not isinstance(model, PolosModel):
        raise InputError(f"--model_name_or_path '{args.model_name_or_path}' is not a Polos model (model_type polos)")
    training_arguments, callback = polos_training_arguments(
        args.output_dir,
        early_stopping=args.early_stopping,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        learning_rate=args.learning_rate,
        num_train_epochs=args.num_train_epochs,
    )
    trainer = PolosTrainer(
        model=prepare_polos_for_training(model),
        args=training_arguments,
        train_dataset=train,
        eval_dataset=validation,
        data_collator=PolarisCollator(),
        callbacks=[callback],
        normalization=args.normalization,
        cache_features=args.cache_features,
    )
    return train_and_save(trainer, args.resume_from_checkpoint, args.output_dir)


if __name__ == "__main__":
    sys.exit(main())
