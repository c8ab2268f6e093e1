"""Model metrics as pycocoevalcap scorers: `ModelScorer(model=..., images=...)` with `compute_score(gts, res)` and
`method()`, so that PAC-S++, CLIP-S, Polos, Pearl, ... drop into every captioning codebase's `COCOEvalCap`-style loop
beside `Bleu(4)`, `Cider()` and `Spice()`.

pycocoevalcap's scorers take two dicts keyed by image id: `gts` (the references, a list of captions per id) and `res`
(the candidate, a one-caption list per id); they return the corpus score and the per-item scores in the order of
`gts.keys()`. A model metric also needs each id's image: `images` is a mapping `{image_id: path or PIL image}` or a
folder, where an id's file is found by `image_pattern` (`"COCO_val2014_%012d.jpg"`, `"{}.jpg"`) or, without one, by
the usual names (`42.jpg`, COCO 2017's `000000000042.jpg`, COCO 2014's `COCO_val2014_000000000042.jpg`).

The family classes (`PACSppScorer`, `CLIPScorer`, `PolosScorer`, ...) live in each family's folder and only set
`default_model`.

Policies:

| input | what happens |
| --- | --- |
| `gts` and `res` with different ids | `InputError` naming ids on each side (pycocoevalcap asserts) |
| several results for one id | `InputError` naming the ids: one caption per image, as pycocoevalcap asserts |
| an id whose image is not in `images` | `InputError` naming the ids and the file names looked for |
| captions as COCO annotation dicts (`{"caption": ...}`) | their `caption` is read (untokenised input) |
| an id with an empty reference list | the references policy of `pacs-score` (`results.score_items`): empty cells |

Example:

```python
>>> from modeling_pacs.evaluation.coco_scorers import ModelScorer
>>> scorer = ModelScorer("tiny:clip_s", images={1: "examples/images/red_circle.png"})  # doctest: +SKIP
>>> score, scores = scorer.compute_score({1: ["a red disc"]}, {1: ["a red circle"]})  # doctest: +SKIP
>>> scorer.columns  # doctest: +SKIP
['CLIP-S', 'RefCLIP-S']
```
"""

import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..errors import InputError

# The file suffixes a folder's images are looked for with, without `image_pattern`.
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff")
# COCO 2014 names its files `COCO_<split>2014_<12-digit id>.jpg`; COCO 2017 and nocaps-style folders `<12 digits>.jpg`.
COCO_FILE_NAME = re.compile(r"^(?:COCO_[A-Za-z]+\d{4}_)?(\d{12})$")


class ModelScorer:
    """A model metric with pycocoevalcap's scorer interface: `compute_score(gts, res) -> (score, scores)`.

    Args:
        model: anything `load_model` takes (an alias such as `pac_s_pp_vit_b32`, a tiny alias such as
            `tiny:clip_s`, a Hub id, a model directory), or an already loaded scoring model. The family classes
            (`PACSppScorer`, ...) default it to their released model.
        images: `{image_id: image}` (a path, bytes, a PIL image, an array: whatever `model.score` takes), or a folder.
        image_pattern: with a folder, the file name of an id: `"COCO_val2014_%012d.jpg"` (%-style) or `"{}.jpg"`
            (`str.format`); None looks for `<id>.<suffix>` and the COCO names (`000000000042.jpg`,
            `COCO_val2014_000000000042.jpg`).
        outputs: the output keys returned (`"score"`, `"ref_score"`; a list for several); None: every score the
            metric computes with the references of `gts` (CLIP-S family: `score` and `ref_score`, as `Bleu(4)`
            returns its four).
        use_references: whether `gts` are passed to the model as references (None: when the metric or one of the
            `outputs` reads them; False: reference-free scores, `gts` then only gives the ids' order).
        device, dtype, batch_size, long_captions: as `pacs-score` takes them (`--device`, `--dtype`,
            `--batch-size`, `--long-captions`).
        mode: the scoring mode of a metric that has several (`Capabilities.scoring_modes`: `"per_item"`,
            `"official"`, as `pacs-score --mode`); None: the model's default. `compute_score` scores its items in
            the order of `gts.keys()` in one `model.score` call, so `"official"` chunks follow that order. A metric
            without scoring modes, or a mode it does not have, is refused here, naming the valid ones.

    With one output, `compute_score` returns a float and a list of floats; with several, a list of each (as
    `Bleu.compute_score` does), named by `columns`. `signature` holds the last call's reproducibility signature.
    """

    default_model: str | None = None  # the family classes' released model
    metric: str | None = None  # the family classes' metric (`pac_s_pp`, `clip_s`, `polos`): another model is refused

    def __init__(
        self,
        model: Any = None,
        images: Mapping | str | os.PathLike | None = None,
        *,
        image_pattern: str | None = None,
        outputs: str | Sequence[str] | None = None,
        use_references: bool | None = None,
        device: str | None = None,
        dtype: str | None = None,
        batch_size: int = 64,
        long_captions: str = "truncate",
        mode: str | None = None,
    ):
        from ..loading import check_scoring_mode, load_model
        from ..registry import spec_of

        model = model if model is not None else self.default_model
        if model is None:
            raise InputError(f"{type(self).__name__} needs model=: an alias, a tiny alias, a Hub id or a directory")
        if isinstance(model, str):
            self.entry = model
            self.model = load_model(model, device=device, dtype=dtype)
        else:
            self.entry = getattr(model.config, "_name_or_path", "") or type(model).__name__
            self.model = model
        self.spec = spec_of(self.model)
        check_metric(self.model, self.spec, self.metric, type(self).__name__)
        self.scoring_mode = None if mode is None else check_scoring_mode(self.spec, mode)
        self.images = images
        self.image_pattern = image_pattern
        self.dtype = dtype
        self.batch_size = batch_size
        self.long_captions = long_captions
        capabilities = self.spec.capabilities
        scores = [field for field in self.spec.outputs if field.kind == "score"]
        name = scores[0].label_for(self.model.config)  # the metric's name: CLIP-S, not its family's
        requested = None if outputs is None else [outputs] if isinstance(outputs, str) else list(outputs)
        if use_references is None:  # references when the metric or the requested outputs read them
            use_references = (
                capabilities.reference_based
                if requested is None
                else capabilities.needs_references
                or any(field.needs_references for field in scores if field.key in requested)
            )
        self.use_references = bool(use_references)
        if self.use_references and not capabilities.reference_based:
            raise InputError(f"{name} has no reference-based score: pass use_references=False")
        if not self.use_references and not capabilities.reference_free:
            raise InputError(f"{name} scores captions against references: use_references must be True")
        usable = [field.key for field in scores if self.use_references or not field.needs_references]
        self.outputs = usable if requested is None else requested
        unknown = [key for key in self.outputs if key not in usable]
        if unknown or not self.outputs:
            raise InputError(
                f"outputs {unknown or self.outputs!r}: {name} gives {usable} "
                f"{'with' if self.use_references else 'without'} references"
            )
        self.columns = [self.spec.output(key).label_for(self.model.config) for key in self.outputs]
        self.signature: str | None = None
        self._folder_index: tuple[Path, dict] | None = None

    def method(self) -> str:
        """The metric's name, as pycocoevalcap's `Cider().method()` gives `"CIDEr"` (`"PAC-S++"`, `"Polos"`)."""
        return self.columns[0]

    def compute_score(self, gts: Mapping, res: Mapping) -> tuple[Any, Any]:
        """The corpus score (the mean of the per-item scores) and the per-item scores, in the order of `gts.keys()`
        as pycocoevalcap's scorers give them; one float and one list, or a list of each with several `outputs`."""
        from ..loading import score_options
        from ..results import score_items
        from ..signatures import model_signature

        image_ids = check_keys(gts, res)
        candidates = [one_caption(image_id, res[image_id]) for image_id in image_ids]
        references = None
        if self.use_references:
            references = [[caption_text(image_id, ref) for ref in reference_list(image_id, gts[image_id])]
                          for image_id in image_ids]  # fmt: skip
        images = self.images_of(image_ids)
        scored = score_items(
            self.model, images, candidates, references,
            **score_options(self.model, self.long_captions, self.scoring_mode, image_batch_size=self.batch_size,
                            text_batch_size=4 * self.batch_size, progress=False),
        )  # fmt: skip
        columns = {column.key: column.values for column in scored.columns}
        self.signature = model_signature(
            self.model,
            self.entry,
            references,
            long_captions=self.long_captions,
            dtype=self.dtype,
            mode=self.scoring_mode,
        )
        corpus, per_item = [], []
        for key in self.outputs:
            values = columns[key]
            present = [value for value in values if value is not None]
            corpus.append(math.fsum(present) / len(present) if present else float("nan"))
            per_item.append([None if value is None else float(value) for value in values])
        if len(self.outputs) == 1:
            return corpus[0], per_item[0]
        return corpus, per_item

    # ---------------------------------------------------------------------------------------------------- images
    def images_of(self, image_ids: list) -> list:
        """The image of each id, from the mapping or the folder; the ids without one are named together."""
        if self.images is None:
            raise InputError(
                f"{type(self).__name__} needs images=: a mapping {{image_id: path or image}} or an image folder"
            )
        if isinstance(self.images, Mapping):
            missing = [image_id for image_id in image_ids if image_id not in self.images]
            if missing:
                raise InputError(
                    f"{len(missing)} image ids have no image in the images mapping ({ids_text(missing)}): add them"
                )
            return [self.images[image_id] for image_id in image_ids]
        folder = Path(os.path.expanduser(os.fspath(self.images)))
        if not folder.is_dir():
            raise InputError(f"images folder '{folder}' does not exist or is not a folder")
        found, missing = [], []
        for image_id in image_ids:
            path = self.file_of(folder, image_id)
            if path is None:
                missing.append(image_id)
            found.append(path)
        if missing:
            looked = (
                f"'{pattern_name(self.image_pattern, missing[0])}'"
                if self.image_pattern
                else f"'{missing[0]}.jpg' (or .png, ...) and the COCO names ('COCO_val2014_%012d.jpg', '%012d.jpg')"
            )
            raise InputError(
                f"{len(missing)} image ids have no file in '{folder}' ({ids_text(missing)}; looked for {looked}): "
                "pass image_pattern= (e.g. 'COCO_val2014_%012d.jpg') or a mapping {image_id: path}"
            )
        return [str(path) for path in found]

    def file_of(self, folder: Path, image_id: Any) -> Path | None:
        if self.image_pattern:
            path = folder / pattern_name(self.image_pattern, image_id)
            return path if path.is_file() else None
        if self._folder_index is None or self._folder_index[0] != folder:
            self._folder_index = (folder, folder_index(folder))
        index = self._folder_index[1]
        return index.get(str(image_id)) or (index.get(int(image_id)) if is_integer_id(image_id) else None)


def check_metric(model: Any, spec: Any, metric: str | None, class_name: str) -> None:
    """A family class refuses a model of another metric (`CLIPScorer(model="tiny:pac_s")`), naming the right class."""
    computed = getattr(model.config, "variant", None) or spec.metrics[0]
    if metric is not None and computed != metric:
        raise InputError(
            f"{class_name} scores {metric}, and this model computes {computed}: pass a {metric} model, or use "
            "ModelScorer (or ModelMetric) for any model"
        )


def pattern_name(pattern: str, image_id: Any) -> str:
    """`"COCO_val2014_%012d.jpg"` % 42 or `"{}.jpg".format(42)`."""
    try:
        return pattern % image_id if "%" in pattern else pattern.format(image_id)
    except (TypeError, ValueError, IndexError, KeyError) as error:
        raise InputError(f"image_pattern {pattern!r} cannot name image id {image_id!r} ({error})") from None


def folder_index(folder: Path) -> dict:
    """A folder's images by stem (`"42"`) and, for COCO names, by integer id (`42`)."""
    index: dict = {}
    for entry in sorted(os.scandir(folder), key=lambda entry: entry.name):
        if not entry.is_file() or not entry.name.lower().endswith(IMAGE_SUFFIXES):
            continue
        stem = entry.name.rsplit(".", 1)[0]
        index.setdefault(stem, Path(entry.path))
        match = COCO_FILE_NAME.match(stem)
        if match:
            index.setdefault(int(match.group(1)), Path(entry.path))
    return index


def is_integer_id(image_id: Any) -> bool:
    return (isinstance(image_id, int) and not isinstance(image_id, bool)) or (
        isinstance(image_id, str) and image_id.isdigit()
    )


# ---------------------------------------------------------------------------------------------------- gts and res
def ids_text(ids: list) -> str:
    return ", ".join(map(repr, ids[:5])) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")


def check_keys(gts: Mapping, res: Mapping) -> list:
    """The ids in the order of `gts.keys()` (pycocoevalcap's order); `gts` and `res` must hold the same ids."""
    if not isinstance(gts, Mapping) or not isinstance(res, Mapping):
        raise InputError("compute_score takes two dicts keyed by image id: gts (references) and res (one caption each)")
    if gts.keys() != res.keys():
        only_gts = [image_id for image_id in gts if image_id not in res]
        only_res = [image_id for image_id in res if image_id not in gts]
        sides = [f"{len(only_res)} only in res ({ids_text(only_res)})" if only_res else "",
                 f"{len(only_gts)} only in gts ({ids_text(only_gts)})" if only_gts else ""]  # fmt: skip
        differences = "; ".join(filter(None, sides))
        raise InputError(f"gts and res must have the same image ids, as pycocoevalcap's scorers assert: {differences}")
    if not gts:
        raise InputError("gts and res are empty: nothing to score")
    return list(gts.keys())


def caption_text(image_id: Any, caption: Any) -> str:
    """A caption as a string: a string, or a COCO annotation dict's `caption` (before PTB tokenisation)."""
    if isinstance(caption, Mapping) and "caption" in caption:
        caption = caption["caption"]
    if not isinstance(caption, str):
        raise InputError(f"image id {image_id!r}: a caption is {caption!r}, not text (or a dict with 'caption')")
    return caption


def one_caption(image_id: Any, captions: Any) -> str:
    """The one candidate of `res[image_id]` (a one-element list, as pycocoevalcap asserts; a bare string is taken)."""
    if isinstance(captions, (str, Mapping)):
        return caption_text(image_id, captions)
    captions = list(captions) if isinstance(captions, Sequence) else [captions]
    if len(captions) != 1:
        raise InputError(
            f"res[{image_id!r}] holds {len(captions)} captions: pycocoevalcap's scorers score one result per image id "
            "(its scorers assert len(hypo) == 1); keep one caption per image id, or give each caption its own id"
        )
    return caption_text(image_id, captions[0])


def reference_list(image_id: Any, references: Any) -> list:
    if isinstance(references, (str, Mapping)):
        return [references]
    if not isinstance(references, Sequence):
        raise InputError(f"gts[{image_id!r}] is {type(references).__name__}: a list of reference captions")
    return list(references)


__all__ = ["ModelScorer", "check_metric"]
