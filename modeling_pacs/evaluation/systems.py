"""System-level evaluation: several captioners' outputs on one image set, one row per system (PAC-S++ Table 6
layout): each model's mean reference-free and reference-based score, the grammar measures, and the COCO caption
metrics when `pycocoevalcap` is installed (METEOR and SPICE also need Java)."""

import logging
from pathlib import Path

from ..caption_files import attach_references, read_items
from ..captioning.grammar import grammar_measures
from ..extras import MissingExtraError, require
from ..loading import score_options
from ..metric_spec import resolve
from ..registry import METRICS, PAPER_NAMES
from ..results import result_columns, score_columns
from .benchmark import parse_named

logger = logging.getLogger("pacs_pp.benchmarks")

COCO_METRICS = ("Bleu_4", "METEOR", "ROUGE_L", "CIDEr", "SPICE")
# a column as pycocoevalcap names it -> the registry's metric without a model that computes it
NGRAM_COLUMNS = {column: spec for spec in METRICS.values() if spec.scorer for column in spec.scorer_columns}


def coco_caption_metrics(
    items: list[dict], metrics: tuple[str, ...] = COCO_METRICS
) -> tuple[dict[str, float], list[str]]:
    """BLEU-4, METEOR, ROUGE-L, CIDEr, SPICE (x100; the ones named in `metrics`) over the system's captions, and notes
    for whatever could not run."""
    try:
        require("pycocoevalcap", "captioning", "Computing BLEU-4/METEOR/ROUGE-L/CIDEr/SPICE")
        from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer
    except MissingExtraError as error:
        return {}, [f"{error} (and Java for METEOR/SPICE); those columns are absent"]
    try:  # the COCO evaluation's own tokenisation (Stanford PTB tokenizer, Java)
        tokenizer = PTBTokenizer()
        references = tokenizer.tokenize(
            {i: [{"caption": r} for r in item["references"]] for i, item in enumerate(items)}
        )
        candidates = tokenizer.tokenize({i: [{"caption": item["caption"]}] for i, item in enumerate(items)})
    except Exception as error:  # no Java, or it failed: the columns are left out, never a crash
        return {}, [f"BLEU-4/METEOR/ROUGE-L/CIDEr/SPICE columns absent: PTB tokenizer failed ({error})"]
    measures, notes = {}, []
    for name in metrics:
        try:
            spec = NGRAM_COLUMNS[name]
            value, _ = resolve(spec.scorer)().compute_score(references, candidates)
        except Exception as error:  # METEOR/SPICE start a Java process: any failure drops that column only
            notes.append(f"{name} column absent: {type(error).__name__}: {error}")
            continue
        # BLEU's scorer returns BLEU-1..4 at once, in the order of its columns
        measures[name] = 100 * float(value[spec.scorer_columns.index(name)] if isinstance(value, list) else value)
    return measures, notes


def evaluate_systems(config, models: dict) -> dict:
    """One row per `SYSTEM=FILE` of `config.captions` (files as `pacs-score` reads them)."""
    rows, notes = [], []
    for system, path in (parse_named(value, "--captions") for value in config.captions):
        if not path.is_file():
            raise FileNotFoundError(f"--captions {system}: {path} not found")
        image_root = config.image_root or path.parent
        items = read_items(path, Path(image_root))
        if config.references:
            attach_references(items, config.references, Path(image_root))
        has_references = all(item.get("references") for item in items)
        measures = {}
        for name, model in models.items():
            output = model.score(
                [item["image_path"] for item in items],
                [item["caption"] for item in items],
                [item["references"] for item in items] if has_references else None,
                **score_options(
                    model,
                    scoring_mode=config.scoring_mode,
                    image_batch_size=config.image_batch_size,
                    text_batch_size=config.text_batch_size,
                    progress=config.progress,
                ),
            )
            label = PAPER_NAMES.get(name, name)
            for column in score_columns(result_columns(model, output)):
                measures[label if column.key == "score" else f"Ref{label}"] = column.mean
        grammar = grammar_measures([item["caption"] for item in items])
        measures.update({f"Rep-{n}": grammar[f"rep_{n}"] for n in range(1, 5)})
        measures["%Incorrect"] = grammar["incorrect_percent"]
        if has_references:
            coco, coco_notes = coco_caption_metrics(items, tuple(config.coco_metrics))
            measures.update(coco)
            notes += [note for note in coco_notes if note not in notes]
        else:
            notes.append(f"{system}: no references, so no Ref* or COCO caption metric columns")
        rows.append({"system": system, "file": str(path), "num_captions": len(items), "measures": measures})
    return {"rows": rows, "notes": notes}
