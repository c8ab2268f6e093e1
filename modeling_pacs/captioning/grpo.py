"""GRPO with PAC-S++ as the reward: TRL's `GRPOTrainer` on a vision-language policy, scored by `PACSReward`.

TRL calls the reward with `prompts`, `completions` (conversational: `[{"role": "assistant", "content": ...}]`),
`completion_ids` and every dataset column, here `image` and `references`; it returns one float per completion.

Example:

```python
>>> trainer = grpo_trainer(policy, processor, load_model("pac_s_pp_vit_b32"), caption_prompts(images), "runs/grpo")
>>> trainer.train()
```
"""

from pathlib import Path

import datasets
import numpy as np
import PIL.Image

from ..extras import require
from .rewards import PACSReward

PROMPT = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe the image."}]}]


def caption_prompts(images_dir: str | Path | None = None, references: list[str] | None = None) -> datasets.Dataset:
    """One row per image: the chat prompt, the image and its references (RefPAC-S++ reads them).

    Without a folder, four random 224 x 224 images (offline smoke runs)."""
    if images_dir is None:
        images = [
            PIL.Image.fromarray(np.random.default_rng(index).integers(0, 256, (224, 224, 3), dtype=np.uint8))
            for index in range(4)
        ]
    else:
        images = [str(path) for path in sorted(Path(images_dir).iterdir()) if path.is_file()]
    references = references or ["a photo"]
    return datasets.Dataset.from_list(
        [{"prompt": PROMPT, "image": image, "references": references} for image in images]
    )


def grpo_trainer(
    policy, processor, reward_model, dataset: datasets.Dataset, output_dir: str, max_steps: int = 4,
    use_references: bool = False, **config,
):  # fmt: skip
    """A `GRPOTrainer` (4 generations per prompt, completions of at most 8 tokens by default) whose reward is PAC-S++
    (RefPAC-S++ with `use_references`) of `reward_model`; returns (trainer, reward)."""
    trl = require("trl", "captioning", "The GRPO trainer")
    GRPOConfig, GRPOTrainer = trl.GRPOConfig, trl.GRPOTrainer

    reward = PACSReward(reward_model, use_references=use_references)
    settings = {
        "output_dir": output_dir, "per_device_train_batch_size": 4, "num_generations": 4,
        "max_completion_length": 8, "max_steps": max_steps, "learning_rate": 1e-4, "logging_steps": 1,
        "report_to": [], "use_cpu": True, "save_strategy": "no", "seed": 0, **config,
    }  # fmt: skip
    trainer = GRPOTrainer(
        model=policy, reward_funcs=[reward], args=GRPOConfig(**settings), train_dataset=dataset,
        processing_class=processor,
    )  # fmt: skip
    return trainer, reward


__all__ = ["PROMPT", "caption_prompts", "grpo_trainer"]
