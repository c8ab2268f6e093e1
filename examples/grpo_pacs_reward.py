#!/usr/bin/env python3
"""A few GRPO steps of TRL's `GRPOTrainer` on a vision-language model with PAC-S++ as the reward function.

The reward is `modeling_pacs.captioning.rewards.PACSReward`: TRL calls it with `prompts`, `completions`
(conversational: `[{"role": "assistant", "content": ...}]`), `completion_ids` and every dataset column, here `image`
and `references`; it returns one float per completion.

    # real models (a VLM from the Hub and the released PAC-S++)
    python examples/grpo_pacs_reward.py --policy HuggingFaceTB/SmolVLM-256M-Instruct --reward_model pac_s_pp_vit_b32 \\
        --images examples/images --output_dir runs/grpo

    # offline, on tiny random models built in code (a LLaVA of width 32 with the CLIP tokenizer): a smoke run
    python examples/grpo_pacs_reward.py --tiny --output_dir runs/grpo_tiny --max_steps 2
"""

import argparse
import sys
from pathlib import Path

import datasets
import numpy as np
import PIL.Image
import torch
from transformers import AutoModelForImageTextToText, AutoProcessor

from modeling_pacs.captioning.rewards import PACSReward
from modeling_pacs.loading import load_model
from modeling_pacs.models.inputs import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD

PROMPT = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe the image."}]}]
TINY_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {% if message['content'] is string %}"
    "{{ message['content'] }}{% else %}{% for part in message['content'] %}{% if part['type'] == 'image' %}<image>"
    "{% else %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def tiny_llava(seed: int = 0):
    """A random LLaVA (CLIP vision tower + Llama decoder, width 32) and its processor, built offline."""
    from transformers import CLIPImageProcessorPil, LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor

    from modeling_pacs.tokenization import build_clip_tokenizer

    tokenizer = build_clip_tokenizer()
    tokenizer.add_tokens(["<image>"], special_tokens=True)
    image_processor = CLIPImageProcessorPil(image_mean=list(OPENAI_CLIP_MEAN), image_std=list(OPENAI_CLIP_STD))
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=32,
        vision_feature_select_strategy="default",
        chat_template=TINY_CHAT_TEMPLATE,
        num_additional_image_tokens=1,
    )
    config = LlavaConfig(
        vision_config={
            "model_type": "clip_vision_model",
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "image_size": 224,
            "patch_size": 32,
        },
        text_config={
            "model_type": "llama",
            "vocab_size": len(tokenizer),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "max_position_embeddings": 256,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        },
        image_token_id=processor.image_token_id,
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
    )
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model, processor


def build_dataset(images_dir: Path | None) -> datasets.Dataset:
    """One row per image: the chat prompt, the image and a reference caption (used by RefPAC-S++).

    Without a folder, four random 224 x 224 images (the offline smoke run)."""
    if images_dir is None:
        images = [
            PIL.Image.fromarray(np.random.default_rng(index).integers(0, 256, (224, 224, 3), dtype=np.uint8))
            for index in range(4)
        ]
    else:
        images = [str(path) for path in sorted(images_dir.iterdir()) if path.is_file()]
    return datasets.Dataset.from_list(
        [{"prompt": PROMPT, "image": image, "references": ["a photo"]} for image in images]
    )


def build_trainer(args: argparse.Namespace):
    """The `GRPOTrainer` and its PAC-S++ reward function."""
    from trl import GRPOConfig, GRPOTrainer

    if args.tiny:
        policy, processor = tiny_llava()
        reward_model = load_model("tiny")
    else:
        policy = AutoModelForImageTextToText.from_pretrained(args.policy, dtype=torch.float32)
        processor = AutoProcessor.from_pretrained(args.policy)
        reward_model = load_model(args.reward_model)
    reward = PACSReward(reward_model, use_references=args.use_references)
    config = GRPOConfig(
        output_dir=args.output_dir,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=8,
        max_steps=args.max_steps,
        learning_rate=1e-4,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        seed=0,
    )
    trainer = GRPOTrainer(
        model=policy,
        reward_funcs=[reward],
        args=config,
        train_dataset=build_dataset(args.images),
        processing_class=processor,
    )
    return trainer, reward


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", help="a vision-language model (Hub id or folder)")
    parser.add_argument("--reward_model", default="pac_s_pp_vit_b32")
    parser.add_argument("--use_references", action="store_true", help="RefPAC-S++ instead of PAC-S++")
    parser.add_argument("--images", type=Path, help="a folder of images to caption")
    parser.add_argument("--tiny", action="store_true", help="tiny random policy and reward model (offline)")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--max_steps", type=int, default=4)
    args = parser.parse_args(argv)
    if args.max_steps <= 0:
        parser.error(f"--max_steps must be positive, got {args.max_steps}")
    if not args.tiny and not (args.policy and args.images):
        parser.error("give --policy and --images, or --tiny")
    return args


def main(argv: list[str] | None = None) -> int:
    trainer, reward = build_trainer(parse_args(argv))
    trainer.train()
    rewards = [entry[f"rewards/{reward.__name__}/mean"] for entry in trainer.state.log_history if "loss" in entry]
    print("mean PAC-S++ reward per step:", [round(value, 4) for value in rewards])
    return 0


if __name__ == "__main__":
    sys.exit(main())
