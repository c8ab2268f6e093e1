"""DENEB's own code (Ka2ukiMatsuda/DENEB@0dfea82) run on tiny weights in its Lightning checkpoint layout, to record the
scores `tests/deneb/test_convert.py` compares the converted model with (`tests/fixtures/deneb_parity.json`).

Two steps, two environments (the authors' code needs transformers 4.35 and Lightning 1.2, this package transformers 5):

```
# 1. in the package's venv: the tiny RoBERTa directory (config, tokenizer, weights) and the images
python -m tests.references.deneb_authors prepare /tmp/deneb-work
# 2. in a reference venv with pytorch-lightning==1.2.10, pytorch-nlp==0.5.0, open-clip-torch==2.24.0,
#    transformers==4.35.0 (tokenizers 0.14, huggingface_hub 0.19), torchvision, tensorboard, absl-py
PYTHONPATH=DENEB_CHECKOUT python tests/references/deneb_authors.py record /tmp/deneb-work \
    --output tests/fixtures/deneb_parity.json
```

Step 2 builds the authors' `DenebEstimator` from hparams (their `da-estimator-cvpr.yaml` with tiny `hidden_sizes` and
the tiny RoBERTa as `pretrained_model`), fills every tensor of its state dict by the rule of `fill_tensor` (so the
test rebuilds the same weights from the recorded names and shapes), saves a Lightning 1.2 checkpoint (the real
`EarlyStopping` / `ModelCheckpoint` classes as callback keys, `hparams.yaml` beside), loads it back with the authors'
`deneb.models.load_checkpoint`, and records `predict` in several batchings and `forward` on one-item chunks.

Patches to the authors' environment, each needed only because this machine has no GPU, no Hub access and no
fairseq (none changes what their model computes):

1. `torchvision._meta_registrations` is an empty module: the PyPI torchvision wheel's C++ operators do not load
   against this CPU build of torch; only `torchvision.transforms` is used (open_clip's preprocessing).
2. `open_clip.create_model_and_transforms("ViT-L-14", pretrained="laion2b_s32b_b82k")` builds a tiny OpenCLIP model
   (the config `TINY_OPENCLIP`, plain GELU as ViT-L-14) with open_clip's own transforms for the mean and std that
   `open_clip.get_pretrained_cfg("ViT-L-14", "laion2b_s32b_b82k")` gives (0.5, 0.5); nothing is downloaded.
3. `nn.Module.cuda` / `Tensor.cuda` return the object unchanged (CPU run); `predict(cuda=False)`.
4. `fairseq` (imported by the unused XLM-R encoder) is an empty module.
5. `TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`: Lightning 1.2 calls `torch.load` without `weights_only`, which torch >= 2.6
   treats as `weights_only=True`; the file is the one this script just wrote.
"""

import json
import math
import os
import sys
import types
from pathlib import Path

import torch

NUM_IMAGES = 6
CANDIDATES = [
    "a cat sleeping on a sofa",
    "a dog running in the park with a ball",
    "two people riding horses on the beach",
    "a man is holding a red umbrella in the rain",
    "",
    "an airplane flying over the city at night",
]
REFERENCES = [
    ["a cat on a couch", "a sleeping cat"],
    ["a dog with a ball", "a dog running", "a dog in the park"],
    ["people riding horses", "two horses on a beach", "riders at the sea", "horses"],
    ["a man with an umbrella"],
    ["a plate of food with vegetables", "meat and vegetables"],
    ["a plane over a city", "an airplane at night", "a city at night"],
]
# `predict` batch sizes recorded: none leaves a one-item chunk (the authors' `predict` crashes on one).
BATCH_SIZES = (2, 3, 4, 6)
WIDTH = 32
TINY_OPENCLIP = {
    "embed_dim": WIDTH,
    "vision_cfg": {"image_size": 224, "layers": 2, "width": WIDTH, "head_width": 8, "patch_size": 32},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": WIDTH, "heads": 4, "layers": 2},
}
HPARAMS = {
    "model": "DenebEstimator",
    "loss": "huber",
    "encoder_model": "BERT",
    "layer": "mix",
    "scalar_mix_dropout": 0.1,
    "pool": "cls",
    "dropout": 0.1,
    "activations": "Tanh",
    "hidden_sizes": "48, 24",
    "final_activation": False,
    "batch_size": 16,
    "learning_rate": 3.0e-06,
    "encoder_learning_rate": 1.0e-05,
    "layerwise_decay": 0.95,
    "nr_frozen_epochs": 100000,
    "scheduler": "linear_warmup",
    "warmup_steps": 1000,
    "optimizer": "Adam",
    "monitor": "kendall",
}
# Buffers the authors' module computes (kept as computed; the test recomputes them the same way).
COMPUTED_BUFFERS = ("pos_encoder.pe", "pos_encoder2.pe", "scalar_mix.dropout_mask", "scalar_mix.dropout_fill")


def fill_tensor(index: int, name: str, shape: tuple[int, ...]) -> torch.Tensor:
    """The tiny weight of the `index`-th key (sorted order) `name`: seeded normal values, scaled by kind."""
    generator = torch.Generator().manual_seed(1000 + index)
    values = torch.randn(shape, generator=generator)
    if name.endswith("logit_scale"):
        return torch.tensor(math.log(1 / 0.07))
    if name.endswith("gamma"):
        return torch.full(shape, 1.3)
    if "scalar_parameters" in name:
        return values
    if "cls_token" in name:
        return 0.5 * values
    if len(shape) == 1 and name.endswith("weight"):  # layer norms
        return 1.0 + 0.1 * values
    if len(shape) == 1:
        return 0.05 * values
    return values / math.sqrt(shape[-1])


def computed_buffers(width: int, num_mixed: int) -> dict[str, torch.Tensor]:
    """The authors' `PositionalEncoding.pe` (max_len 1000) and ScalarMix dropout buffers, as their code builds them."""
    position = torch.arange(1000).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, width, 2) * (-math.log(10000.0) / width))
    positions = torch.zeros(1000, 1, width)
    positions[:, 0, 0::2] = torch.sin(position * div_term)
    positions[:, 0, 1::2] = torch.cos(position * div_term)
    return {
        "pos_encoder.pe": positions,
        "pos_encoder2.pe": positions.clone(),
        "scalar_mix.dropout_mask": torch.zeros(num_mixed),
        "scalar_mix.dropout_fill": torch.full((num_mixed,), -1e20),
    }


def authors_state_dict(shapes: dict[str, list[int]]) -> dict[str, torch.Tensor]:
    """The whole tiny state dict from the recorded key names and shapes."""
    num_mixed = sum(1 for name in shapes if name.startswith("scalar_mix.scalar_parameters."))
    state = {}
    for index, name in enumerate(sorted(shapes)):
        if name not in COMPUTED_BUFFERS:
            state[name] = fill_tensor(index, name, tuple(shapes[name]))
    state.update(computed_buffers(2 * WIDTH, num_mixed))
    return state


def image_path(work: Path, index: int) -> Path:
    return work / "images" / f"{index}.png"


# ---------------------------------------------------------------------------------------------------- step 1
def prepare(work: Path):
    """The tiny RoBERTa (with pooler: the authors' `AutoModel`) and the images, from the package's test builders."""
    from transformers import RobertaModel

    from modeling_pacs.testing.roberta import build_tiny_roberta_tokenizer, tiny_roberta_config
    from tests.fixtures.helpers import random_image

    tokenizer = build_tiny_roberta_tokenizer()
    torch.manual_seed(0)
    RobertaModel(tiny_roberta_config(len(tokenizer), WIDTH, 2), add_pooling_layer=True).save_pretrained(
        work / "roberta"
    )
    tokenizer.save_pretrained(work / "roberta")
    # transformers 4.35's tokenizers 0.14 cannot read transformers 5's tokenizer.json: give it vocab.json + merges.txt.
    model = json.loads((work / "roberta" / "tokenizer.json").read_text(encoding="utf-8"))["model"]
    (work / "roberta" / "vocab.json").write_text(json.dumps(model["vocab"]), encoding="utf-8")
    merges = [" ".join(pair) if isinstance(pair, list) else pair for pair in model["merges"]]
    (work / "roberta" / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    (work / "roberta" / "tokenizer.json").unlink()
    (work / "images").mkdir(parents=True, exist_ok=True)
    for index in range(NUM_IMAGES):
        random_image(index).save(image_path(work, index))


# ---------------------------------------------------------------------------------------------------- step 2
def patch_environment():
    """Patches 1-5 of the module docstring."""
    sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
    sys.modules["fairseq"] = types.ModuleType("fairseq")
    fairseq_models = types.ModuleType("fairseq.models")
    fairseq_roberta = types.ModuleType("fairseq.models.roberta")
    fairseq_roberta.XLMRModel = None
    sys.modules.update({"fairseq.models": fairseq_models, "fairseq.models.roberta": fairseq_roberta})
    os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    torch.nn.Module.cuda = lambda self, *args, **kwargs: self
    torch.Tensor.cuda = lambda self, *args, **kwargs: self

    import open_clip

    real_create = open_clip.create_model_and_transforms
    open_clip.add_model_config  # noqa: B018 (present in 2.24)
    from open_clip.factory import _MODEL_CONFIGS

    _MODEL_CONFIGS["deneb-tiny"] = TINY_OPENCLIP

    def create_tiny(model_name, pretrained=None, **kwargs):
        assert (model_name, pretrained) == ("ViT-L-14", "laion2b_s32b_b82k"), (model_name, pretrained)
        tag = open_clip.get_pretrained_cfg(model_name, pretrained)
        return real_create("deneb-tiny", pretrained=None, image_mean=tag["mean"], image_std=tag["std"], **kwargs)

    open_clip.create_model_and_transforms = create_tiny
    return open_clip


def record(work: Path, output: Path):
    """Step 2; the authors' checkout must be on PYTHONPATH (their code imports `deneb.*` absolutely)."""
    patch_environment()
    import pytorch_lightning
    import yaml
    from deneb.models import load_checkpoint
    from deneb.models.estimators.deneb_estimator import DenebEstimator
    from PIL import Image
    from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint

    os.chdir(work)
    hparams = dict(HPARAMS, pretrained_model=str(work / "roberta"))
    namespace = DenebEstimator.ModelConfig(hparams).namespace()
    # The estimator loads `experiments/openClip_ViT-L-14.pth` (PAC-S's OpenCLIP weights) while it is built.
    import open_clip

    clip, _, _ = open_clip.create_model_and_transforms("ViT-L-14", pretrained="laion2b_s32b_b82k")
    (work / "experiments").mkdir(exist_ok=True)
    torch.save({"state_dict": clip.state_dict()}, work / "experiments" / "openClip_ViT-L-14.pth")
    model = DenebEstimator(namespace)
    shapes = {name: list(tensor.shape) for name, tensor in model.state_dict().items()}
    state = authors_state_dict(shapes)
    model.load_state_dict(state, strict=True)
    # The same buffers as the module computed them: the rule above reproduces the authors' values exactly.
    for name in COMPUTED_BUFFERS:
        assert torch.equal(DenebEstimator(namespace).state_dict()[name], state[name]), name

    run = work / "experiments" / "lightning_logs" / "version_0"
    (run / "checkpoints").mkdir(parents=True, exist_ok=True)
    checkpoint_path = run / "checkpoints" / "epoch=0-step=1.ckpt"
    optimizer = torch.optim.Adam(model.parameters(), lr=hparams["learning_rate"])
    torch.save(
        {
            "epoch": 0,
            "global_step": 1,
            "pytorch-lightning_version": pytorch_lightning.__version__,
            "callbacks": {
                EarlyStopping: {"wait_count": 0, "stopped_epoch": 0, "best_score": torch.tensor(0.5), "patience": 1},
                ModelCheckpoint: {
                    "monitor": "kendall",
                    "best_model_score": torch.tensor(0.5),
                    "best_model_path": str(checkpoint_path),
                    "current_score": torch.tensor(0.5),
                    "dirpath": str(checkpoint_path.parent),
                },
            },  # fmt: skip
            "optimizer_states": [optimizer.state_dict()],
            "lr_schedulers": [],
            "state_dict": model.state_dict(),
            "hparams_name": "hparams",
            "hyper_parameters": vars(namespace),
        },
        checkpoint_path,
    )
    (checkpoint_path.parent / "hparams.yaml").write_text(yaml.safe_dump(vars(namespace)), encoding="utf-8")

    loaded = load_checkpoint(str(checkpoint_path))
    images = [Image.open(image_path(work, index)).convert("RGB") for index in range(NUM_IMAGES)]

    def samples():
        return [
            {"img": image, "mt": candidate, "refs": list(references)}
            for image, candidate, references in zip(images, CANDIDATES, REFERENCES)
        ]

    predict = {}
    for batch_size in BATCH_SIZES:
        _, scores = loaded.predict(samples(), cuda=False, show_progress=False, batch_size=batch_size)
        predict[str(batch_size)] = [float(score) for score in scores]
    one_item_chunks = []
    with torch.no_grad():
        for sample in samples():
            inputs = loaded.prepare_sample([sample], inference=True)
            one_item_chunks.append(float(loaded.forward(**inputs)["score"]))
    crashes = {}
    for batch_size in (1, 5):
        try:
            loaded.predict(samples(), cuda=False, show_progress=False, batch_size=batch_size)
        except Exception as error:  # noqa: BLE001 (the crash is what is recorded)
            crashes[str(batch_size)] = f"{type(error).__name__}: {error}"
    output.write_text(
        json.dumps(
            {
                "source": "Ka2ukiMatsuda/DENEB@0dfea82, tests/references/deneb_authors.py",
                "versions": {
                    "torch": torch.__version__,
                    "pytorch_lightning": pytorch_lightning.__version__,
                    "open_clip": open_clip.version.__version__,
                    "transformers": __import__("transformers").__version__,
                },
                "hparams": {key: value for key, value in vars(namespace).items() if key != "pretrained_model"},
                "shapes": shapes,
                "predict": predict,
                "one_item_chunks": one_item_chunks,
                "predict_crashes": crashes,
            },
            indent=1,
        )
        + "\n",
        encoding="utf-8",
    )


if __name__ == "__main__":
    step, work = sys.argv[1], Path(sys.argv[2]).resolve()
    if step == "prepare":
        prepare(work)
    else:
        arguments = dict(zip(sys.argv[3::2], sys.argv[4::2]))
        record(work, Path(arguments["--output"]).resolve())
