"""BLEU, METEOR, ROUGE-L, CIDEr-D and SPICE in the registry: metrics without a model, scored by `pycocoevalcap`'s
`compute_score(gts, res)` on PTB-tokenised captions, as the COCO caption evaluation does (`evaluation/systems.py`)."""

from ..metric_spec import Capabilities, MetricSpec, OutputField

DETAILCAPS = ("pearson", "one_minus_r2", "kendall_tau_b", "sample_kendall_tau_b")


def _ngram_spec(
    name: str,
    display_name: str,
    description: str,
    scorer: str,
    columns: dict[str, str],
    detailcaps: tuple[float, ...],
    java: bool = False,
) -> MetricSpec:
    """A metric without a model: its pycocoevalcap scorer, its columns (`{column: description}`, as pycocoevalcap
    names them) and its row of CAPTURE's DetailCaps table (the AVERAGE of DetailCaps-100 and DetailCaps-4870, from
    foundation-multimodal-models/CAPTURE@52eeb27 README lines 45-57: PCC and the taus x100, 1-R^2 as printed)."""
    return MetricSpec(
        name=name,
        display_name=display_name,
        description=description,
        capabilities=Capabilities(
            media=(), reference_free=False, reference_based=True, needs_model=False, external=("java",) if java else ()
        ),
        outputs=tuple(OutputField(column, column, meaning, label=column, minimum=0.0) for column, meaning in
                      columns.items()),
        citation=COCO_CAPTION_CITATION,
        metrics=(name,),
        docs_page="spec/benchmarks.md",
        scorer=scorer,
        scorer_columns=tuple(columns),
        reported_numbers={"detailcaps": {display_name.removesuffix("-D"): dict(zip(DETAILCAPS, detailcaps))}},
    )  # fmt: skip


COCO_CAPTION_CITATION = """\
@article{chen2015microsoft,
  title   = {{Microsoft COCO Captions: Data Collection and Evaluation Server}},
  author  = {Chen, Xinlei and Fang, Hao and Lin, Tsung-Yi and Vedantam, Ramakrishna and Gupta, Saurabh and
             Doll{\\'a}r, Piotr and Zitnick, C. Lawrence},
  journal = {arXiv preprint arXiv:1504.00325},
  year    = {2015}
}"""

BLEU = _ngram_spec(
    "bleu",
    "BLEU",
    "BLEU-1..4: clipped n-gram precision with a brevity penalty, over the corpus (Papineni et al., 2002)",
    "pycocoevalcap.bleu.bleu:Bleu",
    {f"Bleu_{n}": f"BLEU-{n}" for n in range(1, 5)},
    (26.08, 54.75, 18.66, 24.62),
)
METEOR = _ngram_spec(
    "meteor",
    "METEOR",
    "METEOR 1.5: unigram matching with stems, synonyms and paraphrases (Denkowski and Lavie, 2014)",
    "pycocoevalcap.meteor.meteor:Meteor",
    {"METEOR": "METEOR"},
    (40.22, 290.38, 29.27, 40.62),
    java=True,
)
ROUGE_L = _ngram_spec(
    "rouge_l",
    "ROUGE-L",
    "ROUGE-L: the F-measure of the longest common subsequence (Lin, 2004)",
    "pycocoevalcap.rouge.rouge:Rouge",
    {"ROUGE_L": "ROUGE-L"},
    (29.51, 134.12, 21.49, 33.83),
)
CIDER = _ngram_spec(
    "cider",
    "CIDEr-D",
    "CIDEr-D: TF-IDF weighted n-gram cosine with the corpus' document frequencies (Vedantam et al., 2015)",
    "pycocoevalcap.cider.cider:Cider",
    {"CIDEr": "CIDEr-D"},
    (11.48, 2.6e7, 11.65, 9.91),
)
SPICE = _ngram_spec(
    "spice",
    "SPICE",
    "SPICE: F-score over scene-graph tuples of candidate and references (Anderson et al., 2016)",
    "pycocoevalcap.spice.spice:Spice",
    {"SPICE": "SPICE"},
    (43.86, 155.95, 32.44, 47.18),
    java=True,
)

NGRAM_METRICS = (BLEU, METEOR, ROUGE_L, CIDER, SPICE)

__all__ = ["BLEU", "CIDER", "METEOR", "NGRAM_METRICS", "ROUGE_L", "SPICE"]
