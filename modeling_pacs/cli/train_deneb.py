#!/usr/bin/env python3
"""Train DENEB on Nebula (or Polaris) (docs/spec/deneb.md#training) and write a Hub-ready DenebModel directory.

The authors' recipe by default (CLIP and RoBERTa frozen; ScalarMix, pair projections, Sim-Vec transformers and head
trained; summed Huber loss, delta 0.5; Adam lr 3e-6, linear warm-up over 1000 steps then linear decay; batch 16,
gradient clipping 1.0, seed 12; early stopping on validation Kendall tau-c, patience 1; each batch's texts normalised
together, `--normalization official`).

Data (`--layout`, default from the file's suffix: `.csv` -> polaris_csv, otherwise nebula):
  nebula        file_name, mt, refs, human_score (.parquet, .jsonl or .csv); images under --image_root
                (default: the data file's folder)
  polaris_csv   the authors' CSVs: mt, refs, score, imgid; images under --image_root (default: images/ beside the
                CSV)
  polaris       yuwd/Polaris's parquet files (img, cand, refs, human_score), images inside the file
Every row needs at least one non-empty reference. The starting model is a DENEB directory (e.g. from
`pacs-pp convert-deneb`, or `tiny:deneb` for a smoke run).

Progress: a bar per epoch (hidden by --disable_tqdm) and the validation correlations after each epoch. Continue an
interrupted run from its last checkpoint (the steps already done are not repeated):

    python scripts/train_deneb.py ... --output_dir runs/deneb --resume_from_checkpoint runs/deneb/checkpoint-300
"""

import argparse
import sys
from pathlib import Path

from modeling_pacs.cli.arguments import add_example, add_verbose_argument, positive_float, positive_int
from modeling_pacs.cli.errors import reports_errors
from modeling_pacs.data.validation import check_data_path
from modeling_pacs.deneb.training import (
    LAYOUTS,
    NORMALIZATIONS,
    DenebCollator,
    DenebTrainer,
    deneb_training_arguments,
    prepare_deneb_for_training,
    read_deneb_rows,
)
from modeling_pacs.errors import InputError
from modeling_pacs.loading import load_model
from modeling_pacs.logs import setup_command_logging
from modeling_pacs.models.modeling_deneb import DenebModel
from modeling_pacs.supervised.data import read_training_splits
from modeling_pacs.supervised.training import train_and_save


def data_layout(path: Path, layout: str | None) -> str:
    """`--layout`, or the layout the file's suffix implies (`.csv`: the authors' CSVs; otherwise Nebula's)."""
    if layout is not None:
        return layout
    return "polaris_csv" if path.suffix.lower() == ".csv" else "nebula"


def image_folder(path: Path, layout: str, image_root: Path | None) -> Path | None:
    """Where the file's image names resolve: `--image_root`, else `images/` beside an authors' CSV or the folder of
    a Nebula file; Polaris's parquet files hold their images."""
    if layout == "polaris":
        return None
    if image_root is not None:
        return image_root
    return path.parent / "images" if layout == "polaris_csv" else path.parent


@reports_errors("train_deneb")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--model_name_or_path", required=True, help="DENEB directory, Hub id or 'tiny:deneb' to start from"
    )
    parser.add_argument("--train", required=True, type=Path, help="train split (.parquet, .jsonl or .csv)")
    parser.add_argument("--validation", required=True, type=Path, help="validation split (same layout as --train)")
    parser.add_argument("--layout", choices=LAYOUTS, help="the files' columns (default: from the suffix, see above)")
    parser.add_argument("--image_root", type=Path, help="folder the image names resolve under (see above)")
    parser.add_argument("--output_dir", required=True, type=Path, help="checkpoints, and the final model in final/")
    parser.add_argument("--normalization", choices=NORMALIZATIONS, default="official")
    parser.add_argument("--batch_size", type=positive_int, default=16)
    parser.add_argument("--gradient_accumulation_steps", type=positive_int, default=1)
    parser.add_argument("--learning_rate", type=positive_float, default=3e-6)
    parser.add_argument("--warmup_steps", type=int, default=1000, help="linear warm-up steps (default: 1000)")
    parser.add_argument("--num_train_epochs", type=positive_int, default=100)
    parser.add_argument("--resume_from_checkpoint", help="a checkpoint-N folder of --output_dir")
    parser.add_argument("--disable_tqdm", action="store_true", help="no progress bars (logs and metrics only)")
    parser.add_argument(
        "--skip_bad_images",
        action="store_true",
        help="drop rows whose image does not decode (logged with a count) instead of refusing the data",
    )
    add_example(
        parser,
        "python scripts/train_deneb.py --model_name_or_path deneb-init --train nebula/train.parquet "
        "--validation nebula/validation.parquet --output_dir runs/deneb",
    )
    add_verbose_argument(parser)
    args = parser.parse_args(argv)
    setup_command_logging(args.verbose)
    if args.warmup_steps < 0:
        parser.error(f"--warmup_steps: must be an integer >= 0, got {args.warmup_steps}")

    # Every row and image is checked before the model is built and any step runs.
    with reports_errors("train_deneb", ValueError, FileNotFoundError):  # RowError, TrainingDataError

        def read(path: Path) -> tuple[list[dict], str]:
            layout = data_layout(path, args.layout)
            return read_deneb_rows(path, layout, image_folder(path, layout, args.image_root)), layout

        splits = read_training_splits(args.train, args.validation, read, args.skip_bad_images)
        check_data_path(args.resume_from_checkpoint, "--resume_from_checkpoint")
    model = load_model(args.model_name_or_path)
    if not isinstance(model, DenebModel):
        raise InputError(f"--model_name_or_path '{args.model_name_or_path}' is not a DENEB model (model_type deneb)")
    training_arguments, callback = deneb_training_arguments(
        args.output_dir,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        learning_rate=args.learning_rate,
        warmup_steps=args.warmup_steps,
        num_train_epochs=args.num_train_epochs,
        disable_tqdm=args.disable_tqdm,
    )
    trainer = DenebTrainer(
        model=prepare_deneb_for_training(model),
        args=training_arguments,
        train_dataset=splits["train"],
        eval_dataset=splits["validation"],
        data_collator=DenebCollator(),
        callbacks=[callback],
        normalization=args.normalization,
    )
    return train_and_save(trainer, args.resume_from_checkpoint, args.output_dir)


if __name__ == "__main__":
    sys.exit(main())
