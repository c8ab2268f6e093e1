#!/usr/bin/env python3
"""Train the PAC-S++ captioner (docs/spec/pacs.md#scst): `--stage xe` (cross-entropy, Eq. 16, the paper's warm-up /
constant / decay schedule) then `--stage scst` (SCST with 5 beams and a PAC-S++ / RefPAC-S++ / CLIP-S / CIDEr-D reward,
baseline = mean reward of the image's beams, Eq. 19), and write an evaluation report on the test split.

The paper's runs:

    # stage 1 on COCO Karpathy (paper: batch 1,024, up to 20,000 steps, Adam, peak lr 2.5e-4)
    python scripts/train_captioner.py --stage xe --karpathy_json dataset_coco.json --image_root coco/ \\
        --clip openai/clip-vit-base-patch32 --output_dir runs/xe --batch_size 1024 --max_steps 20000 \\
        --feature_cache features/

    # stage 2 with RefPAC-S++ as reward (paper: Adam lr 1e-6, batch 32, one epoch)
    python scripts/train_captioner.py --stage scst --model_name_or_path runs/xe/final --reward ref_pac_s_pp \\
        --reward_model pac_s_pp_vit_b32 --karpathy_json dataset_coco.json --image_root coco/ --output_dir runs/scst

    # several processes (--batch_size is per process): torchrun --nproc_per_node 8 scripts/train_captioner.py ...
    # or accelerate launch --multi_gpu --num_processes 8 scripts/train_captioner.py ... (also on CPUs: gloo);
    # continue: --resume_from_checkpoint last. Rank 0 alone writes checkpoints, final/ and the evaluation report.

The example below is an offline smoke run on tiny random models; toy/ is any `save_to_disk` dataset with `image` and
`captions` columns (docs/guides/scst-rewards.md#an-offline-smoke-run builds one).
"""

import argparse
import json
import logging
import sys
from pathlib import Path

import pyarrow as pa
import torch
from transformers import Trainer, TrainingArguments

from modeling_pacs.captioning import PACSCaptionerConfig, PACSCaptionerForConditionalGeneration
from modeling_pacs.captioning.evaluation import caption_report, generate_captions
from modeling_pacs.captioning.rewards import REWARD_KINDS, make_reward
from modeling_pacs.captioning.training import (
    CaptioningCollator,
    SCSTTrainer,
    VisualFeatureCache,
    load_caption_dataset,
    one_caption_per_row,
    validate_caption_rows,
    xe_scheduler,
)
from modeling_pacs.cli.arguments import (
    add_example,
    add_renamed_argument,
    add_verbose_argument,
    positive_float,
    positive_int,
)
from modeling_pacs.cli.errors import reports_errors
from modeling_pacs.data import memory_mapped_rows
from modeling_pacs.errors import InputError
from modeling_pacs.jobs import write_text_atomically
from modeling_pacs.loading import load_model
from modeling_pacs.logs import quiet_library_loading, setup_command_logging
from modeling_pacs.output_paths import check_output_directory
from modeling_pacs.registry import ALIAS_VARIANTS, tiny_alias
from modeling_pacs.tokenization import build_clip_tokenizer

logger = logging.getLogger("pacs_pp.train_captioner")
TINY_VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", choices=("xe", "scst"), required=True)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--overwrite", action="store_true", help="allow a non-empty output_dir without resuming")
    parser.add_argument("--resume_from_checkpoint", help="a checkpoint folder, or 'last' (newest in output_dir)")
    data = parser.add_argument_group("data")
    data.add_argument("--dataset", help="Hub id or save_to_disk folder with 'image' and 'captions' (or 'caption')")
    data.add_argument("--karpathy_json", help="COCO Karpathy dataset_coco.json (with --image_root)")
    data.add_argument("--image_root")
    data.add_argument("--train_split", default="train")
    data.add_argument("--test_split", default="test", help="evaluated after training; 'none' to skip")
    data.add_argument("--max_train_samples", type=positive_int)
    data.add_argument("--max_eval_samples", type=positive_int)
    data.add_argument("--feature_cache", help="folder of precomputed CLIP grid features (frozen encoder)")
    data.add_argument(
        "--skip_bad_images",
        action="store_true",
        help="drop rows whose image does not decode (logged with a count) instead of refusing the data",
    )
    model = parser.add_argument_group("model")
    add_renamed_argument(
        model, "--model_name_or_path", "--init", help="captioner folder to start from (required for scst)"
    )
    model.add_argument("--clip", default="openai/clip-vit-base-patch32", help="CLIP of a new captioner (xe)")
    model.add_argument("--tiny", action="store_true", help="a new tiny random captioner (smoke runs, tests)")
    reward = parser.add_argument_group("reward (scst) and evaluation")
    reward.add_argument("--reward", choices=REWARD_KINDS, default="pac_s_pp")
    reward.add_argument("--reward_model", default=None, help="alias, Hub id or folder (default by reward)")
    reward.add_argument(
        "--no_reward_cache",
        action="store_true",
        help="score without the embedding cache: slower, but a resumed run repeats an uninterrupted one step for "
        "step (a cache encodes texts in other batches, which moves rewards by ~1e-7, and Adam can magnify that)",
    )
    reward.add_argument("--eval_model", default=None, help="PAC-S++ model of the report (default: pac_s_pp_vit_b32)")
    reward.add_argument("--eval_clip_model", default=None, help="CLIP-S model of the report (default: clip_s_vit_b32)")
    train = parser.add_argument_group("optimisation (defaults: the paper's, per stage)")
    train.add_argument("--batch_size", type=positive_int, help="per device (xe: 1024, scst: 32)")
    train.add_argument("--max_steps", type=positive_int, help="xe: 20000; scst: one epoch")
    train.add_argument("--learning_rate", type=positive_float, help="xe peak: 2.5e-4; scst: 1e-6")
    train.add_argument("--warmup_steps", type=positive_int, default=1000)
    train.add_argument("--constant_until", type=positive_int, default=10_000)
    train.add_argument("--decay_until", type=positive_int, default=15_000)
    train.add_argument("--num_beams", type=positive_int, default=5)
    train.add_argument("--max_new_tokens", type=positive_int, default=20)
    train.add_argument("--save_steps", type=positive_int, default=500)
    train.add_argument("--logging_steps", type=positive_int, default=10)
    train.add_argument("--seed", type=int, default=42)
    train.add_argument("--device", default=None, help="cpu to force the CPU (default: the Trainer's choice)")
    add_example(
        parser,
        "python scripts/train_captioner.py --stage scst --tiny --reward_model tiny --dataset toy/ --output_dir toy",
    )
    add_verbose_argument(parser)
    args = parser.parse_args(argv)
    setup_command_logging(args.verbose)
    if args.stage == "scst" and not (args.model_name_or_path or args.tiny):
        parser.error(
            "--stage scst starts from an XE-trained captioner: pass --model_name_or_path DIR (or --tiny for smoke runs)"
        )
    if args.num_beams < 2 and args.stage == "scst":
        parser.error("--num_beams must be at least 2 for scst (the baseline is the mean over an image's beams)")
    return args


def build_captioner(args) -> PACSCaptionerForConditionalGeneration:
    with quiet_library_loading():  # the libraries' loading bars and reports (--verbose shows them)
        return new_captioner(args)


def new_captioner(args) -> PACSCaptionerForConditionalGeneration:
    if args.model_name_or_path:
        return PACSCaptionerForConditionalGeneration.from_pretrained(args.model_name_or_path, dtype=torch.float32)
    if args.tiny:
        torch.manual_seed(args.seed)
        config = PACSCaptionerConfig(
            vision_config=TINY_VISION, hidden_size=32, num_attention_heads=4, intermediate_size=64
        )
        return PACSCaptionerForConditionalGeneration(config)
    return PACSCaptionerForConditionalGeneration.from_clip(args.clip)


def default_model(name: str | None, fallback: str, tiny: bool) -> str:
    """The named model, else the paper's (or, for --tiny smoke runs, the tiny random model of the same variant)."""
    if name:
        return name
    if tiny:
        return tiny_alias(ALIAS_VARIANTS[fallback])
    return fallback


@reports_errors("train_captioner")
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    output_dir = Path(args.output_dir)
    # The project's place rules; resuming into the folder is this script's own policy below.
    with reports_errors("train_captioner", ValueError):
        inputs = [args.dataset, args.karpathy_json, args.image_root, args.feature_cache, args.model_name_or_path]
        check_output_directory(output_dir, inputs=inputs, allow_existing=True, what="output_dir")
    if output_dir.is_dir() and any(output_dir.iterdir()) and not (args.overwrite or args.resume_from_checkpoint):
        raise InputError(
            f"output_dir {output_dir} is not empty: continue with --resume_from_checkpoint last, or pass --overwrite"
        )
    xe = args.stage == "xe"
    captioner = build_captioner(args)
    tokenizer = build_clip_tokenizer()
    feature_cache = None
    training_args = TrainingArguments(
        str(output_dir),
        per_device_train_batch_size=args.batch_size or (1024 if xe else 32),
        learning_rate=args.learning_rate or (2.5e-4 if xe else 1e-6),
        max_steps=args.max_steps or (20_000 if xe else -1),
        num_train_epochs=1,
        optim="adamw_torch",
        weight_decay=0.0,  # AdamW without decay is the paper's Adam
        lr_scheduler_type="constant",
        save_steps=args.save_steps,
        logging_steps=args.logging_steps,
        remove_unused_columns=False,
        report_to=[],
        seed=args.seed,
        use_cpu=args.device == "cpu",
        ddp_find_unused_parameters=False,  # every trainable parameter is used at every step
    )
    logger.setLevel(logging.INFO if training_args.should_log else logging.WARNING)
    if training_args.world_size > 1:  # every process has checked output_dir before anything is written into it
        torch.distributed.barrier()
    data_dir = output_dir / "training-data"  # every process writes the same row tables (atomically)
    with reports_errors("train_captioner", ValueError, FileNotFoundError):  # every row and image, before any step
        train_rows = load_caption_dataset(
            args.dataset, args.train_split, args.karpathy_json, args.image_root, args.max_train_samples, data_dir
        )
        data_file = args.dataset or args.karpathy_json
        train_rows = validate_caption_rows(train_rows, data_file, args.train_split, args.skip_bad_images)
    train_dataset = train_rows.dataset
    if args.feature_cache:
        feature_cache = VisualFeatureCache(args.feature_cache, captioner)
        with training_args.main_process_first(desc="caching visual features"):
            computed = feature_cache.precompute(train_rows.images)
        logger.info(f"visual features: {computed} computed, {len(train_dataset) - computed} already cached")
    reward_model = None
    if not xe and args.reward != "cider_d":
        reward_fallback = "clip_s_vit_b32" if "clip_s" in args.reward else "pac_s_pp_vit_b32"
        # Rank 0 first: it downloads (or, for "tiny", saves: transformers saves weights on rank 0 only) what the
        # other processes then read.
        with training_args.main_process_first(desc="loading the reward model"):
            reward_model = load_model(default_model(args.reward_model, reward_fallback, args.tiny), args.device)
    image_size = captioner.config.vision_config.image_size
    collator = CaptioningCollator(
        tokenizer, image_size, args.stage, feature_cache, image_sources=train_rows.image_sources
    )
    if xe:
        rows = one_caption_per_row(train_dataset)
        rows = rows.append_column("row_index", pa.array(range(rows.num_rows), pa.int64()))
        train_dataset, _ = memory_mapped_rows(rows, data_dir, "captions-xe")
        optimizer = torch.optim.AdamW(
            [parameter for parameter in captioner.parameters() if parameter.requires_grad],
            lr=training_args.learning_rate,
            weight_decay=0.0,
        )
        scheduler = xe_scheduler(
            optimizer,
            args.warmup_steps,
            args.constant_until,
            args.decay_until,
            final_ratio=1e-5 / 2.5e-4,
        )
        trainer = Trainer(
            model=captioner,
            args=training_args,
            train_dataset=train_dataset,
            data_collator=collator,
            optimizers=(optimizer, scheduler),
        )
    else:
        trainer = SCSTTrainer(
            model=captioner,
            args=training_args,
            train_dataset=train_dataset,
            data_collator=collator,
            reward_function=make_reward(args.reward, reward_model, cache=not args.no_reward_cache),
            tokenizer=tokenizer,
            num_beams=args.num_beams,
            max_new_tokens=args.max_new_tokens,
        )
    resume = True if args.resume_from_checkpoint == "last" else args.resume_from_checkpoint
    trainer.train(resume_from_checkpoint=resume)
    if not trainer.is_world_process_zero():
        return 0
    final = output_dir / "final"
    type(captioner.config).register_for_auto_class()
    type(captioner).register_for_auto_class("AutoModel")
    trainer.save_model(str(final))
    tokenizer.save_pretrained(str(final))
    if args.test_split != "none":
        test = load_caption_dataset(
            args.dataset, args.test_split, args.karpathy_json, args.image_root, args.max_eval_samples, data_dir
        )
        report = evaluate(args, captioner, tokenizer, test, output_dir)
        print(json.dumps(report, indent=2))
    return 0


def evaluate(args, captioner, tokenizer, test, output_dir: Path) -> dict:
    """Captions of the test split (best beam) and the report, both written atomically into output_dir."""
    images = test.images
    references = test.dataset["captions"]
    captions = generate_captions(
        captioner, tokenizer, images, num_beams=args.num_beams, max_new_tokens=args.max_new_tokens
    )
    pacs_model = load_model(default_model(args.eval_model, "pac_s_pp_vit_b32", args.tiny), args.device)
    clip_model = load_model(default_model(args.eval_clip_model, "clip_s_vit_b32", args.tiny), args.device)
    report = caption_report(captions, images, references, pacs_model, clip_model)
    report.update(stage=args.stage, reward=args.reward if args.stage == "scst" else None, split=args.test_split)
    write_text_atomically(
        output_dir / "test_captions.jsonl",
        (json.dumps({"row_index": i, "caption": caption}) + "\n" for i, caption in enumerate(captions)),
    )
    write_text_atomically(output_dir / "eval_report.json", [json.dumps(report, indent=2, allow_nan=False) + "\n"])
    return report


if __name__ == "__main__":
    sys.exit(main())
