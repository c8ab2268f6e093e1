"""Read PyTorch Lightning 1.2 checkpoints safely: `torch.load(weights_only=True)` with the two Lightning callback
names such files hold bound to empty placeholders, so nothing of Lightning is imported or run (docs/spec/polos.md
#safe-loading). The supervised metrics trained with Lightning (Polos, Pearl, and the next ones of the same code
lineage) read their checkpoints and `hparams.yaml` here.
"""

import os
import pickle
import re
from pathlib import Path

import torch
import yaml

from .input_paths import check_input_file
from .models.artifacts import check_pickle_checkpoint
from .pacs.convert import CheckpointError, layout_message

# Globals a Lightning 1.2 checkpoint names (callback states keyed by class), as (module, name).
ALLOWED_LIGHTNING_GLOBALS = (
    ("pytorch_lightning.callbacks.early_stopping", "EarlyStopping"),
    ("pytorch_lightning.callbacks.model_checkpoint", "ModelCheckpoint"),
)
MAX_KEYS_SHOWN = 12


def lightning_placeholders() -> list[type]:
    """Empty classes standing in for the allow-listed Lightning callbacks; their bodies never run."""
    placeholders = []
    for module, name in ALLOWED_LIGHTNING_GLOBALS:
        placeholder = type(name, (), {"__doc__": f"Placeholder for {module}.{name} (never instantiated)."})
        placeholder.__module__ = module
        placeholders.append(placeholder)
    return placeholders


def refused_globals(path: Path, error: Exception) -> list[str]:
    """The globals beyond the allow-list that a refused pickle names (every one of them in a zip checkpoint)."""
    named = set(re.findall(r"GLOBAL ([\w.]+)", str(error)))
    if not named:
        return []
    allowed = {f"{module}.{name}" for module, name in ALLOWED_LIGHTNING_GLOBALS}
    try:
        named |= set(torch.serialization.get_unsafe_globals_in_checkpoint(path)) - allowed
    except (RuntimeError, ValueError):  # the legacy (non-zip) format cannot be listed: keep the name torch gave
        pass
    return sorted(named)


def lightning_checkpoint_fix(model_name: str) -> str:
    return (
        f"Pass the .ckpt file that {model_name}'s Lightning trainer saved; if it was downloaded or copied, the copy "
        "may be truncated: fetch it again"
    )


def load_lightning_checkpoint(path: str | os.PathLike, model_name: str) -> dict:
    """Read a Lightning 1.2 checkpoint of `model_name` (the metric, for messages) with `weights_only=True`, only the
    two callback names of `ALLOWED_LIGHTNING_GLOBALS` allowed (as placeholders) and every tensor mapped to the CPU."""
    expected = f"the {model_name} Lightning checkpoint (.ckpt) itself, not its folder"
    path = check_input_file(path, "checkpoint", expected, missing=FileNotFoundError)
    # A text file, an empty or truncated file, a zip that is not torch's: named here, before torch.load.
    check_pickle_checkpoint(path, f"{lightning_checkpoint_fix(model_name)}")
    try:
        with torch.serialization.safe_globals(lightning_placeholders()):
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch.load reports a damaged file as any of KeyError, EOFError, RuntimeError, ...
        refused = refused_globals(path, error)
        if refused:
            raise CheckpointError(
                f"refused to load '{path}': torch.load(weights_only=True) rejected it (it needs {', '.join(refused)}). "
                f"A {model_name} Lightning checkpoint needs only tensors and the two Lightning callback names allowed "
                "here; a pickle that needs other code could run it when loaded, so it is never fully unpickled."
            ) from None
        # weights_only wraps the unpickler's own message (kept as the context) in advice to unpickle fully.
        inner = error.__context__ if isinstance(error, pickle.UnpicklingError) and error.__context__ else error
        reason = str(inner).strip().splitlines()[0] if str(inner).strip() else "the file ended early"
        raise CheckpointError(
            f"'{path}' is not a readable PyTorch checkpoint ({type(inner).__name__}: {reason}). "
            f"{lightning_checkpoint_fix(model_name)}."
        ) from None
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("state_dict"), dict):
        found = sorted(map(str, checkpoint))[:MAX_KEYS_SHOWN] if isinstance(checkpoint, dict) else type(checkpoint)
        raise CheckpointError(f"'{path}' is not a Lightning checkpoint: no 'state_dict' entry (found {found})")
    return checkpoint


def read_hparams(checkpoint_path: Path, hparams_path: str | os.PathLike | None, checkpoint: dict) -> dict:
    """hparams.yaml (`--hparams`, else beside the checkpoint), else the checkpoint's `hyper_parameters`."""
    path = Path(hparams_path) if hparams_path else checkpoint_path.parent / "hparams.yaml"
    if hparams_path:
        check_input_file(path, "hparams file", "the hparams.yaml file itself", missing=FileNotFoundError)
    if path.is_file():
        try:
            hparams = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as error:
            raise CheckpointError(f"'{path}' is not valid YAML: {error}") from None
    else:
        hparams = checkpoint.get("hyper_parameters")
        if not isinstance(hparams, dict):
            raise CheckpointError(
                f"no hparams: '{path}' does not exist and the checkpoint holds no 'hyper_parameters'; pass --hparams"
            )
    if not isinstance(hparams, dict):
        raise CheckpointError(f"'{path}' does not hold a mapping of hyper-parameters")
    return dict(hparams)


def check_keys(problem: str, actual: dict[str, torch.Tensor], expected: dict[str, tuple[int, ...]]):
    """Raise naming every missing, unexpected and mis-shaped key of one part of the checkpoint."""
    missing = sorted(set(expected) - set(actual))
    unexpected = sorted(set(actual) - set(expected))
    wrong = [
        f"{key} {tuple(actual[key].shape)} (expected {expected[key]})"
        for key in sorted(set(actual) & set(expected))
        if tuple(actual[key].shape) != tuple(expected[key])
    ]
    if missing or unexpected or wrong:
        raise CheckpointError(layout_message(problem, missing, unexpected, wrong))


__all__ = [
    "ALLOWED_LIGHTNING_GLOBALS",
    "check_keys",
    "lightning_checkpoint_fix",
    "lightning_placeholders",
    "load_lightning_checkpoint",
    "read_hparams",
    "refused_globals",
]


# ------------------------------------------------------------------------ CLIP + RoBERTa estimators' conversion
# What the converters of the Lightning-trained CLIP + RoBERTa metrics share: the sentence encoder they name by Hub id
# or directory, the checks of its tensors, of the ScalarMix and of the MLP head, and the reload check of the output.


def check_head_dim(head_dim) -> None:
    if isinstance(head_dim, bool) or not isinstance(head_dim, int) or head_dim < 1:
        raise ValueError(f"head_dim must be a positive integer, got {head_dim!r}")


def load_sentence_encoder(text_encoder: str):
    """The RoBERTa config and tokenizer of `text_encoder` (a Hub id or a local directory)."""
    from transformers import AutoConfig, AutoTokenizer

    try:
        return AutoConfig.from_pretrained(text_encoder), AutoTokenizer.from_pretrained(text_encoder)
    except (OSError, ValueError) as error:
        raise FileNotFoundError(
            f"could not load the sentence encoder's config and tokenizer from '{text_encoder}': {error}. Pass "
            "--text-encoder DIR, a local copy of princeton-nlp/sup-simcse-roberta-base (config and tokenizer files)"
        ) from None


def check_sentence_encoder(encoder: dict[str, torch.Tensor], text_config, text_encoder_id: str) -> None:
    """The `encoder.model.*` tensors (prefix stripped) must be RoBERTa's of `text_config`, without pooler."""
    from transformers import RobertaModel

    with torch.device("meta"):  # shapes only
        text_model = RobertaModel(text_config, add_pooling_layer=False)
    text_expected = {
        key: tuple(value.shape)
        for key, value in text_model.state_dict().items()
        if key not in ("embeddings.position_ids", "embeddings.token_type_ids")
    }
    check_keys(
        f"part encoder.model.* (sentence encoder) does not match the config of '{text_encoder_id}'",
        encoder,
        text_expected,
    )


def scalar_mix_weights(scalar_mix: dict[str, torch.Tensor], num_mixed: int) -> dict[str, torch.Tensor]:
    """Check the `scalar_mix.*` tensors (prefix stripped) against `num_mixed` hidden states; our `scalar_mix.*`."""
    mix_expected = {f"scalar_parameters.{index}": (1,) for index in range(num_mixed)} | {"gamma": (1,)}
    check_keys(
        f"part scalar_mix.* (ScalarMix) does not match the sentence encoder's {num_mixed} hidden states",
        scalar_mix,
        mix_expected,
    )
    return {
        "scalar_mix.layer_weights": torch.cat(
            [scalar_mix[f"scalar_parameters.{index}"].float() for index in range(num_mixed)]
        ),
        "scalar_mix.gamma": scalar_mix["gamma"].float(),
    }


def head_weights(problem: str, head: dict[str, torch.Tensor], sizes: list[int]) -> dict[str, torch.Tensor]:
    """Check the `ff.0.ff.linear_{i}.*` tensors against layer widths `sizes`; our `head.layers.{i - 1}.*`."""
    head_expected = {}
    for index, (inputs, outputs) in enumerate(zip(sizes[:-1], sizes[1:]), start=1):
        head_expected[f"ff.0.ff.linear_{index}.weight"] = (outputs, inputs)
        head_expected[f"ff.0.ff.linear_{index}.bias"] = (outputs,)
    check_keys(problem, head, head_expected)
    return {
        f"head.layers.{index}.{kind}": head[f"ff.0.ff.linear_{index + 1}.{kind}"].float()
        for index in range(len(sizes) - 1)
        for kind in ("weight", "bias")
    }


def fill_model(model, weights: dict[str, torch.Tensor]):
    """Load `weights` into `model` (buffers may stay as built); a missing or unexpected key is an error."""
    missing, unexpected = model.load_state_dict(weights, strict=False)
    buffers = {name for name, _ in model.named_buffers()}
    missing = [key for key in missing if key not in buffers]
    if missing or unexpected:
        raise CheckpointError(layout_message(f"did not fill the {type(model).__name__}", missing, unexpected))
    return model.eval()


def write_model_directory(model, card: str, output_dir: Path) -> None:
    """Save into a staging folder renamed into place (a crash never leaves a half-written `output_dir`), then reload
    it and check that every tensor equals the converted model's."""
    from .hub import save_remote_code_model
    from .output_paths import staged_directory

    with staged_directory(output_dir) as staging:
        save_remote_code_model(model, staging)
        (staging / "README.md").write_text(card, encoding="utf-8")
    reloaded = type(model).from_pretrained(output_dir, dtype=torch.float32).state_dict()
    converted = model.state_dict()
    different = sorted(
        key for key in converted.keys() | reloaded.keys()
        if key not in converted or key not in reloaded or not torch.equal(converted[key], reloaded[key])
    )  # fmt: skip
    if different:
        raise RuntimeError(
            f"the saved directory '{output_dir}' does not reproduce the conversion ({len(different)} tensors differ, "
            f"e.g. {different[:3]}): check the installed transformers/safetensors versions"
        )
