"""A tiny random LLaVA (CLIP vision tower + Llama decoder, width 32) with the CLIP tokenizer: the policy of offline
GRPO smoke runs (`examples/grpo_pacs_reward.py --tiny`) and their test."""

import torch

from ..models.inputs import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD
from ..tokenization import build_clip_tokenizer

TINY_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {% if message['content'] is string %}"
    "{{ message['content'] }}{% else %}{% for part in message['content'] %}{% if part['type'] == 'image' %}<image>"
    "{% else %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def tiny_llava(seed: int = 0):
    """A random LLaVA (CLIP vision tower + Llama decoder, width 32) and its processor, built offline."""
    from transformers import CLIPImageProcessorPil, LlavaConfig, LlavaForConditionalGeneration, LlavaProcessor

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


__all__ = ["TINY_CHAT_TEMPLATE", "tiny_llava"]
