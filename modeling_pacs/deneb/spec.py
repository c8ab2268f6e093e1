"""DENEB in the registry: the supervised, hallucination-robust metric of Matsuda et al. (ACCV 2024), its converter,
tiny model and reported numbers (docs/spec/deneb.md). The authors release no weights: there is no released variant."""

from ..metric_spec import Capabilities, ConverterCommand, MetricSpec, OutputField, TinyModels

CITATION = """\
@inproceedings{matsuda2024deneb,
  title     = {DENEB: A Hallucination-Robust Automatic Evaluation Metric for Image Captioning},
  author    = {Matsuda, Kazuki and Wada, Yuiga and Sugiura, Komei},
  booktitle = {ACCV},
  year      = {2024}
}"""

DENEB = MetricSpec(
    name="deneb",
    display_name="DENEB",
    description=(
        "DENEB: Sim-Vec transformers over CLIP and SimCSE-RoBERTa features of the image, the candidate and all "
        "references at once, an MLP head; reference-based only"
    ),
    capabilities=Capabilities(
        reference_free=False,
        reference_based=True,
        dtypes=("fp32",),
        scoring_modes=("per_item", "official"),
        score_options=("mode", "batch_size", "image_batch_size", "text_batch_size", "progress"),
    ),
    outputs=(
        OutputField(
            "score",
            "scores",
            "DENEB's score of the candidate against its image and all its references",
            label_from_config=0,
            mean_attribute="mean_score",
            needs_references=True,
            minimum=0.0,
            maximum=1.0,
        ),
        OutputField.truncation("candidate tokens CLIP's text encoder did not read"),
    ),  # fmt: skip
    citation=CITATION,
    metrics=("deneb",),
    docs_page="spec/deneb.md",
    config_class="modeling_pacs.models.configuration_deneb:DenebConfig",
    model_class="modeling_pacs.models.modeling_deneb:DenebModel",
    loader="modeling_pacs.deneb.loading:load_deneb_model",
    converters=(
        ConverterCommand(
            "convert-deneb",
            help="convert a checkpoint written by DENEB's training code",
            description="Convert a DENEB Lightning checkpoint into a Hub-ready DenebModel directory.",
            example="pacs-pp convert-deneb --checkpoint deneb.ckpt --text-encoder ./sup-simcse-roberta-base "
            "--output-dir deneb",
            module="modeling_pacs.deneb.commands",
        ),
    ),
    tiny=TinyModels(builder="modeling_pacs.testing.deneb:make_tiny"),
    # The DENEB row (marked with a dagger) of the Pearl paper's Table 1 (Hirano et al.), x100; the DENEB paper's own
    # tables are not in this repository's papers (docs/spec/deneb.md#reported-numbers).
    reported_numbers={
        "composite": {"DENEB": {"kendall_tau_b": 54.0, "kendall_tau_c": 57.9}},
        "flickr8k_expert": {"DENEB": {"kendall_tau_b": 55.6, "kendall_tau_c": 56.5}},
        "flickr8k_cf": {"DENEB": {"kendall_tau_b": 38.0, "kendall_tau_c": 19.6}},
        "nebula": {"DENEB": {"kendall_tau_b": 58.1, "kendall_tau_c": 55.1}},
        "foil": {"DENEB": {"accuracy_1ref": 95.1, "accuracy_4ref": 96.1}},
    },  # fmt: skip
)

__all__ = ["CITATION", "DENEB"]
