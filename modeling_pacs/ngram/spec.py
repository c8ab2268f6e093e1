"""BLEU, METEOR, ROUGE-L, CIDEr-D and SPICE in the registry: metrics without a model, scored by `pycocoevalcap`'s
`compute_score(gts, res)` on PTB-tokenised captions, as the COCO caption evaluation does (`evaluation/systems.py`)."""

from ..metric_spec import Capabilities, MetricSpec, OutputField

# Reference-based only, no image, no model: pycocoevalcap's scorers over the tokenised captions.
NGRAM_CAPABILITIES = Capabilities(media=(), reference_free=False, reference_based=True, needs_model=False)
JAVA_CAPABILITIES = Capabilities(
    media=(), reference_free=False, reference_based=True, needs_model=False, external=("java",)
)
DETAILCAPS = ("pearson", "one_minus_r2", "kendall_tau_b", "sample_kendall_tau_b")


def _detailcaps(name: str, *values: float) -> dict:
    # CAPTURE README (foundation-multimodal-models/CAPTURE@52eeb27, lines 45-57): the AVERAGE of DetailCaps-100 and
    # DetailCaps-4870 (the per-benchmark values are not public). PCC and the taus x100; 1-R^2 as printed (a ratio).
    return {"detailcaps": {name: dict(zip(DETAILCAPS, values))}}


def _column(name: str, description: str) -> OutputField:
    return OutputField(name, name, description, label=name, minimum=0.0)


COCO_CAPTION_CITATION = """\
@article{chen2015microsoft,
  title   = {{Microsoft COCO Captions: Data Collection and Evaluation Server}},
  author  = {Chen, Xinlei and Fang, Hao and Lin, Tsung-Yi and Vedantam, Ramakrishna and Gupta, Saurabh and
             Doll{\\'a}r, Piotr and Zitnick, C. Lawrence},
  journal = {arXiv preprint arXiv:1504.00325},
  year    = {2015}
}"""

BLEU = MetricSpec(
    name="bleu",
    display_name="BLEU",
    description="BLEU-1..4: clipped n-gram precision with a brevity penalty, over the corpus (Papineni et al., 2002)",
    capabilities=NGRAM_CAPABILITIES,
    outputs=tuple(_column(f"Bleu_{n}", f"BLEU-{n}") for n in range(1, 5)),
    citation=COCO_CAPTION_CITATION,
    metrics=("bleu",),
    docs_page="spec/benchmarks.md",
    scorer="pycocoevalcap.bleu.bleu:Bleu",
    scorer_columns=("Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4"),
    reported_numbers=_detailcaps("BLEU", 26.08, 54.75, 18.66, 24.62),
)
METEOR = MetricSpec(
    name="meteor",
    display_name="METEOR",
    description="METEOR 1.5: unigram matching with stems, synonyms and paraphrases (Denkowski and Lavie, 2014)",
    capabilities=JAVA_CAPABILITIES,
    outputs=(_column("METEOR", "METEOR"),),
    citation=COCO_CAPTION_CITATION,
    metrics=("meteor",),
    docs_page="spec/benchmarks.md",
    scorer="pycocoevalcap.meteor.meteor:Meteor",
    scorer_columns=("METEOR",),
    reported_numbers=_detailcaps("METEOR", 40.22, 290.38, 29.27, 40.62),
)
ROUGE_L = MetricSpec(
    name="rouge_l",
    display_name="ROUGE-L",
    description="ROUGE-L: the F-measure of the longest common subsequence (Lin, 2004)",
    capabilities=NGRAM_CAPABILITIES,
    outputs=(_column("ROUGE_L", "ROUGE-L"),),
    citation=COCO_CAPTION_CITATION,
    metrics=("rouge_l",),
    docs_page="spec/benchmarks.md",
    scorer="pycocoevalcap.rouge.rouge:Rouge",
    scorer_columns=("ROUGE_L",),
    reported_numbers=_detailcaps("ROUGE-L", 29.51, 134.12, 21.49, 33.83),
)
CIDER = MetricSpec(
    name="cider",
    display_name="CIDEr-D",
    description="CIDEr-D: TF-IDF weighted n-gram cosine with the corpus' document frequencies (Vedantam et al., 2015)",
    capabilities=NGRAM_CAPABILITIES,
    outputs=(_column("CIDEr", "CIDEr-D"),),
    citation=COCO_CAPTION_CITATION,
    metrics=("cider",),
    docs_page="spec/benchmarks.md",
    scorer="pycocoevalcap.cider.cider:Cider",
    scorer_columns=("CIDEr",),
    reported_numbers=_detailcaps("CIDEr", 11.48, 2.6e7, 11.65, 9.91),
)
SPICE = MetricSpec(
    name="spice",
    display_name="SPICE",
    description="SPICE: F-score over scene-graph tuples of candidate and references (Anderson et al., 2016)",
    capabilities=JAVA_CAPABILITIES,
    outputs=(_column("SPICE", "SPICE"),),
    citation=COCO_CAPTION_CITATION,
    metrics=("spice",),
    docs_page="spec/benchmarks.md",
    scorer="pycocoevalcap.spice.spice:Spice",
    scorer_columns=("SPICE",),
    reported_numbers=_detailcaps("SPICE", 43.86, 155.95, 32.44, 47.18),
)

NGRAM_METRICS = (BLEU, METEOR, ROUGE_L, CIDER, SPICE)

__all__ = ["BLEU", "CIDER", "METEOR", "NGRAM_METRICS", "ROUGE_L", "SPICE"]
