"""Every metric a captioning paper reports, from one list of captions, in one call: `evaluate_captions`.

The n-gram metrics (BLEU-1..4, METEOR, ROUGE-L, CIDEr-D, SPICE) are pycocoevalcap's own scorers on captions tokenised
by its PTB tokenizer, so their numbers are the COCO caption evaluation's; the model metrics (PAC-S++, CLIP-S, Polos,
Pearl, ...) are loaded once each and read every image decoded once; models with one image encoder (CLIP-S and PAC-S
of one backbone) encode each image once between them. Each metric gets a reproducibility signature
(`modeling_pacs/signatures.py`). With `output_dir`, the model metrics run on the job engine (`modeling_pacs/jobs.py`):
sharded across `torchrun` processes, resumable after a kill, each item merged exactly once; the n-gram metrics,
corpus-level, run once on the main process, their scores kept in the job folder for a resumed run.

Policies (nothing is dropped silently: `CaptionEvaluation.skipped` and the table's footer count every skipped row):

| input | what happens |
| --- | --- |
| an unknown `metrics` entry | `UnknownModelError` listing the known names |
| a metric that needs references, none given | `InputError` naming the metric |
| some items with references, some without | those get empty reference-based and n-gram cells (counted) |
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

from ..errors import InputError, MissingExtraError, PacsError, UnknownModelError, name_item, with_message
from ..metric_spec import MetricSpec, OutputField, resolve
from ..registry import METRICS, RELEASES, model_choices, parse_tiny_alias, spec_for_model_type
from ..results import references_note

logger = logging.getLogger("pacs_pp")

# The default set: what a captioning paper reports (pycocoevalcap's five), CLIP-S and PAC-S++ (ViT-B/32).
DEFAULT_METRICS = ("bleu", "meteor", "rouge_l", "cider", "spice", "clip_s_vit_b32", "pac_s_pp_vit_b32")
NGRAM_METRICS = {name: spec for name, spec in METRICS.items() if spec.scorer}
SKIP_POLICIES = ("empty_captions", "missing_images")
DUPLICATE_POLICIES = ("error", "separate")
# Items decoded and scored together: each image is decoded once, and only a chunk's images are in memory (64 COCO
# images of 640x480 are 60 MiB decoded; 256 held 450 MiB more at the peak). One image batch of `batch_size`.
CHUNK_SIZE = 64
# Items per shard of a job folder (`output_dir`, `--output-dir`): the unit of resumption and of the work split.
SHARD_SIZE = 1024
# The n-gram metrics' scores in a job folder (`NgramResults`): a resumed run reads them.
NGRAM_RESULTS_NAME = "ngram_scores.json"
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
    what did not run; `without_references` lists the input rows of the scored items that have no references (their
    reference-based and n-gram cells are None).
    """

    corpus: dict[str, float]
    items: list[dict]
    signatures: dict[str, str]
    labels: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, list[int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    without_references: list[int] = field(default_factory=list)

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
        """What `--output x.json` holds: corpus, items, signatures, the columns' headings, skipped rows, rows without
        references, notes."""
        return {"corpus": self.corpus, "items": self.items, "signatures": self.signatures, "labels": self.labels,
                "skipped": self.skipped, "without_references": self.without_references,
                "notes": self.notes}  # fmt: skip


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
    """One reference list per item (an empty list for an item without references), or None when no item has any
    (then a metric that needs references is an `InputError` naming it)."""
    if not any(item.get("references") for item in items):
        refuse_missing_references(items, entries)
        return None
    references = []
    for item in items:
        refs = item.get("references") or []
        refs = [refs] if isinstance(refs, str) else list(refs)
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


class NgramResults:
    """The n-gram metrics' corpus and per-item scores, kept in a job folder (`NGRAM_RESULTS_NAME`) once computed, so
    that a resumed run reads them instead of running pycocoevalcap again. The file holds a fingerprint of what they
    were computed from (each metric's signature, every scored item's caption and references): a run whose metrics or
    items differ recomputes them (and replaces the file)."""

    def __init__(self, output_dir: Path, signatures: dict[str, str], items: list[dict], references: list[list[str]]):
        import hashlib
        import json

        self.path = Path(output_dir) / NGRAM_RESULTS_NAME
        digest = hashlib.sha256(json.dumps(signatures, sort_keys=True).encode())
        for item, refs in zip(items, references, strict=True):
            digest.update((json.dumps([item["caption"], refs], ensure_ascii=False) + "\n").encode())
        self.fingerprint = f"sha256:{digest.hexdigest()}"

    def read(self) -> tuple[dict, dict] | None:
        """`(corpus, per_item)` as `score_ngrams` returns them, or None when the file is absent, unreadable or of
        other metrics or items (then they are computed again)."""
        import json

        try:
            stored = json.loads(self.path.read_text(encoding="utf-8"))
            if stored["fingerprint"] != self.fingerprint:
                logger.info("%s holds the n-gram scores of other metrics or items: scoring them again", self.path)
                return None
            return stored["corpus"], stored["items"]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def write(self, corpus: dict, per_item: dict) -> None:
        """Keep them, atomically (a kill leaves the previous file or none)."""
        import json

        from ..jobs import write_text_atomically

        content = {"fingerprint": self.fingerprint, "corpus": corpus, "items": per_item}
        write_text_atomically(self.path, [json.dumps(content, ensure_ascii=False) + "\n"])


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


def load_models(entries: list[MetricEntry], device: str | None, dtype: str | None) -> dict[str, Any]:
    """The models of `entries`, loaded once each. PAC-S++ adapters load unmerged (`load_model(merge_adapter=False)`):
    `share_identical_backbones` keeps one whose base weights another model holds on those weights, and merges the
    others (then each model is as `pacs-score` loads it)."""
    from ..loading import load_model

    models = {}
    for entry in entries:
        models[entry.name] = load_model(entry.name, device=device, dtype=dtype, merge_adapter=False)
        # Shared as they load: a duplicate's weights are dropped before the next model's are read.
        candidates = {name: model for name, model in models.items() if getattr(model, "embedding_cache", 0) is None}
        share_identical_backbones(candidates, merge_unshared=False)
    return models


def share_image_encoders(models: dict[str, Any], max_entries: int) -> Any:
    """One in-memory `EmbeddingCache` for the models that share an image encoder (the same image-side weights and
    preprocessing: CLIP-S and PAC-S built on one backbone, or one model listed under two names): each image is then
    encoded once for all of them. Returns the cache (None when no two models share one); `detach_cache` removes it."""
    from ..models.embedding_cache import IMAGE, EmbeddingCache

    candidates = {name: model for name, model in models.items() if getattr(model, "embedding_cache", False) is None}
    share_identical_backbones(candidates)
    if len(candidates) < 2:
        return None
    cache = EmbeddingCache(max_entries=max_entries)
    groups: dict[str, list[str]] = {}
    for name, model in candidates.items():
        groups.setdefault(cache.fingerprint(model, IMAGE), []).append(name)
    shared = [name for names in groups.values() if len(names) > 1 for name in names]
    for name in shared:
        models[name].embedding_cache = cache
    return cache if shared else None


def share_identical_backbones(models: dict[str, Any], merge_unshared: bool = True) -> None:
    """Models whose backbones hold the very same weights (CLIP-S and PAC-S of one backbone, one checkpoint under two
    names) keep one copy: the later ones read the first one's backbone (and its packed fast encoders), so their
    memory is that of one model; their configs (`w`, prompt, names) stay their own.

    A PAC-S++ model whose adapter was loaded unmerged (`load_models`) on base weights that another model holds keeps
    its adapter unmerged on that model's weight tensors: the backbone is stored once, and PAC-S++ pays the LoRA
    matrices only (its scores within float rounding of the merged model's); its fast encoders reuse that model's
    packed matrices and add the low-rank terms (`fast_clip`). Without such a model its adapter is merged, as
    `pacs-score` loads it."""
    import gc
    from functools import partial

    from ..models.fast_clip import FastCLIPEncoders, FastEncoderSlot

    kept: list[Any] = []
    deferred = []
    for model in models.values():
        if getattr(model, "merge_deferred", False):
            deferred.append(model)
            continue
        if model.peft_model is not None or not hasattr(model, "clip"):
            continue  # an unmerged adapter wraps the backbone's layers: left as it is
        state = model.clip.state_dict()
        for first in kept:
            if model.clip is first.clip or same_tensors(first.clip.state_dict(), state):
                model.clip, model._fast_encoders = first.clip, first._fast_encoders
                break
        else:
            kept.append(model)
    for model in deferred if merge_unshared else ():
        base = {name.replace(".base_layer.", "."): name for name in model.clip.state_dict() if "lora_" not in name}
        full = model.clip.state_dict()
        state = {plain: full[name] for plain, name in base.items()}
        first = next((first for first in kept if same_tensors(first.clip.state_dict(), state)), None)
        if first is None:
            model.merge_adapter()
            continue
        first_parameters = dict(first.clip.named_parameters())
        for name, _ in list(model.clip.named_parameters()):
            plain = name.replace(".base_layer.", ".")
            if "lora_" in name or plain not in first_parameters:
                continue
            module_name, _, leaf = name.rpartition(".")
            setattr(model.clip.get_submodule(module_name), leaf, first_parameters[plain])
        # The fast encoders reuse the first model's packed matrices and add the adapter's low-rank terms.
        model._fast_encoders = FastEncoderSlot(
            partial(FastCLIPEncoders.build, base=partial(first._fast_encoders.get, first.clip))
        )
        model.merge_deferred = False
    gc.collect()


def same_tensors(first: dict, second: dict) -> bool:
    """Whether two state dicts hold the same names, dtypes, shapes, devices and values."""
    import torch

    return list(first) == list(second) and all(
        first[name].dtype == tensor.dtype and first[name].shape == tensor.shape
        and first[name].device == tensor.device and torch.equal(first[name], tensor)
        for name, tensor in second.items()
    )  # fmt: skip


def detach_cache(models: dict[str, Any], cache: Any) -> None:
    for model in models.values():
        if cache is not None and getattr(model, "embedding_cache", None) is cache:
            model.embedding_cache = None


def score_chunk(model: Any, name: str, images: list, captions: list[str], references: list | None,
                options: dict) -> dict[str, list]:  # fmt: skip
    """`{entry/key: per-item values}` of one chunk, by the references policy (`results.score_items`): an item without
    references gets empty (None) reference-based cells; a chunk in which no item has any gives a metric that needs
    references (Polos) empty cells only, since other chunks have references."""
    from ..registry import spec_of
    from ..results import score_items

    spec = spec_of(model)
    if references is not None and not any(references) and spec.capabilities.needs_references:
        return {f"{name}/{field.key}": [None] * len(captions) for field in spec.outputs}
    scored = score_items(model, images, captions, references, **options)
    return {f"{name}/{column.key}": list(column.values) for column in scored.columns}


def score_rows(models: dict, options: dict, items: list[dict], references: list | None, positions: list[int],
               chunk_size: int, cache: Any, done: Any) -> list[dict]:  # fmt: skip
    """`{"row": position, entry/key: value, ...}` for the items at `positions`, a chunk at a time: each chunk's images
    decoded once and read by every model (the shared image encoders' features computed once, then dropped)."""
    rows = [{"row": position} for position in positions]
    for start in range(0, len(positions), chunk_size):
        chunk = positions[start : start + chunk_size]
        try:  # the core names item i of the chunk: name the input row and the image id instead
            images = decode_images([items[position]["image"] for position in chunk])
            captions = [items[position]["caption"] for position in chunk]
            chunk_references = None if references is None else [references[position] for position in chunk]
            scored = {}
            for name, model in models.items():
                scored[name] = score_chunk(model, name, images, captions, chunk_references, options[name])
                done(name, len(chunk))
        except ValueError as error:  # InputError, ImageInputError, the models' checks
            message = name_item(str(error), lambda index, chunk=chunk: row_name(items[chunk[index]]))
            if message is None:
                raise
            raise with_message(error, message) from error
        for name in models:
            for key, values in scored[name].items():
                for row, value in zip(rows[start : start + len(chunk)], values, strict=True):
                    row[key] = value
        if cache is not None:
            cache.clear()  # this chunk's features: every model has read them
        del images  # freed before the next chunk's are decoded: one chunk of images in memory, not two
    return rows


def row_name(item: dict) -> str:
    """How an error names an item: its row in the input and its image id."""
    return f"row {item['row']} (image_id {item['image_id']!r})"


def image_identity(image: Any) -> str:
    """What pins an item's image in a job's manifest: a path (resolved; as corpus scoring pins its image root), or a
    hash of the bytes or pixels of an in-memory image."""
    from ..models.embedding_cache import image_content_key

    if isinstance(image, dict) and image.get("bytes") is None and image.get("path") is not None:
        image = image["path"]
    if isinstance(image, (str, os.PathLike)):
        return str(Path(os.path.expanduser(os.fspath(image))).resolve())
    return f"content:{image_content_key(image)}"


def job_manifest(entries: list[MetricEntry], items: list[dict], references: list | None, dtype: str | None,
                 long_captions: str, mode: str | None = None) -> dict:  # fmt: skip
    """What the shards of the model metrics depend on: the items (ids, captions, references, images), the models
    (name and, for a local folder, its files), dtype and long-caption mode; a resumed run must have equal values."""
    import hashlib
    import json

    from ..jobs import describe_source

    digest = hashlib.sha256()
    for position, item in enumerate(items):
        refs = None if references is None else references[position]
        identity = [item["image_id"], item["caption"], refs, image_identity(item.get("image"))]
        digest.update((json.dumps(identity, default=str, ensure_ascii=False) + "\n").encode())
    return {
        "command": "evaluate-captions",
        "items_sha256": digest.hexdigest(),
        "num_items": len(items),
        "metrics": [describe_source(entry.name) for entry in entries],
        "dtype": dtype or "fp32",
        "long_captions": long_captions,
        **({"mode": mode} if mode is not None else {}),
    }


def open_job(entries: list[MetricEntry], items: list[dict], references: list | None, *, dtype: str | None,
             long_captions: str, mode: str | None, output_dir: str | os.PathLike, shard_size: int,
             processes: Any) -> tuple[Any, Any]:  # fmt: skip
    """The job folder of the model metrics `entries` (`modeling_pacs.jobs.ShardedJob`), started: `(job, wanted)`.
    Opened before any metric runs, so that its manifest guards the folder before the n-gram results go in it."""
    from ..jobs import ShardedJob

    job = ShardedJob(
        Path(output_dir),
        job_manifest(entries, items, references, dtype, long_captions, mode),
        shard_size=shard_size,
        process_index=0 if processes is None else processes.process_index,
        num_processes=1 if processes is None else processes.num_processes,
        barrier=(lambda: None) if processes is None else processes.wait_for_everyone,
    )
    return job, job.start()


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
    mode: str | None = None,
    job: Any = None,
    wanted: Any = None,
    processes: Any = None,
) -> tuple[dict, dict, dict, dict] | None:
    """Per-item columns, labels, output fields and signatures of the model metrics: each model loaded once, each chunk
    of items' images decoded once and read by every model.

    With a `job` (`open_job`: `modeling_pacs.jobs.ShardedJob` and its `wanted(shard)`), the items are the job's
    shards: each process of `processes` scores its own, every finished shard is kept (a rerun resumes), and the main
    process merges them, each item exactly once. Returns None on the other processes."""
    from tqdm.auto import tqdm

    from ..loading import score_options
    from ..registry import spec_of
    from ..signatures import model_signature

    num_processes = 1 if processes is None else processes.num_processes
    is_main = processes is None or processes.is_main_process
    positions = list(range(len(items)))
    if job is not None:
        mine = [shard for shard in range(job.num_shards(len(items))) if wanted(shard)]
        done_before = len(items) - sum(
            len(job.shard_rows(shard, len(items))) for shard in job.missing_shards(len(items))
        )
    elif num_processes > 1:
        raise InputError(
            f"{num_processes} processes share their work through a job folder: pass output_dir (command line: "
            "--output-dir)"
        )
    models = load_models(entries, device, dtype) if is_main or (job is not None and mine) else {}
    options = {
        name: score_options(model, long_captions, mode, image_batch_size=batch_size, text_batch_size=4 * batch_size,
                            progress=False)
        for name, model in models.items()
    }  # fmt: skip
    cache = share_image_encoders(models, max_entries=16 * chunk_size)
    disable = True if not is_main else None if progress is None else not progress
    bars = {name: tqdm(total=len(items), initial=0 if job is None else done_before, desc=name, unit="caption",
                       disable=disable, position=position)
            for position, name in enumerate(models)}  # fmt: skip

    def done(name: str, count: int):  # the other processes score their shards meanwhile: counted at this pace
        bars[name].update(min(count * num_processes, bars[name].total - bars[name].n))

    try:
        if job is None:
            rows = score_rows(models, options, items, references, positions, chunk_size, cache, done)
        else:
            for shard in mine:
                shard_positions = list(job.shard_rows(shard, len(items)))
                rows = score_rows(models, options, items, references, shard_positions, chunk_size, cache, done)
                job.write_jsonl_shard(shard, rows)  # NaN (a judge's unparsable answer) kept
                logger.info("process %d: shard %d (%d items) done", job.process_index, shard, len(shard_positions))
            job.barrier()
            if not is_main:
                return None
            rows = list(job.merged_rows(len(items), job.read_jsonl_shard))
            job.remove_temporaries()
    finally:
        for bar in bars.values():
            bar.close()
        detach_cache(models, cache)
    per_item: dict[str, list] = {}
    labels: dict[str, str] = {}
    fields: dict[str, OutputField] = {}
    for name, model in models.items():
        for output_field in spec_of(model).outputs:
            key = f"{name}/{output_field.key}"
            if any(key in row for row in rows):  # a reference-based field without references is left out
                per_item[key] = [row.get(key) for row in rows]
                labels[key] = output_field.label_for(model.config)
                fields[key] = output_field
    signatures = {
        name: model_signature(model, name, references, long_captions=long_captions, dtype=dtype, mode=mode)
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
    mode: str | None = None,
    duplicates: str = "error",
    skip: Sequence[str] = (),
    progress: bool | None = None,
    chunk_size: int = CHUNK_SIZE,
    output_dir: str | os.PathLike | None = None,
    shard_size: int = SHARD_SIZE,
    processes: Any = None,
) -> CaptionEvaluation | None:
    """Score `items` with every metric of `metrics`, each image decoded once and each model loaded once.

    Args:
        items: dicts with `image_id`, `image` (a path, bytes, a PIL image, an array or a datasets.Image dict; only
            read by model metrics), `caption` and `references` (a list of strings; needed by the n-gram metrics and
            reference-based models; an item without any gets empty reference-based cells, counted).
        metrics: n-gram metrics (`bleu`, `meteor`, `rouge_l`, `cider`, `spice`) and anything `load_model` accepts
            (an alias such as `pac_s_pp_vit_b32`, a tiny alias such as `tiny:clip_s`, a Hub id, a directory).
        device: as `load_model` takes it (`"cpu"`, `"cuda"`, `"auto"`; None: CUDA when present).
        dtype: None or `"fp32"` for the reference numbers, `"fp16"` / `"bf16"` where a model allows them.
        batch_size: images per encoder batch (4x as many texts), as `pacs-score --batch-size`.
        long_captions: `"truncate"` (the official code) or `"chunks"`
            ([docs/guides/long-captions.md](../guides/long-captions.md)).
        mode: DENEB's and Polos' scoring mode, `"per_item"` or `"official"` (None: the model's default, per_item);
            a model metric without scoring modes refuses it.
        duplicates: `"error"` (several items for one image id are refused) or `"separate"` (each row its own item).
        skip: `"empty_captions"`, `"missing_images"`: skip such rows (counted) instead of refusing them.
        progress: a bar per metric with an ETA (None: when stderr is a terminal; False: none).
        chunk_size: items decoded and scored together (bounds the decoded images held in memory).
        output_dir: a job folder (`modeling_pacs.jobs`) for the model metrics' per-item scores, `shard_size` items
            per shard, and the n-gram metrics' scores (`ngram_scores.json`): a rerun with the same items and metrics
            resumes, finished shards and n-gram scores kept (other n-gram metrics are scored again).
        processes: this process among several (an `accelerate.PartialState` under `torchrun`): each scores its own
            shards of `output_dir`; the main process merges them, runs the n-gram metrics and returns the
            evaluation, the others return None.

    Returns:
        A `CaptionEvaluation` (`corpus`, `items`, `signatures`, `table()`, ...); None on a process that is not the
        main one.
    """
    from ..signatures import ngram_signature

    entries = parse_metrics(metrics)
    models = [entry for entry in entries if not entry.is_ngram]
    ngrams = [entry for entry in entries if entry.is_ngram]
    refuse_missing_references(items, entries)  # before any row is checked: no row can fix it
    kept, skipped = check_items(items, duplicates, skip, needs_images=bool(models))
    references = item_references(kept, entries)
    is_main = processes is None or processes.is_main_process
    notes = []
    if ngrams and is_main:
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
    kinds: dict[str, str] = {}
    corpus: dict[str, float] = {}
    signatures: dict[str, str] = {}

    job = wanted = None
    if output_dir is not None:  # its manifest guards the folder before anything is written in it
        job, wanted = open_job(models, kept, references, dtype=dtype, long_captions=long_captions, mode=mode,
                               output_dir=output_dir, shard_size=shard_size, processes=processes)  # fmt: skip

    def run_ngrams():  # corpus-level (CIDEr's document frequencies): once, on every item with references
        scored_positions = [position for position in range(len(kept)) if references[position]]
        scored_references = [references[position] for position in scored_positions]
        ngram_signatures = {entry.name: ngram_signature(entry.spec, scored_references) for entry in ngrams}
        stored = None if job is None else NgramResults(job.output_dir, ngram_signatures, kept, references)
        found = None if stored is None else stored.read()
        if found is None:
            gts, res = tokenize([kept[position] for position in scored_positions], scored_references)
            found = score_ngrams(ngrams, gts, res, progress)
            if stored is not None:
                stored.write(*found)
        ngram_corpus, ngram_items = found
        corpus.update(ngram_corpus)
        for column, values in ngram_items.items():
            columns[column] = [None] * len(kept)
            for position, value in zip(scored_positions, values, strict=True):
                columns[column][position] = value
            labels[column], kinds[column] = column, "score"
        signatures.update(ngram_signatures)

    # One process: the n-gram metrics first, before any model is loaded (their peak memory and the models' do not
    # add up). Several: the main process runs them once every shard is merged, so that no process waits for them.
    # With a job folder, their results are kept there: a resumed run reads them instead of scoring again.
    single_process = processes is None or processes.num_processes == 1
    if ngrams and single_process:
        run_ngrams()
    if models:
        scored = score_models(
            models, kept, references, device=device, dtype=dtype, batch_size=batch_size,
            long_captions=long_captions, progress=progress, chunk_size=chunk_size, job=job, wanted=wanted,
            processes=processes, mode=mode,
        )  # fmt: skip
        if scored is None:
            return None
        model_items, model_labels, fields, model_signatures = scored
        columns |= model_items
        labels |= model_labels
        kinds |= {key: output_field.kind for key, output_field in fields.items()}
        notes += [f"{key}: {fields[key].summary}: {sum(value for value in values if value is not None)}"
                  for key, values in model_items.items() if fields[key].summary]  # fmt: skip
        signatures |= model_signatures
    if not is_main:
        return None
    if ngrams and not single_process:
        run_ngrams()
    for key, values in columns.items():
        present = [value for value in values if value is not None]
        if key not in corpus and kinds[key] == "score" and present:
            corpus[key] = answered_mean(present)  # the mean over the items that have a value (NaN: a failed answer)
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
    without = [] if references is None else [position for position, refs in enumerate(references) if not refs]
    if without:
        empty = [
            labels[column] for column in columns if kinds[column] == "score" and columns[column][without[0]] is None
        ]
        note = references_note(len(without), len(kept), empty)
        notes.append(f"{note}; those corpus scores are over the {len(kept) - len(without)} items that have references")
        logger.warning(notes[-1])
    rows = [
        {"image_id": item["image_id"], "caption": item["caption"], **{key: values[position] for key, values in
                                                                        columns.items()}}
        for position, item in enumerate(kept)
    ]  # fmt: skip
    return CaptionEvaluation(corpus, rows, signatures, labels, skipped, notes,
                             [kept[position]["row"] for position in without])  # fmt: skip


__all__ = ["CaptionEvaluation", "DEFAULT_METRICS", "SHARD_SIZE", "evaluate_captions", "known_entries", "parse_metrics"]
