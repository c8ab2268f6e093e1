"""`python scripts/train_deneb.py`: a two-step smoke run on `tiny:deneb` and a Nebula-layout file writes a directory
that `AutoModel.from_pretrained(..., trust_remote_code=True)` loads and scores; a resumed run continues from its
checkpoint without repeating steps; a bad data path is one line naming it."""

import json

import pytest
import torch
from transformers import AutoModel

from modeling_pacs.cli import train_deneb as command
from modeling_pacs.deneb.training import DenebTrainer
from tests.fixtures.helpers import random_image

CANDIDATES = ["a cat on a sofa", "a dog running", "two people riding horses", "a plate of food", "an airplane",
              "a woman with a laptop", "children playing football", "a man with an umbrella"]  # fmt: skip


def write_nebula(folder, num_rows=8):
    """A Nebula-layout split (file_name, mt, refs, human_score) as JSON lines, the images beside it; the reference
    counts differ (1 or 2), as in Nebula."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = []
    for index in range(num_rows):
        name = f"img_{index % 4}.png"
        if not (folder / name).exists():
            random_image(index % 4, (96, 64)).save(folder / name)
        references = [CANDIDATES[(index + 1) % 8], CANDIDATES[(index + 3) % 8]][: 1 + index % 2]
        record = {"file_name": name, "mt": CANDIDATES[index], "refs": references, "human_score": (index % 5) / 4}
        lines.append(json.dumps(record))
    path = folder / "train.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_nebula(tmp_path_factory.mktemp("nebula"))


def arguments(data, output_dir, epochs: int) -> list[str]:
    return ["--model_name_or_path", "tiny:deneb", "--train", str(data), "--validation", str(data), "--output_dir",
            str(output_dir), "--batch_size", "4", "--num_train_epochs", str(epochs), "--warmup_steps", "0",
            "--learning_rate", "1e-3", "--disable_tqdm"]  # fmt: skip


@pytest.fixture(scope="module")
def first_run(data, tmp_path_factory):
    """One epoch of 8 rows in batches of 4: two steps, a checkpoint after them, the final model."""
    output_dir = tmp_path_factory.mktemp("run")
    assert command.main(arguments(data, output_dir, epochs=1)) == 0
    return output_dir


def test_a_two_step_run_writes_a_model_that_loads_with_trust_remote_code_and_scores(first_run, data, capsys):
    state = json.loads((first_run / "checkpoint-2" / "trainer_state.json").read_text())
    assert state["global_step"] == 2
    assert "eval_kendall" in state["log_history"][-1]
    model = AutoModel.from_pretrained(first_run / "final", trust_remote_code=True, dtype=torch.float32)
    assert model.config.model_type == "deneb"
    folder = data.parent
    output = model.score([str(folder / "img_0.png"), str(folder / "img_1.png")], ["a cat", "a dog"],
                         [["a cat on a sofa"], ["a dog", "a brown dog"]])  # fmt: skip
    assert output.scores.shape == (2,) and bool(((output.scores > 0) & (output.scores < 1)).all())


def test_resume_continues_from_the_checkpoint_without_repeating_steps(first_run, data, monkeypatch):
    steps = []
    original = DenebTrainer.training_step

    def counted(self, *args, **kwargs):
        steps.append(self.state.global_step)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(DenebTrainer, "training_step", counted)
    resumed = [*arguments(data, first_run, epochs=2), "--resume_from_checkpoint", str(first_run / "checkpoint-2")]
    assert command.main(resumed) == 0
    assert steps == [2, 3]  # only the second epoch's two steps run
    assert json.loads((first_run / "checkpoint-4" / "trainer_state.json").read_text())["global_step"] == 4


def test_a_bad_data_path_is_one_line_naming_it(data, tmp_path, capsys):
    missing = tmp_path / "nebula" / "validation.parquet"
    argv = arguments(data, tmp_path / "out", epochs=1)
    argv[argv.index("--validation") + 1] = str(missing)
    with pytest.raises(SystemExit) as exit_:
        command.main(argv)
    message = str(exit_.value)
    assert message.startswith(f"train_deneb: error: --validation '{missing}' does not exist. Fix: check the path")
    assert "\n" not in message
    assert not (tmp_path / "out").exists()  # refused before any model or step
