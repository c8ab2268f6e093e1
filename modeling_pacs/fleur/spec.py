"""FLEUR in the registry: the LLaVA-1.5 judge of Lee et al. (ACL 2024), its converter and tiny model
(docs/spec/fleur.md). FLEUR asks LLaVA-1.5-13B to rate a caption; RefFLEUR adds the references to the prompt."""

from ..metric_spec import Capabilities, ConverterCommand, MetricSpec, OutputField, TinyModels

CITATION = """\
@inproceedings{lee2024fleur,
  title     = {{FLEUR: An Explainable Reference-Free Evaluation Metric for Image Captioning Using a Large
               Multimodal Model}},
  author    = {Lee, Yebin and Park, Imseong and Kang, Myungjoo},
  booktitle = {Proceedings of the 62nd Annual Meeting of the Association for Computational Linguistics (ACL)},
  year      = {2024}
}"""

FLEUR = MetricSpec(
    name="fleur",
    display_name="FLEUR",
    description="FLEUR: LLaVA-1.5 rates the caption from 0.0 to 1.0, smoothed over the digit tokens; RefFLEUR with "
    "the references in the prompt",
    capabilities=Capabilities(
        reference_free=True,
        reference_based=True,
        dtypes=("fp32", "fp16", "bf16"),
        score_options=("explain", "batch_size", "progress"),
        # no released variant either, so no selector entry: a 13B judge is not a demo-server model
        not_in_space="a LLaVA-1.5-13B judge needs a GPU with about 26 GB and seconds per caption; score with "
        "pacs-score --model DIR or the library (docs/guides/fleur.md)",
    ),
    outputs=(
        OutputField(
            "score",
            "scores",
            "FLEUR: the smoothed rating, NaN when the answer prints no number",
            label_from_config=0,
            mean_attribute="mean_score",
            minimum=0.0,
            maximum=1.0,
        ),
        OutputField(
            "ref_score",
            "ref_scores",
            "RefFLEUR: the same with the references in the prompt",
            label_from_config=1,
            mean_attribute="mean_ref_score",
            needs_references=True,
            minimum=0.0,
            maximum=1.0,
        ),
        OutputField(
            "failed_answers",
            "failed_answers",
            "answers of the item that gave no score (NaN)",
            label="failed_answers",
            minimum=0,
            higher_is_better=False,
            kind="count",
            summary="unparsable answers (NaN, left out of the means)",
        ),
    ),  # fmt: skip
    citation=CITATION,
    metrics=("fleur",),
    docs_page="spec/fleur.md",
    config_class="modeling_pacs.models.configuration_fleur:FleurConfig",
    model_class="modeling_pacs.models.modeling_fleur:FleurModel",
    loader="modeling_pacs.fleur.loading:load_fleur_model",
    converters=(
        ConverterCommand(
            "convert-fleur",
            help="convert a LLaVA-1.5 checkpoint into a FLEUR judge",
            description="Convert a LLaVA-1.5 checkpoint (the original repository's layout, or transformers') into "
            "a FLEUR directory.",
            example="pacs-pp convert-fleur --llava llava-v1.5-13b --output-dir fleur-13b",
            module="modeling_pacs.fleur.commands",
        ),
    ),
    tiny=TinyModels(builder="modeling_pacs.testing.fleur:make_tiny"),
    wraps_model_types=("llava",),
)

__all__ = ["CITATION", "FLEUR"]
