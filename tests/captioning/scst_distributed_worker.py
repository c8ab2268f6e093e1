"""A few XE or SCST steps of the tiny captioner with plain SGD, run by tests/captioning/test_scst_distributed.py
under `torchrun` (and in the test process for the one-process reference). Each process writes `steps_<rank>.json`
(per step: the rows it trained on; SCST: their beams' rewards and the logged global reward; XE: the logged loss) and
`weights_<rank>.safetensors` (its final weights).

SGD (no momentum) makes the weights after N steps `w_0 - lr * sum of the averaged gradients`, so runs with other
process counts can be compared to fp32 noise; Adam would turn the ~1e-9 noise on parameters whose exact gradient is 0
(attention key biases) into learning-rate-sized steps.

    torchrun --standalone --nproc_per_node 2 tests/captioning/scst_distributed_worker.py \\
        DATASET_DIR OUTPUT_DIR BATCH STEPS LR [STAGE]
"""

import json
import sys
from pathlib import Path

import datasets
from safetensors.torch import save_file
from transformers import Trainer, TrainingArguments

from modeling_pacs.captioning.rewards import PACSReward
from modeling_pacs.captioning.training import CaptioningCollator, SCSTTrainer
from modeling_pacs.loading import load_model
from modeling_pacs.tokenization import build_clip_tokenizer
from tests.models.test_captioner import tiny_captioner

CAPTIONER_SEED = 1
NUM_BEAMS = 3


class RowRecordingCollator(CaptioningCollator):
    """The SCST batch plus the `row_index` of its rows."""

    def __call__(self, rows):
        batch = super().__call__(rows)
        batch["row_index"] = [row["row_index"] for row in rows]
        return batch


class RecordingSCSTTrainer(SCSTTrainer):
    """Records, per step, this process's rows and the rewards of their beams."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.steps: list[dict] = []

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        rows = inputs.pop("row_index")
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True)
        self.steps.append({"rows": rows, "rewards": outputs["rewards"].tolist()})
        return (loss, outputs) if return_outputs else loss


class RecordingXETrainer(Trainer):
    """Records, per step, this process's rows (teacher forcing on each row's first caption)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.steps: list[dict] = []

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        self.steps.append({"rows": inputs.pop("row_index")})
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)


def run(
    dataset_dir: str,
    output_dir: str,
    per_device_batch_size: int,
    max_steps: int,
    learning_rate: float,
    stage: str = "scst",
) -> None:
    dataset = datasets.load_from_disk(dataset_dir)
    tokenizer = build_clip_tokenizer()
    # before TrainingArguments starts torch.distributed (see load_model's tiny models)
    scorer = load_model("tiny") if stage == "scst" else None
    arguments = TrainingArguments(
        output_dir,
        per_device_train_batch_size=per_device_batch_size,
        max_steps=max_steps,
        learning_rate=learning_rate,
        optim="sgd",
        lr_scheduler_type="constant",
        weight_decay=0.0,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        remove_unused_columns=False,
        use_cpu=True,
        disable_tqdm=True,
        seed=0,
        data_seed=0,
        ddp_find_unused_parameters=False,
    )
    if stage == "xe":
        trainer = RecordingXETrainer(
            model=tiny_captioner(seed=CAPTIONER_SEED),
            args=arguments,
            train_dataset=dataset,
            data_collator=RowRecordingCollator(tokenizer, 224, stage="xe"),
        )
    else:
        trainer = RecordingSCSTTrainer(
            model=tiny_captioner(seed=CAPTIONER_SEED),
            args=arguments,
            train_dataset=dataset,
            data_collator=RowRecordingCollator(tokenizer, 224, stage="scst"),
            reward_function=PACSReward(scorer, cache=False),
            tokenizer=tokenizer,
            num_beams=NUM_BEAMS,
            max_new_tokens=5,
        )
    trainer.train()
    logged_key = "reward" if stage == "scst" else "loss"
    logged = [entry[logged_key] for entry in trainer.state.log_history if logged_key in entry]
    for step, reward in zip(trainer.steps, logged, strict=True):
        step[f"logged_{logged_key}"] = reward
    rank = arguments.process_index
    folder = Path(output_dir)
    (folder / f"steps_{rank}.json").write_text(json.dumps(trainer.steps))
    weights = {name: parameter.detach().clone() for name, parameter in trainer.model.named_parameters()}
    save_file(weights, str(folder / f"weights_{rank}.safetensors"))


if __name__ == "__main__":
    dataset_dir, output_dir, batch, steps, lr, *stage = sys.argv[1:]
    run(dataset_dir, output_dir, int(batch), int(steps), float(lr), *stage)
