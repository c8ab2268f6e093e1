"""Pearl in the registry: the reference-flexible supervised metric of Hirano et al. (arXiv 2512.21582), its
converters, tiny model and reported numbers (docs/spec/pearl.md). No trained Pearl weights are released: a model
comes from `pacs-pp convert-pearl` or from training here."""

from ..metric_spec import Capabilities, ConverterCommand, MetricSpec, OutputField, TinyModels

# The converter's defaults and choices (`pacs-pp convert-pearl`), here so that its --help reads them without torch.
NUM_HEADS = 8  # nn.TransformerEncoderLayer(nhead=8) and MultiheadAttention(num_heads=8): no trace in the shapes
ENCODER_NAMES = ("clip", "beit3", "blip2", "stella")

CITATION = """\
@article{hirano2025pearl,
  title   = {{LLM-Free Image Captioning Evaluation in Reference-Flexible Settings}},
  author  = {Hirano, Shinnosuke and Wada, Yuiga and Matsuda, Kazuki and Otsuki, Seitaro and Sugiura, Komei},
  journal = {arXiv preprint arXiv:2512.21582},
  year    = {2025}
}"""

PEARL = MetricSpec(
    name="pearl",
    display_name="Pearl",
    description=(
        "Pearl: a supervised head over frozen CLIP, BEiT-3, BLIP-2 and Stella features; Pearl-img without "
        "references, Pearl (Eq. 3) with them"
    ),
    capabilities=Capabilities(
        reference_free=True,
        reference_based=True,
        max_references=5,  # `PearlConfig.max_refs`: the first ones are kept, with a warning
        dtypes=("fp32",),
    ),
    outputs=(
        OutputField(
            "score",
            "scores",
            "Pearl-img: the image head's score, without references",
            label_from_config=0,
            mean_attribute="mean_score",
        ),
        OutputField(
            "ref_score",
            "ref_scores",
            "Pearl (Eq. 3): the image and reference heads fused",
            label_from_config=1,
            mean_attribute="mean_ref_score",
            needs_references=True,
        ),
        OutputField.truncation("the most caption tokens any encoder did not read"),
    ),  # fmt: skip
    citation=CITATION,
    metrics=("pearl",),
    docs_page="spec/pearl.md",
    config_class="modeling_pacs.models.configuration_pearl:PearlConfig",
    model_class="modeling_pacs.models.modeling_pearl:PearlModel",
    loader="modeling_pacs.pearl.scorer:load_pearl_scorer",
    converters=(
        ConverterCommand(
            "convert-beit3",
            help="convert unilm's BEiT-3 retrieval checkpoint for Pearl",
            description="Convert unilm's BEiT-3 base retrieval checkpoint into a transformers directory for Pearl's "
            "BEiT-3 encoder.",
            example="pacs-pp convert-beit3 --checkpoint beit3_base_itc.pth --sentencepiece beit3.spm "
            "--output-dir beit3",
            module="modeling_pacs.pearl.commands",
            add_arguments="add_beit3_arguments",
            convert="convert_beit3",
            epilog="BEIT3_EPILOG",
        ),
        ConverterCommand(
            "convert-pearl",
            help="convert a checkpoint written by Pearl's training code",
            description="Convert a Pearl checkpoint written by Pearl's training code into a PearlModel directory.",
            example='pacs-pp convert-pearl --checkpoint "run/epoch=3-step=1234.ckpt" --output-dir pearl',
            module="modeling_pacs.pearl.commands",
        ),
    ),
    tiny=TinyModels(builder="modeling_pacs.testing.pearl:make_tiny"),
    reported_numbers={
        "flickr8k_expert": {"Pearl": {"kendall_tau_b": 58.2, "kendall_tau_c": 58.6}},
        "flickr8k_cf": {"Pearl": {"kendall_tau_b": 38.6, "kendall_tau_c": 20.0}},
        "composite": {"Pearl": {"kendall_tau_b": 55.8, "kendall_tau_c": 60.4}},
        "foil": {"Pearl": {"accuracy_1ref": 96.5, "accuracy_4ref": 97.2}},
    },
)

__all__ = ["CITATION", "PEARL"]
