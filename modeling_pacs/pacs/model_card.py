"""Model cards (README.md with Hub YAML metadata) for PAC-S / PAC-S++ model directories.

`render_model_card` is used by the checkpoint converter and by training; the repository's top-level
`MODEL_CARD.md` is `render_model_card("pac_s_pp_vit_b32")` (a test keeps them equal;
`python -m modeling_pacs.pacs.model_card > MODEL_CARD.md` regenerates it).

Example:

```python
>>> from modeling_pacs.pacs.model_card import render_model_card
>>> card = render_model_card("pac_s_pp_vit_b32", lora_mode="official")
>>> card.startswith("---\\n")
True
```
"""

from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from ..models.backbones import backbone_family
from ..models.modeling_pacs import PACSModel
from ..registry import PRETRAINED_MODELS
from .spec import CITATION, OFFICIAL_VARIANTS, release_for_training

if TYPE_CHECKING:
    from .training import TrainingRecipe

PAC_S_PP_PAPER_URL = "https://arxiv.org/abs/2410.07336"
PAC_S_PAPER_URL = "https://arxiv.org/abs/2303.12112"
OFFICIAL_CODE_URL = "https://github.com/aimagelab/pacscore"

# (benchmark, dataset id, measure id, measure name, value): reported numbers, never reproduced here
# (docs/spec/pacs.md#evaluation).
REPORTED_RESULTS = {
    "pac_s_pp_vit_b32": [
        ("Flickr8k-Expert", "flickr8k-expert", "kendall_tau_b", "PAC-S++ Kendall tau-b", 54.1),
        ("Flickr8k-Expert", "flickr8k-expert", "kendall_tau_c", "PAC-S++ Kendall tau-c", 54.5),
        ("Flickr8k-Expert", "flickr8k-expert", "kendall_tau_b", "RefPAC-S++ Kendall tau-b", 55.3),
        ("Flickr8k-Expert", "flickr8k-expert", "kendall_tau_c", "RefPAC-S++ Kendall tau-c", 55.7),
        ("Flickr8k-CF", "flickr8k-cf", "kendall_tau_b", "PAC-S++ Kendall tau-b", 37.0),
        ("Flickr8k-CF", "flickr8k-cf", "kendall_tau_c", "PAC-S++ Kendall tau-c", 19.1),
        ("Flickr8k-CF", "flickr8k-cf", "kendall_tau_b", "RefPAC-S++ Kendall tau-b", 37.9),
        ("Flickr8k-CF", "flickr8k-cf", "kendall_tau_c", "RefPAC-S++ Kendall tau-c", 19.6),
        ("Composite", "composite", "kendall_tau_b", "PAC-S++ Kendall tau-b", 53.9),
        ("Composite", "composite", "kendall_tau_c", "PAC-S++ Kendall tau-c", 58.3),
        ("Composite", "composite", "kendall_tau_b", "RefPAC-S++ Kendall tau-b", 54.7),
        ("Composite", "composite", "kendall_tau_c", "RefPAC-S++ Kendall tau-c", 59.1),
        ("Pascal-50S", "pascal-50s", "accuracy", "PAC-S++ accuracy (mean of HC/HI/HM/MM)", 82.3),
        ("Pascal-50S", "pascal-50s", "accuracy", "RefPAC-S++ accuracy (mean of HC/HI/HM/MM)", 84.5),
        ("FOIL", "foil", "accuracy", "PAC-S++ accuracy", 90.2),
        ("FOIL", "foil", "accuracy", "RefPAC-S++ accuracy (1 reference)", 93.5),
        ("FOIL", "foil", "accuracy", "RefPAC-S++ accuracy (4 references)", 94.1),
        ("VATEX-EVAL", "vatex-eval", "kendall_tau_b", "PAC-S++ Kendall tau-b (no reference)", 28.1),
        ("VATEX-EVAL", "vatex-eval", "spearmanr", "PAC-S++ Spearman rho (no reference)", 36.4),
        ("VATEX-EVAL", "vatex-eval", "kendall_tau_b", "RefPAC-S++ Kendall tau-b (1 reference)", 32.2),
        ("VATEX-EVAL", "vatex-eval", "spearmanr", "RefPAC-S++ Spearman rho (1 reference)", 41.5),
        ("VATEX-EVAL", "vatex-eval", "kendall_tau_b", "RefPAC-S++ Kendall tau-b (9 references)", 39.8),
        ("VATEX-EVAL", "vatex-eval", "spearmanr", "RefPAC-S++ Spearman rho (9 references)", 50.8),
        ("ActivityNet-FOIL", "activitynet-foil", "accuracy", "PAC-S++ accuracy", 91.0),
        ("ActivityNet-FOIL", "activitynet-foil", "accuracy", "RefPAC-S++ accuracy", 93.4),
    ],
    "pac_s_pp_vit_l14": [
        ("Flickr8k-Expert", "flickr8k-expert", "kendall_tau_c", "PAC-S++ Kendall tau-c", 57.4),
        ("Flickr8k-CF", "flickr8k-cf", "kendall_tau_b", "PAC-S++ Kendall tau-b", 38.5),
        ("Composite", "composite", "kendall_tau_c", "PAC-S++ Kendall tau-c", 62.0),
        ("Pascal-50S", "pascal-50s", "accuracy", "accuracy", 82.4),
        ("FOIL", "foil", "accuracy", "accuracy", 93.6),
    ],
    "pac_s_vit_b32": [
        ("Flickr8k-Expert", "flickr8k-expert", "kendall_tau_b", "PAC-S Kendall tau-b", 53.919),
        ("Flickr8k-Expert", "flickr8k-expert", "kendall_tau_c", "PAC-S Kendall tau-c", 54.292),
        ("Flickr8k-CF", "flickr8k-cf", "kendall_tau_b", "PAC-S Kendall tau-b", 36.037),
        ("Flickr8k-CF", "flickr8k-cf", "kendall_tau_c", "PAC-S Kendall tau-c", 18.628),
    ],
}
# (model-index source name, link text for the card, URL) of each variant's reported results.
PAC_S_PP_SOURCE = (
    "PAC-S++ paper (Sarto, Moratelli et al.), as reported; not reproduced here",
    "PAC-S++ paper",
    PAC_S_PP_PAPER_URL,
)
REPORTED_SOURCES = {
    "pac_s_pp_vit_b32": PAC_S_PP_SOURCE,
    "pac_s_pp_vit_l14": PAC_S_PP_SOURCE,
    "pac_s_vit_b32": (
        "official PAC-S repository README, as reported; not reproduced here",
        "official PAC-S repository",
        OFFICIAL_CODE_URL,
    ),
}

LORA_MODE_TEXT = {
    "official": (
        "`official`: reproduces the released inference exactly. The official code builds the model and calls "
        "`model.eval()` before loading the checkpoint, which marks the MLP LoRA layers as already merged; they then "
        "use their base weights only. So the MLP deltas (`mlp.c_fc`, `mlp.c_proj`) are not applied (and not written "
        "to the adapter); the attention (q/k/v, out-projection) and patch-embedding deltas are."
    ),
    "full": (
        "`full`: every LoRA delta of the checkpoint is applied, including the MLP ones that the released inference "
        "skips. Scores differ from the official code's; use it to study what the trained adapter does."
    ),
}


def variant_facts(variant: str):
    """The `OfficialVariant` record of `variant`."""
    if variant not in OFFICIAL_VARIANTS:
        raise ValueError(f"unknown variant {variant!r}: choose one of {', '.join(OFFICIAL_VARIANTS)}")
    return OFFICIAL_VARIANTS[variant]


def model_index(variant: str, name: str) -> list[dict]:
    """Hub `model-index` entries of the reported results, each metric marked unverified and its source named."""
    source_name, _, source_url = REPORTED_SOURCES[variant]
    results = []
    for benchmark, dataset_id, metric_type, metric_name, value in REPORTED_RESULTS[variant]:
        result = next((item for item in results if item["dataset"]["name"] == benchmark), None)
        if result is None:
            result = {
                "task": {"type": "image-to-text", "name": "Captioning evaluation (agreement with human judgments)"},
                "dataset": {"type": dataset_id, "name": benchmark},
                "metrics": [],
                "source": {"name": source_name, "url": source_url},
            }
            results.append(result)
        result["metrics"].append(
            {"type": metric_type, "value": value, "name": f"{metric_name} (reported)", "verified": False}
        )
    return [{"name": name, "results": results}]


def render_model_card(
    variant: str = "pac_s_pp_vit_b32",
    *,
    repo_id: str | None = None,
    lora_mode: str | None = "official",
    delta_norms: list | None = None,
    geometry=None,
    provenance: str | None = None,
    include_reported_results: bool = True,
    base_model_id: str | None = None,
    max_text_length: int = 77,
) -> str:
    """The README.md (YAML front matter + markdown) of a PAC-S / PAC-S++ model directory.

    Args:
        variant: one of `modeling_pacs.variants.OFFICIAL_VARIANTS`.
        repo_id: Hub id used in the examples (default: the alias's repository in `PRETRAINED_MODELS`).
        lora_mode: PAC-S++ converted from an official checkpoint: how its LoRA deltas were converted (`official` or
            `full`). `None` for adapters trained here (pass `provenance` too).
        delta_norms: `DeltaNorm`s printed by the converter, listed in the card.
        geometry: the converted checkpoint's `CheckpointGeometry`, listed in the card.
        provenance: where the weights come from; defaults to the official checkpoint of the variant.
        include_reported_results: add the paper's reported results (model-index, marked as reported).
        base_model_id: Hub id of the backbone, for models trained here (default: the variant's released backbone).
        max_text_length: the model's text context in tokens (248 for models trained on a Long-CLIP backbone).
    """
    facts = variant_facts(variant)
    repo_id = repo_id or PRETRAINED_MODELS[variant]
    is_pp = facts.has_lora
    score_name, ref_score_name = ("PAC-S++", "RefPAC-S++") if is_pp else ("PAC-S", "RefPAC-S")
    provenance = provenance or (
        f"converted from the official checkpoint `{facts.checkpoint_file}` ({OFFICIAL_CODE_URL}) with "
        f"`pacs-pp convert --variant {variant}" + (f" --lora-mode {lora_mode}`" if is_pp else "`")
    )
    metadata = {
        "license": "other",
        "license_name": "upstream-pacscore",
        "license_link": OFFICIAL_CODE_URL,
        "library_name": "transformers",
        "tags": [
            "image-captioning",
            "captioning-evaluation",
            "evaluation-metric",
            "clip",
            "pac-s",
            *(["pac-s-pp", "lora", "peft"] if is_pp else []),
            "custom_code",
        ],
        "base_model": base_model_id or facts.base_model_id,
    }
    if include_reported_results and variant in REPORTED_RESULTS:
        metadata["model-index"] = model_index(variant, repo_id.split("/")[-1])
    front_matter = yaml.safe_dump(metadata, sort_keys=False, allow_unicode=True, width=1000)

    sections = [
        f"# {facts.display_name}: {score_name} / {ref_score_name} captioning metric",
        f"{score_name} scores how well a caption describes an image, with no references needed; {ref_score_name} "
        "also uses reference captions. The encoders are CLIP "
        + (
            "with LoRA adapters (rank 4, in both towers) trained by positive-augmented contrastive learning on real "
            "and synthetic (generated) image-caption pairs (PAC-S++, Sarto, Moratelli et al., "
            f"[arXiv:2410.07336]({PAC_S_PP_PAPER_URL}))."
            if is_pp
            else "whose final projections were fine-tuned by positive-augmented contrastive learning "
            f"(PAC-S, Sarto et al., CVPR 2023, [arXiv:2303.12112]({PAC_S_PAPER_URL}))."
        ),
        "## What the metric computes",
        f"- Reference-free (Eq. 4): `{score_name}(v, t) = w * max(cos(E_v(v), E_t(t)), 0)`, with **w = {facts.w}**.\n"
        f"- Reference-based (Eq. 5): `{ref_score_name}(v, t, R) = HM({score_name}(v, t), max(0, max_r cos(E_t(t), "
        "E_t(r))))`, where HM is the harmonic mean; the reference term is not scaled by w.\n"
        '- Every caption and reference is encoded as `"A photo depicts " + caption` (whitespace-normalised, CLIP '
        f"BPE, {max_text_length} tokens, truncated keeping the end-of-text token). Images: RGB, shorter side to "
        f"{geometry.image_size if geometry else 224} px (bicubic), center crop, CLIP mean/std.\n"
        "- The corpus score is the mean of per-item scores. Reference numbers are fp32.\n"
        "- w values of the family: CLIP-S 2.5, PAC-S 2.0 (official code), PAC-S++ ViT-B/32 2.5, PAC-S++ ViT-L/14 "
        "3.0. w never changes the ranking of reference-free scores, but it changes the reference-based score.",
        "## Usage",
        "With transformers (the model code ships in this repository):\n\n"
        "```python\n"
        "import torch\n"
        "from transformers import AutoModel\n\n"
        f'model = AutoModel.from_pretrained("{repo_id}", trust_remote_code=True, dtype=torch.float32).eval()\n'
        'out = model.score(["cat.jpg"], ["a cat sleeping on a sofa"], references=[["a cat on a couch"]])\n'
        f"print(out.scores, out.ref_scores)  # per item: {score_name}, {ref_score_name}\n"
        "print(out.mean_score, out.mean_ref_score)  # corpus scores\n"
        "```\n\n"
        "With `evaluate` (the module in `metric/pacs_pp` of the pacs-pp repository):\n\n"
        "```python\n"
        "import evaluate\n\n"
        f'metric = evaluate.load("metric/pacs_pp", model="{repo_id}")\n'
        'metric.compute(predictions=["a cat sleeping on a sofa"], images=["cat.jpg"], '
        'references=[["a cat on a couch"]])\n'
        "```\n\n"
        "From the command line (`pip install pacs-pp`):\n\n"
        "```bash\n"
        f"pacs-score captions.json --model {repo_id} --references refs.json --output scores.json\n"
        "```",
        "## Provenance",
        f"Weights {provenance}. Base model: `{facts.base_model_id}` "
        f"({'OpenCLIP, plain GELU' if facts.hidden_act == 'gelu' else 'OpenAI CLIP, QuickGELU'}).",
    ]
    if is_pp and lora_mode is None:
        sections.append(
            "The directory holds the base weights (`model.safetensors`) and a PEFT LoRA adapter in `adapter/`; "
            "`from_pretrained` merges the adapter by default."
        )
    elif is_pp:
        sections.append(
            "The directory holds the base weights (`model.safetensors`, with the patch-embedding LoRA delta merged "
            "into `vision_model.embeddings.patch_embedding.weight`: its factorisation has no PEFT equivalent) and a "
            "PEFT LoRA adapter in `adapter/` on q/k/v (sharing the official in-projection A), out_proj"
            + (", fc1 and fc2" if lora_mode == "full" else "")
            + " of both towers. `from_pretrained` merges the adapter by default. "
            + f"LoRA mode: {LORA_MODE_TEXT[lora_mode]}\n\n"
            "The adapter alone on top of the plain base model misses the patch-embedding delta: load the whole "
            "directory."
        )
    if geometry is not None:
        sections.append(f"Geometry: {geometry.describe()}.")
    if delta_norms:
        rows = "\n".join(
            f"| {item.tower} | {item.group} | {item.norm:.6g} | {item.relative_norm:.6g} | "
            f"{'yes' if item.applied else 'no'} |"
            for item in delta_norms
        )
        sections.append(
            "LoRA delta Frobenius norms of the checkpoint (over all blocks of a tower):\n\n"
            "| tower | group | norm of delta | relative to base weights | applied |\n|---|---|---|---|---|\n" + rows
        )
    if include_reported_results and variant in REPORTED_RESULTS:
        _, link_text, source_url = REPORTED_SOURCES[variant]
        rows = "\n".join(
            f"| {benchmark} | {name} | {value} |" for benchmark, _, _, name, value in REPORTED_RESULTS[variant]
        )
        sections += [
            "## Reported results",
            f"**Reported by the [{link_text}]({source_url}), not reproduced by this repository.**\n\n"
            f"| benchmark | measure | reported value |\n|---|---|---|\n{rows}",
        ]
    sections += [
        "## Limitations",
        f"- English captions only (CLIP BPE vocabulary); texts longer than {max_text_length} tokens are truncated.\n"
        "- A learned metric inherits the biases of CLIP's web training data and of the synthetic data used for "
        "fine-tuning; it rewards visual-textual alignment and can miss fluency, grammar and fine-grained errors.\n"
        "- Scores are comparable only within one variant and one w; fp16/bf16 inference deviates slightly from the "
        "fp32 reference numbers.\n"
        "- License: the weights follow the terms of the upstream release "
        f"({OFFICIAL_CODE_URL}, which states none) and of the base model `{facts.base_model_id}` (MIT); check them "
        "before redistributing.",
        "## Citation",
        f"```bibtex\n{CITATION}\n```",
    ]
    return f"---\n{front_matter}---\n\n" + "\n\n".join(sections) + "\n"


def render_siglip_model_card(
    *, repo_id: str, variant: str, w: float, base_model_id: str, max_text_length: int, provenance: str
) -> str:
    """The README.md of a PAC-S / PAC-S++ model trained here on a SigLIP (or fixed-resolution SigLIP 2) backbone.

    Example:

    ```python
    >>> card = render_siglip_model_card(repo_id="me/pacs-siglip", variant="pac_s_pp", w=2.5,
    ...     base_model_id="google/siglip-base-patch16-224", max_text_length=64, provenance="trained here")
    >>> "base_model: google/siglip-base-patch16-224" in card
    True
    ```
    """
    is_pp = variant == "pac_s_pp"
    score_name, ref_score_name = ("PAC-S++", "RefPAC-S++") if is_pp else ("PAC-S", "RefPAC-S")
    metadata = {
        "library_name": "transformers",
        "tags": ["image-captioning", "captioning-evaluation", "evaluation-metric", "siglip", "pac-s"]
        + (["pac-s-pp", "lora", "peft"] if is_pp else [])
        + ["custom_code"],
        "base_model": base_model_id,
    }
    front_matter = yaml.safe_dump(metadata, sort_keys=False, allow_unicode=True, width=1000)
    trained = "LoRA adapters (rank 4) in both towers" if is_pp else "its pooling heads"
    sections = [
        f"# {score_name} / {ref_score_name} on SigLIP (`{base_model_id}`)",
        f"A captioning metric: SigLIP with {trained} fine-tuned by positive-augmented contrastive learning "
        f"(PAC-S++, Sarto, Moratelli et al., [arXiv:2410.07336]({PAC_S_PP_PAPER_URL}), Table 8 uses SigLIP and "
        "SigLIP 2 backbones). No results are reported for this model.",
        "## What the metric computes",
        f"- Reference-free (Eq. 4): `w * max(cos(E_v(v), E_t(t)), 0)` with **w = {w}**; SigLIP's logit bias is not "
        "used.\n"
        f"- Reference-based (Eq. 5): the harmonic mean of Eq. 4 and `max(0, max_r cos(E_t(t), E_t(r)))`.\n"
        f"- SigLIP's own pipelines: captions as given (no prompt), padded to {max_text_length} tokens; images resized "
        "to the square input size (no crop), normalised with mean = std = 0.5, transparency composited onto white.",
        "## Usage",
        "```python\nimport torch\nfrom transformers import AutoModel\n\n"
        f'model = AutoModel.from_pretrained("{repo_id}", trust_remote_code=True, dtype=torch.float32).eval()\n'
        'out = model.score(["cat.jpg"], ["a cat sleeping on a sofa"], references=[["a cat on a couch"]])\n```',
        "## Provenance",
        f"Weights {provenance}.",
        "## Limitations",
        f"- Texts longer than {max_text_length} tokens are truncated. Scores are comparable only within one model "
        "and one w.\n"
        f"- License: check the terms of the base model `{base_model_id}` before redistributing.",
        "## Citation",
        f"```bibtex\n{CITATION}\n```",
    ]
    return f"---\n{front_matter}---\n\n" + "\n\n".join(sections) + "\n"


def write_trained_model_card(
    directory: str | Path,
    model: PACSModel,
    base_model: str,
    recipe: "TrainingRecipe",
    lambda_v: float,
    lambda_t: float,
    loss: str,
    metrics: dict,
) -> Path:
    """The model card of a model trained by `scripts/train_pacs.py` (its run's provenance; no reported results),
    written as `directory/README.md` (mode 0644)."""
    directory = Path(directory)
    final_metrics = ", ".join(f"{key}={value:.4g}" for key, value in sorted(metrics.items()))
    if backbone_family(model.config.backbone_config) == "siglip":
        card = render_siglip_model_card(
            repo_id=str(directory),
            variant=recipe.variant,
            w=model.config.w,
            base_model_id=model.config.base_model_id,
            max_text_length=model.config.max_text_length,
            provenance=f"trained here with `scripts/train_pacs.py` from `{base_model}` "
            f"(lambda_v={lambda_v}, lambda_t={lambda_t}, loss {loss}); final metrics: {final_metrics}",
        )
    else:
        large = model.config.backbone_config.vision_config.hidden_size >= 1024
        trained = "LoRA adapters (r=4) in both towers and the patch embedding" if recipe.use_lora else "the projections"
        card = render_model_card(
            release_for_training(recipe.variant, large),
            repo_id=str(directory),
            lora_mode=None,
            provenance=f"trained here with `scripts/train_pacs.py` from `{base_model}` ({trained}; "
            f"lambda_v={lambda_v}, lambda_t={lambda_t}); final metrics: {final_metrics}",
            include_reported_results=False,
            base_model_id=model.config.base_model_id,
            max_text_length=model.config.max_text_length,
        )
    path = directory / "README.md"
    path.write_text(card, encoding="utf-8")
    path.chmod(0o644)
    return path


if __name__ == "__main__":
    print(render_model_card("pac_s_pp_vit_b32"), end="")
