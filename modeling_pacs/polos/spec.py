"""Polos in the registry: the supervised CLIP + SimCSE metric of Wada et al. (CVPR 2024), its release, converter,
tiny model and reported numbers (docs/spec/polos.md)."""

from ..metric_spec import Capabilities, ConverterCommand, MetricSpec, OutputField, ReleasedVariant, TinyModels

CITATION = """\
@inproceedings{wada2024polos,
  title     = {Polos: Multimodal Metric Learning from Human Feedback for Image Captioning},
  author    = {Wada, Yuiga and Kaneda, Kanta and Saito, Daichi and Sugiura, Komei},
  booktitle = {CVPR},
  year      = {2024}
}"""

POLOS = MetricSpec(
    name="polos",
    display_name="Polos",
    description=(
        "Polos: a supervised head over CLIP and SimCSE-RoBERTa features of the image, the candidate and each "
        "reference, the maximum over references; reference-based only"
    ),
    capabilities=Capabilities(
        reference_free=False,
        reference_based=True,
        per_reference_scores=True,
        dtypes=("fp32", "fp16", "bf16"),
        scoring_modes=("per_item", "official"),
        score_options=("mode", "batch_size", "image_batch_size", "text_batch_size", "progress"),
    ),
    outputs=(
        OutputField(
            "score",
            "scores",
            "the Polos head's score, the maximum over the references",
            label_from_config=0,
            mean_attribute="mean_score",
            needs_references=True,
            minimum=0.0,
            maximum=1.0,
        ),
        OutputField.truncation("candidate tokens CLIP's text encoder did not read"),
    ),  # fmt: skip
    citation=CITATION,
    metrics=("polos",),
    docs_page="spec/polos.md",
    config_class="modeling_pacs.models.configuration_polos:PolosConfig",
    model_class="modeling_pacs.models.modeling_polos:PolosModel",
    loader="modeling_pacs.polos.loading:load_polos_model",
    converters=(
        ConverterCommand(
            "convert-polos",
            help="convert the released Polos checkpoint",
            description="Convert the released Polos Lightning checkpoint into a Hub-ready PolosModel directory.",
            example="pacs-pp convert-polos --checkpoint reprod/reprod.ckpt --output-dir polos-vit-b32",
            module="modeling_pacs.polos.commands",
        ),
    ),
    variants=(
        ReleasedVariant(
            "polos_vit_b32",
            "pacs-pp/polos-clip-vit-b32",
            "polos",
            "Polos",
            "Polos, CLIP ViT-B/32 + SimCSE-RoBERTa (reference-based)",
            backbone="ViT-B/32",
            in_space=True,
        ),
    ),  # fmt: skip
    tiny=TinyModels(builder="modeling_pacs.testing.polos:make_tiny"),
    reported_numbers={
        "flickr8k_expert": {"Polos": {"kendall_tau_c": 56.4}},
        "flickr8k_cf": {"Polos": {"kendall_tau_b": 37.8}},
        "composite": {"Polos": {"kendall_tau_b": 53.7, "kendall_tau_c": 57.6}},
        "pascal50s": {
            "Polos": {
                "accuracy_HC": 70.0,
                "accuracy_HI": 99.6,
                "accuracy_HM": 97.4,
                "accuracy_MM": 79.0,
                "accuracy_mean": 86.5,
            }
        },
        "foil": {"Polos": {"accuracy_1ref": 93.3, "accuracy_4ref": 95.4}},
        "polaris": {"Polos": {"kendall_tau_c": 57.8}},
        "nebula": {"Polos": {"kendall_tau_b": 58.0, "kendall_tau_c": 55.0}},
    },  # fmt: skip
)

__all__ = ["CITATION", "POLOS"]
