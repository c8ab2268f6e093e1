"""Train Pearl on cached features (docs/spec/pearl.md#training): Spica layout by default, Nebula / Polaris with
--layout.

    python scripts/train_pearl.py --data data/ --cache features/ --model_name_or_path PEARL_DIR \
        --output_dir runs/pearl
    python scripts/train_pearl.py ... --resume_from_checkpoint last   # the last checkpoint in --output_dir

--model_name_or_path is a Pearl directory (e.g. the one the features were extracted with): its config (encoders,
sizes) is used, its weights are not (training starts fresh, HadamardNets from the shipped multiplication
pretraining). The best checkpoint by validation Kendall tau-c is saved to OUTPUT_DIR/best with the encoders folder
copied from --model_name_or_path. Options follow transformers' TrainingArguments spelling, as every Trainer-based
command of the package.
"""

import argparse
import shutil
import sys
from pathlib import Path

from modeling_pacs.data.validation import check_data_path
from modeling_pacs.hub import save_remote_code_model
from modeling_pacs.logs import setup_command_logging
from modeling_pacs.models.configuration_pearl import PearlConfig
from modeling_pacs.output_paths import check_output_directory
from modeling_pacs.pearl.features import FeatureCache
from modeling_pacs.pearl.training import (
    PEARL_RECIPE,
    PearlDataCollator,
    PearlTrainer,
    check_rows_in_cache,
    new_pearl_model,
    pearl_training_arguments,
)
from modeling_pacs.supervised.data import LAYOUTS, RowError, in_split, read_rows, split_paths, validate_rows

from .arguments import add_example, add_former_flag, add_renamed_argument, add_verbose_argument
from .errors import reports_errors


@reports_errors("train_pearl")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--layout", choices=sorted(LAYOUTS), default="spica")
    parser.add_argument("--cache", type=Path, required=True, help="feature cache of extract_pearl_features.py")
    add_renamed_argument(
        parser, "--model_name_or_path", "--init", type=Path, required=True,
        help="Pearl directory giving the config and encoders",
    )  # fmt: skip
    add_renamed_argument(parser, "--output_dir", "--output", type=Path, required=True)
    add_renamed_argument(parser, "--num_train_epochs", "--epochs", type=float, default=PEARL_RECIPE["num_train_epochs"])
    add_renamed_argument(
        parser, "--batch_size", "--batch-size", type=int, default=PEARL_RECIPE["per_device_train_batch_size"]
    )
    add_renamed_argument(
        parser, "--learning_rate", "--learning-rate", type=float, default=PEARL_RECIPE["learning_rate"]
    )
    add_renamed_argument(parser, "--warmup_steps", "--warmup-steps", type=int, default=PEARL_RECIPE["warmup_steps"])
    resume = parser.add_argument(
        "--resume_from_checkpoint", help="'last' (the newest checkpoint in --output_dir) or a checkpoint-N folder"
    )
    add_former_flag(parser, "--resume", resume, "last")
    parser.add_argument("--overwrite", action="store_true", help="allow a non-empty --output_dir without resuming")
    add_example(
        parser,
        "python scripts/train_pearl.py --data data/ --cache features/ --model_name_or_path PEARL_DIR "
        "--output_dir runs/pearl",
    )
    add_verbose_argument(parser)
    args = parser.parse_args(argv)
    setup_command_logging(args.verbose)
    if args.num_train_epochs <= 0 or args.batch_size <= 0 or args.learning_rate <= 0 or args.warmup_steps < 0:
        parser.error("--num_train_epochs, --batch_size and --learning_rate must be > 0, --warmup_steps >= 0")
    try:  # the project's place rules; resuming into the folder (or writing over it with --overwrite) is this script's
        check_output_directory(
            args.output_dir, inputs=[args.data, args.cache, args.model_name_or_path], allow_existing=True
        )
    except ValueError as error:
        parser.error(str(error))
    if (
        args.output_dir.is_dir()
        and any(args.output_dir.iterdir())
        and not (args.resume_from_checkpoint or args.overwrite)
    ):
        parser.error(
            f"--output_dir {args.output_dir} is not empty: pass --resume_from_checkpoint last to continue, "
            "or --overwrite"
        )
    # Every row is checked, and found in the feature cache, before the model is built and any step runs.
    with reports_errors("train_pearl", ValueError, FileNotFoundError):  # RowError, TrainingDataError
        for path, option in (
            (args.data, "--data"),
            (args.cache, "--cache"),
            (args.model_name_or_path, "--model_name_or_path"),
        ):
            check_data_path(path, option)
        paths = split_paths(args.data, args.layout)
        if not {"train", "val"} <= set(paths):
            parser.error(f"{args.data} needs {args.layout}_train.csv and {args.layout}_val.csv")
        splits = {}
        for split in ("train", "val"):
            try:
                rows = read_rows(paths[split], args.layout)
            except RowError as error:
                raise in_split(error, split, paths[split]) from None
            splits[split] = validate_rows(rows, paths[split].name, split, args.layout)
        cache = FeatureCache(args.cache)
        for split, rows in splits.items():
            check_rows_in_cache(rows, cache, paths[split].name, split, args.layout)
    train_rows, val_rows = splits["train"], splits["val"]
    config = PearlConfig.from_pretrained(args.model_name_or_path)
    model = new_pearl_model(config)
    training_args = pearl_training_arguments(
        str(args.output_dir),
        num_train_epochs=args.num_train_epochs,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        warmup_steps=args.warmup_steps,
    )
    trainer = PearlTrainer(
        model=model,
        args=training_args,
        train_dataset=train_rows,
        eval_dataset=val_rows,
        data_collator=PearlDataCollator(cache, config),
    )
    resume = args.resume_from_checkpoint
    trainer.train(resume_from_checkpoint=True if resume == "last" else resume)
    best = args.output_dir / "best"
    save_remote_code_model(trainer.model, best)
    if (args.model_name_or_path / "encoders").is_dir() and not (best / "encoders").exists():
        shutil.copytree(args.model_name_or_path / "encoders", best / "encoders")
    metrics = trainer.evaluate()
    print(f"best model saved to {best}; validation Kendall tau-c {metrics['eval_kendall_c']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
