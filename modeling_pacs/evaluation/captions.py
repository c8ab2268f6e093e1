"""Every metric a captioning paper reports, from one list of captions, in one call: `evaluate_captions`.

The n-gram metrics (BLEU-1..4, METEOR, ROUGE-L, CIDEr-D, SPICE) are pycocoevalcap's own scorers on captions tokenised
by its PTB tokenizer, so their numbers are the COCO caption evaluation's; the model metrics (PAC-S++, CLIP-S, Polos,
Pearl, ...) are loaded once each and read every image decoded once. Each metric gets a reproducibility signature
(`modeling_pacs/signatures.py`).

Policies (nothing is dropped silently: `CaptionEvaluation.skipped` and the table's footer count every skipped row):

| input | what happens |
| --- | --- |
| an unknown `metrics` entry | `UnknownModelError` listing the known names |
| a metric that needs references, none given | `InputError` naming the metric |
| some items with references, some without | `InputError` naming the first item without |
| an empty caption | `InputError` naming the rows; `skip=("empty_captions",)` drops them (counted) |
| a missing image (model metrics only) | `InputError` naming the rows; `skip=("missing_images",)` drops them (counted) |
| several items for one `image_id` | `InputError` naming the ids (pycocoevalcap scores one caption per image) |
| the same, `duplicates="separate"` | each row its own item; CIDEr's document frequencies count the image per row |
| no Java (`java -version` fails) | the n-gram metrics (PTB tokenizer, METEOR, SPICE: Java) skipped, one logged line |
| a pycocoevalcap step fails (Java exits, its folder is read-only) | `ExternalMetricError` naming the step |
| SPICE's CoreNLP jars missing | `MissingExtraError` naming the files, where they go and how to leave SPICE out |

Example:

```python
>>> from modeling_pacs.evaluation.captions import evaluate_captions
>>> items = [{"image_id": 1, "image": "examples/images/red_circle.png", "caption": "a red circle",
...           "references": ["a red disc", "a circle"]}]
>>> result = evaluate_captions(items, metrics=["rouge_l", "tiny:clip_s"])  # doctest: +SKIP
>>> sorted(result.corpus)  # doctest: +SKIP
['ROUGE_L', 'tiny:clip_s/ref_score', 'tiny:clip_s/score']
```
"""

import contextlib
import io
import logging
import math
import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError, MissingExtraError, PacsError, UnknownModelError
from ..metric_spec import MetricSpec, OutputField, resolve
from ..registry import METRICS, RELEASES, model_choices, parse_tiny_alias, spec_for_model_type

logger = logging.getLogger("pacs_pp")

# The default set: what a captioning paper reports (pycocoevalcap's five), CLIP-S and PAC-S++ (ViT-B/32).
DEFAULT_METRICS = ("bleu", "meteor", "rouge_l", "cider", "spice", "clip_s_vit_b32", "pac_s_pp_vit_b32")
NGRAM_METRICS = {name: spec for name, spec in METRICS.items() if spec.scorer}
SKIP_POLICIES = ("empty_captions", "missing_images")
DUPLICATE_POLICIES = ("error", "separate")
# Items decoded and scored together: each image is decoded once per chunk, and only a chunk's images are in memory.
CHUNK_SIZE = 256
# SPICE's parser: pycocoevalcap downloads these on first use (`spice/get_stanford_models.py`).
CORENLP_ZIP = "http://nlp.stanford.edu/software/stanford-corenlp-full-2015-12-09.zip"
CORENLP_JARS = ("stanford-corenlp-3.6.0.jar", "stanford-corenlp-3.6.0-models.jar")


@dataclass
class CaptionEvaluation:
    """What `evaluate_captions` returns.

    `corpus` maps each column to its corpus score, as each metric's protocol defines it (pycocoevalcap's scorers'
    own corpus scores: CIDEr-D with the corpus' document frequencies, BLEU from the corpus' n-gram counts; the mean of
    the per-item scores for the model metrics). Columns are named as pycocoevalcap names them (`Bleu_1`..`Bleu_4`,
    `METEOR`, `ROUGE_L`, `CIDEr`, `SPICE`) and, for model metrics, `<entry>/<output key>` (`tiny:clip_s/score`).
    `items` holds one dict per scored item, in input order: `image_id`, `caption` and the per-item columns.
    `signatures` maps each metrics entry to its reproducibility signature; `labels` each column to its heading
    (`Bleu_4`, `CLIP-S`, `RefPAC-S++`); `skipped` each reason to the skipped rows' indices in the input; `notes` says
    what did not run.
    """

    corpus: dict[str, float]
    items: list[dict]
    signatures: dict[str, str]
    labels: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, list[int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def table(self) -> str:
        """The corpus scores as a markdown table, one row per column (pycocoevalcap prints `Bleu_1: 0.712`)."""
        lines = ["| column | metric | score |", "| --- | --- | ---: |"]
        lines += [f"| {column} | {self.labels.get(column, column)} | {value:.4f} |" for column, value in
                  self.corpus.items()]  # fmt: skip
        return "\n".join(lines)

    def footer(self) -> str:
        """How many items were scored and, by reason, how many rows were skipped; then the notes."""
        skipped = sum(len(rows) for rows in self.skipped.values())
        reasons = ", ".join(f"{len(rows)} {reason.replace('_', ' ')}" for reason, rows in self.skipped.items() if rows)
        lines = [f"{len(self.items)} items scored, {skipped} rows skipped" + (f" ({reasons})" if reasons else "")]
        return "\n".join([*lines, *self.notes])

    def report(self) -> str:
        """The table, the signatures below it, and the footer: what `pacs-pp evaluate-captions` prints."""
        signatures = [f"- {entry}: `{text}`" for entry, text in self.signatures.items()]
        return "\n".join([self.table(), "", "signatures:", *signatures, "", self.footer()])

    def to_json(self) -> dict:
        """What `--output x.json` holds: corpus, items, signatures, the columns' headings, skipped rows, notes."""
        return {"corpus": self.corpus, "items": self.items, "signatures": self.signatures, "labels": self.labels,
                "skipped": self.skipped, "notes": self.notes}  # fmt: skip


# ---------------------------------------------------------------------------------------------------- metrics
@dataclass(frozen=True)
class MetricEntry:
    """One entry of `metrics`: an n-gram metric (`spec.scorer`) or a model metric (its spec, when known before
    loading: None for a Hub id whose config cannot be read offline)."""

    name: str
    spec: MetricSpec | None

    @property
    def is_ngram(self) -> bool:
        return self.spec is not None and self.spec.scorer is not None


def known_entries() -> list[str]:
    """The names `metrics` accepts besides Hub ids and directories: n-gram metrics, aliases, tiny aliases."""
    return [*NGRAM_METRICS, *model_choices()]


def parse_metrics(metrics: Iterable[str]) -> list[MetricEntry]:
    """Check every entry up front: an unknown one (not an n-gram metric, alias, tiny alias, directory or Hub id) is an
    `UnknownModelError` listing the known names; an entry given twice is refused."""
    import difflib

    entries, seen = [], set()
    for name in [metrics] if isinstance(metrics, str) else list(metrics):
        if not isinstance(name, str) or not name.strip():
            raise InputError(f"metrics entries are names, got {name!r}")
        name = name.strip()
        if name in seen:
            raise InputError(f"metric {name!r} is listed twice: list each metric once")
        seen.add(name)
        if name in NGRAM_METRICS:
            entries.append(MetricEntry(name, NGRAM_METRICS[name]))
        elif name in RELEASES:
            entries.append(MetricEntry(name, RELEASES[name][0]))
        elif (tiny := parse_tiny_alias(name)) is not None:  # raises for a tiny alias of an unknown variant
            from ..registry import TINY_SPECS

            entries.append(MetricEntry(name, TINY_SPECS[tiny[1]]))
        elif os.path.isdir(os.path.expanduser(name)) or looks_like_hub_id(name):
            from ..pacs.loading import plain_model_type

            entries.append(MetricEntry(name, spec_for_model_type(plain_model_type(os.path.expanduser(name)))))
        else:
            close = difflib.get_close_matches(name, known_entries(), n=1, cutoff=0.5)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise UnknownModelError(
                f"unknown metric {name!r}{hint}: a metrics entry is an n-gram metric ({', '.join(NGRAM_METRICS)}), "
                f"a model alias ({', '.join(RELEASES)}), a tiny model ({', '.join(model_choices()[len(RELEASES) :])}), "
                "a Hub id (owner/name) or a model directory"
            )
    if not entries:
        raise InputError("no metrics: name at least one (e.g. " + ",".join(DEFAULT_METRICS) + ")")
    return entries


def looks_like_hub_id(name: str) -> bool:
    """`owner/name`: one slash, no spaces, not a path that exists (a missing local path is not a Hub id)."""
    owner, slash, repository = name.partition("/")
    return bool(slash and owner and repository and "/" not in repository and " " not in name
                and not name.startswith((".", "~")))  # fmt: skip


# ---------------------------------------------------------------------------------------------------- inputs
def check_items(items: Sequence[dict], duplicates: str, skip: Sequence[str], needs_images: bool) -> tuple[list, dict]:
    """The items to score (copies, in input order, each with its input `row`) and the skipped rows by reason."""
    if duplicates not in DUPLICATE_POLICIES:
        raise InputError(f"duplicates must be one of {list(DUPLICATE_POLICIES)}, got {duplicates!r}")
    unknown = sorted(set(skip) - set(SKIP_POLICIES))
    if unknown:
        raise InputError(f"skip takes {list(SKIP_POLICIES)}, got {unknown}")
    if isinstance(items, (str, dict)) or not len(items):
        raise InputError("items must be a non-empty list of dicts with image_id, image, caption and references")
    kept, skipped = [], {reason: [] for reason in SKIP_POLICIES}
    empty, missing = [], []
    for row, item in enumerate(items):
        if not isinstance(item, dict):
            raise InputError(f"item {row} is {type(item).__name__}, expected a dict with image_id, image, caption")
        absent = [key for key in ("image_id", "caption") if key not in item]
        if absent:
            raise InputError(f"item {row} lacks {absent} (each item needs image_id, caption, image and references)")
        if not isinstance(item["caption"], str):
            raise InputError(
                f"item {row} (image_id {item['image_id']!r}): the caption is {item['caption']!r}, not text"
            )
        item = {**item, "row": row}
        if not item["caption"].strip():
            empty.append(item)
            continue
        if needs_images and image_is_missing(item.get("image")):
            missing.append(item)
            continue
        kept.append(item)
    for reason, rows, what in (("empty_captions", empty, "an empty caption"),
                               ("missing_images", missing, "an image that does not exist")):  # fmt: skip
        if rows and reason not in skip:
            listed = ", ".join(f"{item['row']} (image_id {item['image_id']!r})" for item in rows[:5])
            more = f" and {len(rows) - 5} more" if len(rows) > 5 else ""
            raise InputError(
                f"{len(rows)} items have {what}: rows {listed}{more}; fix them, or skip them (counted in the footer) "
                f"with skip={reason!r} (command line: --skip {reason.replace('_', '-')})"
            )
        skipped[reason] = [item["row"] for item in rows]
    if not kept:
        raise InputError("every item was skipped: nothing to score")
    if duplicates == "error":
        counts: dict = {}
        for item in kept:
            counts[item["image_id"]] = counts.get(item["image_id"], 0) + 1
        repeated = [image_id for image_id, count in counts.items() if count > 1]
        if repeated:
            raise InputError(
                f"{len(repeated)} image ids have several captions ({', '.join(map(repr, repeated[:5]))}"
                f"{' ...' if len(repeated) > 5 else ''}): the COCO caption evaluation scores one caption per image. "
                "Keep one per image, or score each row as its own item with duplicates='separate' (command line: "
                "--duplicates separate)"
            )
    return kept, skipped


def image_is_missing(image: Any) -> bool:
    """Whether an image input is a path (or a datasets.Image dict with only a path) naming no file."""
    if isinstance(image, dict) and image.get("bytes") is None:
        image = image.get("path")
    if image is None:
        return True
    return isinstance(image, (str, os.PathLike)) and not Path(os.path.expanduser(os.fspath(image))).is_file()


def refuse_missing_references(items: Sequence, entries: list[MetricEntry]) -> None:
    """An `InputError` naming the metrics that need references when no item has any."""
    if any(isinstance(item, dict) and item.get("references") for item in items):
        return
    needing = [entry.name for entry in entries if entry.spec is not None and entry.spec.capabilities.needs_references]
    if needing:
        raise InputError(
            f"{', '.join(needing)} need references, and none were given: give each item its references (COCO "
            "annotations, a references column or file), or leave those metrics out"
        )


def item_references(items: list[dict], entries: list[MetricEntry]) -> list[list[str]] | None:
    """One reference list per item, or None when no item has references; a mix, or a metric that needs references
    without them, is an `InputError` naming it."""
    given = [bool(item.get("references")) for item in items]
    if any(given) and not all(given):
        first = items[given.index(False)]
        raise InputError(
            f"item {first['row']} (image_id {first['image_id']!r}) has no references while others do: give every "
            "item references, or none"
        )
    if not any(given):
        refuse_missing_references(items, entries)
        return None
    references = []
    for item in items:
        refs = [item["references"]] if isinstance(item["references"], str) else list(item["references"])
        if not all(isinstance(reference, str) for reference in refs):
            raise InputError(f"item {item['row']}: references must be strings, got {refs!r}")
        references.append(refs)
    return references


# ---------------------------------------------------------------------------------------------------- n-gram metrics
def java_available() -> bool:
    """Whether `java -version` runs (a `java` on PATH that cannot start counts as none)."""
    java = shutil.which("java")
    if java is None:
        return False
    try:
        return subprocess.run([java, "-version"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def check_spice_models() -> None:
    """SPICE's Stanford CoreNLP jars, which pycocoevalcap would download on first use (and hang or fail offline):
    a `MissingExtraError` naming the missing files, where they go and how to leave SPICE out."""
    import pycocoevalcap.spice

    folder = Path(pycocoevalcap.spice.__file__).parent / "lib"
    missing = [jar for jar in CORENLP_JARS if not (folder / jar).is_file()]
    if missing:
        raise MissingExtraError(
            f"SPICE needs Stanford CoreNLP 3.6.0, and {' and '.join(missing)} are missing from {folder}: extract them "
            f"from {CORENLP_ZIP} (folder stanford-corenlp-full-2015-12-09/) into {folder}, or run `python -m "
            "pycocoevalcap.spice.get_stanford_models` once online; or leave SPICE out (--metrics without spice)"
        )


class ExternalMetricError(PacsError):
    """A pycocoevalcap step failed (its Java program, or a file it writes beside its code); the message names the
    step and the metrics to leave out."""


@contextlib.contextmanager
def external_program(step: str, metrics: str):
    """Turn the failure of a pycocoevalcap step (Java exiting, a read of its empty output, a file it cannot write in
    its own folder) into one `ExternalMetricError` naming it, instead of a traceback from inside pycocoevalcap."""
    try:
        yield
    except (OSError, ValueError, AssertionError, subprocess.SubprocessError) as error:
        raise ExternalMetricError(
            f"{step} failed ({type(error).__name__}: {error}): check that `java -version` runs and that "
            f"pycocoevalcap's folder is writable, or leave {metrics} out of the metrics"
        ) from error


def tokenize(items: list[dict], references: list[list[str]]) -> tuple[dict, dict]:
    """The references and candidates, PTB-tokenised as the COCO caption evaluation does (lower case, punctuation
    removed), keyed by item position; one Java run for both (the tokenizer reads each line on its own)."""
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    captions = {("references", index): [{"caption": ref} for ref in refs] for index, refs in enumerate(references)}
    captions |= {("candidate", index): [{"caption": item["caption"]}] for index, item in enumerate(items)}
    with external_program("the PTB tokenizer (pycocoevalcap)", "the n-gram metrics"):
        tokenized = PTBTokenizer().tokenize(captions)
    wrong = [key for key, value in captions.items() if len(tokenized.get(key, ())) != len(value)]
    if wrong:  # a line break character the tokenizer reads as a new line would shift every later caption
        kind, index = wrong[0]
        raise InputError(
            f"the PTB tokenizer (Java) returned {sum(map(len, tokenized.values()))} lines for "
            f"{sum(map(len, captions.values()))} captions, from item {items[index]['row']}'s {kind} on (a line or "
            "paragraph separator in the text?): replace such characters with spaces"
        )
    gts = {index: tokenized[("references", index)] for index in range(len(items))}
    res = {index: tokenized[("candidate", index)] for index in range(len(items))}
    return gts, res


def score_ngrams(entries: list[MetricEntry], gts: dict, res: dict, progress: bool | None) -> tuple[dict, dict]:
    """Each n-gram metric's corpus and per-item scores, by pycocoevalcap's scorers (`compute_score(gts, res)`)."""
    from tqdm.auto import tqdm

    corpus, per_item = {}, {}
    for entry in entries:
        spec = entry.spec
        with tqdm(
            total=len(res), desc=entry.name, unit="caption", disable=None if progress is None else not progress
        ) as bar:
            # BLEU prints its counts, and stdout is the table's
            with contextlib.redirect_stdout(io.StringIO()), external_program(spec.scorer, entry.name):
                scorer = resolve(spec.scorer)()
                score, scores = scorer.compute_score(gts, res)
            bar.update(len(res))
        if len(spec.scorer_columns) == 1:
            score, scores = [score], [scores]
        for column, value, values in zip(spec.scorer_columns, score, scores, strict=True):
            corpus[column] = float(value)
            per_item[column] = [item_score(value) for value in values]
    return corpus, per_item


def item_score(value: Any) -> float:
    """A scorer's per-item score as a float (SPICE gives a dict of categories: its `All` F-score)."""
    if isinstance(value, dict):
        value = value["All"]["f"]
    return float(value)


# ---------------------------------------------------------------------------------------------------- model metrics
def answered_mean(values: list[float]) -> float:
    """The mean of a model metric's per-item scores over the items that have one (a judge's unparsable answer is
    NaN, counted in the footer); NaN when none has."""
    present = [value for value in values if not math.isnan(value)]
    return math.fsum(present) / len(present) if present else math.nan


def decode_images(images: list) -> list:
    """Each image decoded once: paths, bytes and datasets.Image dicts become loaded PIL images (in their file's mode,
    so each model converts them exactly as it converts a path); the same path or bytes gives the same object, which
    the models then encode once. In-memory images (PIL, arrays, tensors) are passed on as they are."""
    import PIL.Image

    from ..models.inputs import image_key, image_source

    decoded, by_key = [], {}
    for position, image in enumerate(images):
        key = image_key(image)
        if key not in by_key:
            source = image_source(image, f"image {position}")
            if isinstance(source, (str, os.PathLike, bytes, bytearray, memoryview)):
                opened = source if isinstance(source, (str, os.PathLike)) else io.BytesIO(bytes(source))
                try:
                    source = PIL.Image.open(opened)
                    source.load()
                except (OSError, ValueError, PIL.Image.DecompressionBombError):
                    source = image  # the model's own decoder names the item and the problem
            by_key[key] = source
        decoded.append(by_key[key])
    return decoded


def score_models(
    entries: list[MetricEntry],
    items: list[dict],
    references: list[list[str]] | None,
    *,
    device: str | None,
    dtype: str | None,
    batch_size: int,
    long_captions: str,
    progress: bool | None,
    chunk_size: int,
) -> tuple[dict, dict, dict, dict]:
    """Per-item columns, labels and signatures of the model metrics: each model loaded once, each chunk of items'
    images decoded once and read by every model."""
    from tqdm.auto import tqdm

    from ..loading import load_model, score_options
    from ..results import result_columns
    from ..signatures import model_signature

    models = {entry.name: load_model(entry.name, device=device, dtype=dtype) for entry in entries}
    options = {
        name: score_options(model, long_captions, image_batch_size=batch_size, text_batch_size=4 * batch_size,
                            progress=False)
        for name, model in models.items()
    }  # fmt: skip
    per_item: dict[str, list] = {}
    labels: dict[str, str] = {}
    fields: dict[str, OutputField] = {}
    disable = None if progress is None else not progress
    bars = {name: tqdm(total=len(items), desc=name, unit="caption", disable=disable, position=position)
            for position, name in enumerate(models)}  # fmt: skip
    try:
        for start in range(0, len(items), chunk_size):
            chunk = items[start : start + chunk_size]
            images = decode_images([item["image"] for item in chunk])
            captions = [item["caption"] for item in chunk]
            chunk_references = None if references is None else references[start : start + chunk_size]
            for name, model in models.items():
                output = model.score(images, captions, references=chunk_references, **options[name])
                for column in result_columns(model, output):
                    key = f"{name}/{column.key}"
                    per_item.setdefault(key, []).extend(column.values)
                    labels[key] = column.label
                    fields[key] = column.field
                bars[name].update(len(chunk))
    finally:
        for bar in bars.values():
            bar.close()
    signatures = {
        name: model_signature(model, name, references, long_captions=long_captions, dtype=dtype)
        for name, model in models.items()
    }
    return per_item, labels, fields, signatures


# ---------------------------------------------------------------------------------------------------- the call
def evaluate_captions(
    items: Sequence[dict],
    metrics: Iterable[str] = DEFAULT_METRICS,
    *,
    device: str | None = None,
    dtype: str | None = None,
    batch_size: int = 64,
    long_captions: str = "truncate",
    duplicates: str = "error",
    skip: Sequence[str] = (),
    progress: bool | None = None,
    chunk_size: int = CHUNK_SIZE,
) -> CaptionEvaluation:
    """Score `items` with every metric of `metrics`, each image decoded once and each model loaded once.

    Args:
        items: dicts with `image_id`, `image` (a path, bytes, a PIL image, an array or a datasets.Image dict; only
            read by model metrics), `caption` and `references` (a list of strings; needed by the n-gram metrics and
            reference-based models).
        metrics: n-gram metrics (`bleu`, `meteor`, `rouge_l`, `cider`, `spice`) and anything `load_model` accepts
            (an alias such as `pac_s_pp_vit_b32`, a tiny alias such as `tiny:clip_s`, a Hub id, a directory).
        device: as `load_model` takes it (`"cpu"`, `"cuda"`, `"auto"`; None: CUDA when present).
        dtype: None or `"fp32"` for the reference numbers, `"fp16"` / `"bf16"` where a model allows them.
        batch_size: images per encoder batch (4x as many texts), as `pacs-score --batch-size`.
        long_captions: `"truncate"` (the official code) or `"chunks"`
            ([docs/guides/long-captions.md](../guides/long-captions.md)).
        duplicates: `"error"` (several items for one image id are refused) or `"separate"` (each row its own item).
        skip: `"empty_captions"`, `"missing_images"`: skip such rows (counted) instead of refusing them.
        progress: a bar per metric with an ETA (None: when stderr is a terminal; False: none).
        chunk_size: items decoded and scored together (bounds the decoded images held in memory).

    Returns:
        A `CaptionEvaluation` (`corpus`, `items`, `signatures`, `table()`, ...).
    """
    from ..signatures import ngram_signature

    entries = parse_metrics(metrics)
    models = [entry for entry in entries if not entry.is_ngram]
    ngrams = [entry for entry in entries if entry.is_ngram]
    refuse_missing_references(items, entries)  # before any row is checked: no row can fix it
    kept, skipped = check_items(items, duplicates, skip, needs_images=bool(models))
    references = item_references(kept, entries)
    notes = []
    if ngrams:
        from ..extras import require

        require("pycocoevalcap", "captioning", "The n-gram metrics (BLEU, METEOR, ROUGE-L, CIDEr, SPICE)")
        if not java_available():
            note = (
                f"warning: no working Java (`java -version`), so {', '.join(entry.name for entry in ngrams)} were "
                "skipped (the PTB tokenizer, METEOR and SPICE run on Java): install a Java runtime (Debian: "
                "apt-get install default-jre-headless)"
            )
            logger.warning(note.removeprefix("warning: "))
            notes.append(note)
            ngrams = []
        elif any(entry.name == "spice" for entry in ngrams):
            check_spice_models()
    columns: dict[str, list] = {}
    labels: dict[str, str] = {}
    corpus: dict[str, float] = {}
    signatures: dict[str, str] = {}
    if ngrams:
        gts, res = tokenize(kept, references)
        ngram_corpus, ngram_items = score_ngrams(ngrams, gts, res, progress)
        corpus |= ngram_corpus
        columns |= ngram_items
        labels |= {column: column for column in ngram_corpus}
        signatures |= {entry.name: ngram_signature(entry.spec, references) for entry in ngrams}
    if models:
        model_items, model_labels, fields, model_signatures = score_models(
            models, kept, references, device=device, dtype=dtype, batch_size=batch_size,
            long_captions=long_captions, progress=progress, chunk_size=chunk_size,
        )  # fmt: skip
        columns |= model_items
        labels |= model_labels
        corpus |= {key: answered_mean(values) for key, values in model_items.items() if fields[key].kind == "score"}
        notes += [f"{key}: {fields[key].summary}: {sum(values)}" for key, values in model_items.items()
                  if fields[key].summary]  # fmt: skip
        signatures |= model_signatures
    # columns and signatures in the order of `metrics`
    order = [
        column
        for entry in entries
        for column in columns
        if column in (entry.spec.scorer_columns if entry.is_ngram else ()) or column.startswith(f"{entry.name}/")
    ]
    columns = {column: columns[column] for column in order}
    corpus = {column: corpus[column] for column in order if column in corpus}
    signatures = {entry.name: signatures[entry.name] for entry in entries if entry.name in signatures}
    rows = [
        {"image_id": item["image_id"], "caption": item["caption"], **{key: values[position] for key, values in
                                                                        columns.items()}}
        for position, item in enumerate(kept)
    ]  # fmt: skip
    return CaptionEvaluation(corpus, rows, signatures, labels, skipped, notes)


__all__ = ["CaptionEvaluation", "DEFAULT_METRICS", "evaluate_captions", "known_entries", "parse_metrics"]
