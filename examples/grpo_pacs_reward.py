#!/usr/bin/env python3
"""A few GRPO steps of TRL's `GRPOTrainer` on a vision-language model with PAC-S++ as the reward function.

The reward is `modeling_pacs.captioning.rewards.PACSReward` (see `modeling_pacs.captioning.grpo`): TRL calls it with
`prompts`, `completions`, `completion_ids` and every dataset column, here `image` and `references`; it returns one
float per completion.

    # real models (a VLM from the Hub and the released PAC-S++)
    python examples/grpo_pacs_reward.py --policy HuggingFaceTB/SmolVLM-256M-Instruct --reward_model pac_s_pp_vit_b32 \\
        --images examples/images --output_dir runs/grpo

    # offline, on tiny random models built in code (a LLaVA of width 32 with the CLIP tokenizer): a smoke run
    python examples/grpo_pacs_reward.py --tiny --output_dir runs/grpo_tiny --max_steps 2
"""

import argparse
import sys
from pathlib import Path

import torch
from transformers import AutoModelForImageTextToText, AutoProcessor

from modeling_pacs.captioning.grpo import caption_prompts, grpo_trainer
from modeling_pacs.cli.arguments import positive_int
from modeling_pacs.loading import load_model
from modeling_pacs.registry import DEFAULT_MODEL


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", help="a vision-language model (Hub id or folder)")
    parser.add_argument("--reward_model", default=DEFAULT_MODEL)
    parser.add_argument("--use_references", action="store_true", help="RefPAC-S++ instead of PAC-S++")
    parser.add_argument("--images", type=Path, help="a folder of images to caption")
    parser.add_argument("--tiny", action="store_true", help="tiny random policy and reward model (offline)")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--max_steps", type=positive_int, default=4)
    args = parser.parse_args(argv)
    if args.tiny:
        from modeling_pacs.testing.llava import tiny_llava

        (policy, processor), reward_model = tiny_llava(), load_model("tiny")
    elif args.policy and args.images:
        policy = AutoModelForImageTextToText.from_pretrained(args.policy, dtype=torch.float32)
        processor, reward_model = AutoProcessor.from_pretrained(args.policy), load_model(args.reward_model)
    else:
        parser.error("give --policy and --images, or --tiny")
    dataset = caption_prompts(None if args.tiny else args.images)
    trainer, reward = grpo_trainer(
        policy, processor, reward_model, dataset, args.output_dir, args.max_steps, args.use_references
    )
    trainer.train()
    rewards = [entry[f"rewards/{reward.__name__}/mean"] for entry in trainer.state.log_history if "loss" in entry]
    print("mean PAC-S++ reward per step:", [round(value, 4) for value in rewards])
    return 0


if __name__ == "__main__":
    sys.exit(main())
