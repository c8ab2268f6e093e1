"""PAC-S++ and its relatives PAC-S and CLIP-S in the registry: one family (`PACSModel`), three metrics
(`PACSConfig.variant`), the official checkpoints and their releases, and the papers' reported numbers.

The variants' default `w` is defined by the remote code (`models.backbones.CLIP_DEFAULT_W`), which cannot import
this module; `tests/test_layout.py` keeps the Hub ids the remote code must hold as defaults equal to these.
"""

from dataclasses import dataclass

from ..metric_spec import Capabilities, ConverterCommand, MetricSpec, OutputField, ReleasedVariant, TinyModels

# OpenAI's `build_model` derives head counts as width // 64; tiny test checkpoints pass another head size.
OPENAI_HEAD_DIM = 64
# The converters' choices (`pacs-pp convert --lora-mode`, `pacs-pp convert-longclip --weights`), here so that the
# commands' --help reads them without importing torch.
LORA_MODES = ("official", "full")
WEIGHT_PRECISIONS = ("official", "fp32")

VIT_B32_GEOMETRY = {
    "embed_dim": 512,
    "image_size": 224,
    "patch_size": 32,
    "vision_width": 768,
    "vision_layers": 12,
    "text_width": 512,
    "text_layers": 12,
    "context_length": 77,
    "vocab_size": 49408,
}
VIT_L14_GEOMETRY = {
    "embed_dim": 768,
    "image_size": 224,
    "patch_size": 14,
    "vision_width": 1024,
    "vision_layers": 24,
    "text_width": 768,
    "text_layers": 12,
    "context_length": 77,
    "vocab_size": 49408,
}


@dataclass(frozen=True)
class OfficialVariant:
    """One released checkpoint of the official code: what it is, how it scores, and the geometry it must have."""

    name: str
    display_name: str
    metric_variant: str
    w: float
    base_model_id: str
    hidden_act: str
    checkpoint_file: str
    has_lora: bool
    geometry: dict


# w: PAC-S uses 2.0 (official code); PAC-S++ 2.5 (ViT-B/32) and 3.0 (ViT-L/14) (PAC-S++ paper Sec. 5.7).
OFFICIAL_VARIANTS = {
    variant.name: variant
    for variant in (
        OfficialVariant("pac_s_vit_b32", "PAC-S ViT-B/32", "pac_s", 2.0, "openai/clip-vit-base-patch32",
                        "quick_gelu", "clip_ViT-B-32.pth", False, VIT_B32_GEOMETRY),
        OfficialVariant("pac_s_openclip_vit_l14", "PAC-S OpenCLIP ViT-L/14", "pac_s", 2.0,
                        "laion/CLIP-ViT-L-14-laion2B-s32B-b82K", "gelu", "openClip_ViT-L-14.pth", False,
                        VIT_L14_GEOMETRY),
        OfficialVariant("pac_s_pp_vit_b32", "PAC-S++ ViT-B/32", "pac_s_pp", 2.5, "openai/clip-vit-base-patch32",
                        "quick_gelu", "PAC++_clip_ViT-B-32.pth", True, VIT_B32_GEOMETRY),
        OfficialVariant("pac_s_pp_vit_l14", "PAC-S++ ViT-L/14", "pac_s_pp", 3.0, "openai/clip-vit-large-patch14",
                        "quick_gelu", "PAC++_clip_ViT-L-14.pth", True, VIT_L14_GEOMETRY),
    )
}  # fmt: skip


def release_for_training(metric_variant: str, large: bool) -> str:
    """The official release whose model card a model trained here derives from (its recipe and backbone size)."""
    return {
        ("pac_s_pp", False): "pac_s_pp_vit_b32",
        ("pac_s_pp", True): "pac_s_pp_vit_l14",
        ("pac_s", False): "pac_s_vit_b32",
        ("pac_s", True): "pac_s_openclip_vit_l14",
    }[(metric_variant, large)]


CITATION = """\
@article{sarto2025positive,
  title={{Positive-Augmented Contrastive Learning for Vision-and-Language Evaluation and Training}},
  author={Sarto, Sara and Moratelli, Nicholas and Cornia, Marcella and Baraldi, Lorenzo and Cucchiara, Rita},
  journal={International Journal of Computer Vision},
  year={2025},
  eprint={2410.07336},
  archivePrefix={arXiv}
}
@inproceedings{sarto2023positive,
  title={{Positive-Augmented Contrastive Learning for Image and Video Captioning Evaluation}},
  author={Sarto, Sara and Barraco, Manuele and Cornia, Marcella and Baraldi, Lorenzo and Cucchiara, Rita},
  booktitle={Proceedings of the IEEE/CVF Conference on Computer Vision and Pattern Recognition},
  year={2023}
}"""


def _taus(tau_b: float, tau_c: float) -> dict:
    return {"kendall_tau_b": tau_b, "kendall_tau_c": tau_c}


def _pascal(hc: float, hi: float, hm: float, mm: float, mean: float) -> dict:
    return {"accuracy_HC": hc, "accuracy_HI": hi, "accuracy_HM": hm, "accuracy_MM": mm, "accuracy_mean": mean}


def _foil(one_ref: float, four_refs: float) -> dict:
    return {"accuracy_1ref": one_ref, "accuracy_4ref": four_refs}


# Reported numbers, x100, by benchmark and by the paper's metric name (ViT-B/32 unless "L/14"). On video, CLIP-S and
# RefCLIP-S are EMScore and EMScoreRef.
REPORTED_NUMBERS = {
    "flickr8k_expert": {
        "CLIP-S": _taus(51.1, 51.2), "PAC-S++": _taus(54.1, 54.5), "RefCLIP-S": _taus(52.6, 53.0),
        "RefPAC-S++": _taus(55.3, 55.7), "PAC-S": _taus(53.9, 54.3), "RefPAC-S": _taus(55.5, 55.9),
        "PAC-S++ L/14": _taus(57.0, 57.4), "RefPAC-S++ L/14": _taus(57.5, 57.9),
    },
    "flickr8k_cf": {
        "CLIP-S": _taus(34.4, 17.7), "PAC-S++": _taus(37.0, 19.1), "RefCLIP-S": _taus(36.4, 18.8),
        "RefPAC-S++": _taus(37.9, 19.6), "PAC-S": _taus(36.0, 18.6), "RefPAC-S": _taus(37.6, 19.5),
        "PAC-S++ L/14": _taus(38.5, 19.9), "RefPAC-S++ L/14": _taus(38.8, 20.1),
    },
    "composite": {
        "CLIP-S": _taus(49.8, 53.8), "PAC-S++": _taus(53.9, 58.3), "RefCLIP-S": _taus(51.2, 55.4),
        "RefPAC-S++": _taus(54.7, 59.1), "PAC-S": _taus(51.5, 55.7), "RefPAC-S": _taus(53.0, 57.3),
        "PAC-S++ L/14": _taus(57.3, 62.0), "RefPAC-S++ L/14": _taus(60.0, 61.6),
    },
    "pascal50s": {
        "CLIP-S": _pascal(55.9, 99.3, 96.5, 72.0, 80.9), "PAC-S++": _pascal(59.5, 99.6, 96.5, 73.6, 82.3),
        "RefCLIP-S": _pascal(64.9, 99.5, 95.5, 73.3, 83.3), "RefPAC-S++": _pascal(67.2, 99.6, 96.2, 74.2, 84.5),
        "PAC-S": {"accuracy_mean": 82.4}, "RefPAC-S": {"accuracy_mean": 84.7},
        "PAC-S++ L/14": {"accuracy_mean": 82.4}, "RefPAC-S++ L/14": {"accuracy_mean": 85.4},
    },
    "foil": {
        "CLIP-S": _foil(87.2, 87.2), "PAC-S++": _foil(90.2, 90.2), "RefCLIP-S": _foil(91.0, 92.6),
        "RefPAC-S++": _foil(93.5, 94.1), "PAC-S": _foil(89.9, 89.9), "RefPAC-S": _foil(93.7, 94.9),
        "PAC-S++ L/14": _foil(93.6, 93.6),
    },
    "vatex_eval": {
        "CLIP-S": {"kendall_tau_b": 23.2, "spearman": 30.3},
        "PAC-S++": {"kendall_tau_b": 28.1, "spearman": 36.4},
        "RefCLIP-S": {"kendall_tau_b_1ref": 28.6, "spearman_1ref": 37.1, "kendall_tau_b_9ref": 36.8,
                      "spearman_9ref": 47.2},
        "RefPAC-S++": {"kendall_tau_b_1ref": 32.2, "spearman_1ref": 41.5, "kendall_tau_b_9ref": 39.8,
                       "spearman_9ref": 50.8},
    },
    "activitynet_foil": {
        "CLIP-S": {"accuracy": 89.5}, "PAC-S++": {"accuracy": 91.0}, "RefCLIP-S": {"accuracy": 92.4},
        "RefPAC-S++": {"accuracy": 93.4}, "PAC-S": {"accuracy": 90.1}, "RefPAC-S": {"accuracy": 93.5},
    },
    "polaris": {
        "CLIP-S": {"kendall_tau_c": 52.3}, "RefCLIP-S": {"kendall_tau_c": 52.3}, "PAC-S": {"kendall_tau_c": 52.5},
        "RefPAC-S": {"kendall_tau_c": 56.0},
    },
    "nebula": {  # Pearl Table 1, Spica-corrected annotations
        "CLIP-S": _taus(50.5, 47.9), "PAC-S": _taus(51.0, 48.3), "PAC-S++": _taus(50.5, 47.9),
        "RefCLIP-S": _taus(53.6, 50.8), "RefPAC-S": _taus(54.7, 51.9), "RefPAC-S++": _taus(53.3, 50.6),
    },
    # CAPTURE README (foundation-multimodal-models/CAPTURE@52eeb27, lines 45-57): the AVERAGE of DetailCaps-100 and
    # DetailCaps-4870; CLIPScore's backbone is not stated.
    "detailcaps": {
        "CLIP-S": {"pearson": 35.58, "one_minus_r2": 21.46, "kendall_tau_b": 24.79, "sample_kendall_tau_b": 38.41},
    },
}  # fmt: skip

PACS = MetricSpec(
    name="pac_s_pp",
    display_name="PAC-S++",
    description=(
        "PAC-S++, PAC-S and CLIP-S: w * max(cos(image, caption), 0) (Eq. 4) and, with references, its harmonic mean "
        "with the best caption-reference cosine (Eq. 5), on CLIP (or SigLIP) with the variant's LoRA adapters or "
        "fine-tuned projections; images and videos"
    ),
    capabilities=Capabilities(
        media=("image", "video"),
        reference_free=True,
        reference_based=True,
        long_caption_modes=("truncate", "chunks"),
        dtypes=("fp32", "fp16", "bf16"),
        score_options=("image_batch_size", "text_batch_size", "progress", "long_captions"),
        load_options=("merge_adapter",),
    ),
    outputs=(
        OutputField(
            "score",
            "scores",
            "Eq. 4: w * max(cos(image, caption), 0)",
            label_from_config=0,
            mean_attribute="mean_score",
            minimum=0.0,
            maximum_from="w",
        ),
        OutputField(
            "ref_score",
            "ref_scores",
            "Eq. 5: harmonic mean of Eq. 4 and the best caption-reference cosine",
            label_from_config=1,
            mean_attribute="mean_ref_score",
            needs_references=True,
            minimum=0.0,
            maximum_from="w",
        ),
        OutputField.truncation("caption tokens the text encoder did not read"),
    ),  # fmt: skip
    citation=CITATION,
    metrics=("pac_s_pp", "pac_s", "clip_s"),
    docs_page="spec/pacs.md",
    config_class="modeling_pacs.models.configuration_pacs:PACSConfig",
    model_class="modeling_pacs.models.modeling_pacs:PACSModel",
    loader="modeling_pacs.pacs.loading:load_pacs_model",
    converters=(
        ConverterCommand(
            "convert",
            help="convert an official PAC-S / PAC-S++ checkpoint",
            description="Convert an official PAC-S / PAC-S++ checkpoint into a Hub-ready transformers directory.",
            example="pacs-pp convert --checkpoint PAC++_clip_ViT-B-32.pth --variant pac_s_pp_vit_b32 "
            "--output-dir pac-s-pp",
            module="modeling_pacs.pacs.commands",
        ),
        ConverterCommand(
            "convert-longclip",
            help="convert a Long-CLIP checkpoint (CLIP-S that reads 248 tokens)",
            description="Convert a Long-CLIP checkpoint into a Hub-ready CLIP-S directory that reads 248 tokens.",
            example="pacs-pp convert-longclip --checkpoint longclip-B.pt --output-dir clip-s-longclip-b16",
            module="modeling_pacs.pacs.commands",
            add_arguments="add_longclip_arguments",
            convert="convert_longclip",
            epilog="LONGCLIP_EPILOG",
        ),
    ),
    variants=(
        ReleasedVariant(
            "pac_s_pp_vit_b32",
            "pacs-pp/pac-s-pp-clip-vit-b32",
            "pac_s_pp",
            "PAC-S++",
            "PAC-S++ / RefPAC-S++, CLIP ViT-B/32 + LoRA r=4",
            w=2.5,
            backbone="ViT-B/32",
            in_space=True,
        ),
        ReleasedVariant(
            "pac_s_pp_vit_l14",
            "pacs-pp/pac-s-pp-clip-vit-l14",
            "pac_s_pp",
            "PAC-S++ L/14",
            "PAC-S++ / RefPAC-S++, CLIP ViT-L/14 + LoRA r=4",
            w=3.0,
            backbone="ViT-L/14",
            in_space=True,
        ),
        ReleasedVariant(
            "pac_s_vit_b32",
            "pacs-pp/pac-s-clip-vit-b32",
            "pac_s",
            "PAC-S",
            "PAC-S / RefPAC-S (fine-tuned projections)",
            w=2.0,
            backbone="ViT-B/32",
        ),
        ReleasedVariant(
            "pac_s_openclip_vit_l14",
            "pacs-pp/pac-s-openclip-vit-l14",
            "pac_s",
            None,
            "PAC-S / RefPAC-S, OpenCLIP ViT-L/14",
            w=2.0,
            backbone="ViT-L/14",
        ),
        ReleasedVariant(
            "clip_s_vit_b32",
            "openai/clip-vit-base-patch32",
            "clip_s",
            "CLIP-S",
            "CLIP-S / RefCLIP-S",
            w=2.5,
            backbone="ViT-B/32",
        ),
        ReleasedVariant(
            "clip_s_vit_l14",
            "openai/clip-vit-large-patch14",
            "clip_s",
            None,
            "CLIP-S / RefCLIP-S",
            w=2.5,
            backbone="ViT-L/14",
        ),
    ),  # fmt: skip
    tiny=TinyModels(
        builder="modeling_pacs.testing.pacs:make_tiny",
        backbones=("clip", "siglip", "siglip2"),
    ),
    reported_numbers=REPORTED_NUMBERS,
    wraps_model_types=("clip", "siglip", "siglip2"),
)

__all__ = [
    "CITATION",
    "OFFICIAL_VARIANTS",
    "PACS",
    "VIT_B32_GEOMETRY",
    "VIT_L14_GEOMETRY",
    "OfficialVariant",
    "release_for_training",
]
