"""Train Pearl on cached features (docs/spec/pearl.md#training): Spica layout by default, Nebula / Polaris with
--layout.

    python scripts/train_pearl.py --data data/ --cache features/ --init PEARL_DIR --output runs/pearl
    python scripts/train_pearl.py ... --resume            # continue from the last checkpoint in --output

--init is a Pearl directory (e.g. the one the features were extracted with): its config (encoders, sizes) is used,
its weights are not (training starts fresh, HadamardNets from the shipped multiplication pretraining). The best
checkpoint by validation Kendall tau-c is saved to OUTPUT/best with the encoders folder linked from --init.
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

from .arguments import add_example, add_verbose_argument
from .errors import reports_errors


@reports_errors("train_pearl")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--layout", choices=sorted(LAYOUTS), default="spica")
    parser.add_argument("--cache", type=Path, required=True, help="feature cache of extract_pearl_features.py")
    parser.add_argument("--init", type=Path, required=True, help="Pearl directory giving the config and encoders")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--epochs", type=float, default=PEARL_RECIPE["num_train_epochs"])
    parser.add_argument("--batch-size", type=int, default=PEARL_RECIPE["per_device_train_batch_size"])
    parser.add_argument("--learning-rate", type=float, default=PEARL_RECIPE["learning_rate"])
    parser.add_argument("--warmup-steps", type=int, default=PEARL_RECIPE["warmup_steps"])
    parser.add_argument("--resume", action="store_true", help="resume from the last checkpoint in --output")
    parser.add_argument("--overwrite", action="store_true", help="allow a non-empty --output without --resume")
    add_example(
        parser, "python scripts/train_pearl.py --data data/ --cache features/ --init PEARL_DIR --output runs/pearl"
    )
    add_verbose_argument(parser)
    args = parser.parse_args(argv)
    setup_command_logging(args.verbose)
    if args.epochs <= 0 or args.batch_size <= 0 or args.learning_rate <= 0 or args.warmup_steps < 0:
        parser.error("--epochs, --batch-size and --learning-rate must be > 0, --warmup-steps >= 0")
    try:  # the project's place rules; resuming into the folder (or writing over it with --overwrite) is this script's
        check_output_directory(args.output, inputs=[args.data, args.cache, args.init], allow_existing=True)
    except ValueError as error:
        parser.error(str(error))
    if args.output.is_dir() and any(args.output.iterdir()) and not (args.resume or args.overwrite):
        parser.error(f"--output {args.output} is not empty: pass --resume to continue or --overwrite")
    # Every row is checked, and found in the feature cache, before the model is built and any step runs.
    with reports_errors("train_pearl", ValueError, FileNotFoundError):  # RowError, TrainingDataError
        for path, option in ((args.data, "--data"), (args.cache, "--cache"), (args.init, "--init")):
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
    config = PearlConfig.from_pretrained(args.init)
    model = new_pearl_model(config)
    training_args = pearl_training_arguments(
        str(args.output),
        num_train_epochs=args.epochs,
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
    trainer.train(resume_from_checkpoint=True if args.resume else None)
    best = args.output / "best"
    save_remote_code_model(trainer.model, best)
    if (args.init / "encoders").is_dir() and not (best / "encoders").exists():
        shutil.copytree(args.init / "encoders", best / "encoders")
    metrics = trainer.evaluate()
    print(f"best model saved to {best}; validation Kendall tau-c {metrics['eval_kendall_c']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
