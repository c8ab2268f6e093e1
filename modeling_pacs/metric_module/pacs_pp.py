"""PAC-S++ / PAC-S / CLIP-S (and their reference-based versions) as an `evaluate` metric: the class `PACSPlusPlus`.

`evaluate.load` reads the short script `script/pacs_pp.py` (what `metric/pacs_pp/` links to and what
`pacs-pp register-metric` writes into evaluate's cache), which imports this class from `modeling_pacs.metric_module`.

The class fills in evaluate's template: `_info` declares the rows evaluate stores, `_download_and_prepare` loads the
model (`modeling_pacs.loading.load_model`) and `_compute` scores the gathered rows with `PACSModel.score` (or
`score_videos`). evaluate keeps the rows (its Arrow writer, cache file and lock) and runs every computation; this
class writes none of evaluate's fields.

`add_batch`, `add` and `compute` are redefined because this metric takes other arguments than evaluate's versions
can: those take exactly the declared columns, all of them on every call, so they have no optional `references=`,
no `videos=` in place of `images=` and no `image=` in `add` (evaluate raises a `TypeError` or "inputs are missing").
Each checks its arguments, turns them into rows of `ROW_FEATURES` and calls evaluate's method; `compute` also
applies the failure policy below.

Images never pass through Arrow as pixels: paths are stored as strings, and in-memory images (PIL, arrays, bytes)
stay in this process until `compute`, so nothing is re-encoded to PNG (see `IN_MEMORY_PREFIX`).

State after a failure (docs/concepts/recovery.md): a failed `add_batch` stores nothing and keeps the rows of earlier
calls; a failed `compute` drops every pending row (those of earlier `add_batch` calls too), as a successful one
consumes them, and its message says how many were dropped; the next computation starts empty. Rows are dropped
by evaluate's own `compute`, which also deletes its cache file and releases its lock (see `compute`).
"""

import contextlib
import os

import datasets
import evaluate
import numpy as np
import PIL.Image
import torch

from ..loading import load_model, long_captions_keyword, score_options
from ..models.inputs import (
    check_captions,
    check_long_captions,
    check_references,
    describe_image,
    image_source,
)
from ..models.modeling_pacs import PACSModel
from ..pacs.model_card import CITATION
from ..registry import ALIAS_VARIANTS, DEFAULT_MODEL, PRETRAINED_MODELS, SHORT_NAMES, spec_of
from ..results import ScoredItems, score_items
from ..signatures import model_signature
from .video import check_video_batch, compute_video_results

_CITATION = (
    CITATION
    + """
@inproceedings{hessel2021clipscore,
  title={{CLIPScore: A Reference-free Evaluation Metric for Image Captioning}},
  author={Hessel, Jack and Holtzman, Ari and Forbes, Maxwell and Le Bras, Ronan and Choi, Yejin},
  booktitle={Proceedings of the Conference on Empirical Methods in Natural Language Processing},
  year={2021}
}
"""
)

_DESCRIPTION = """\
PAC-S++ scores how well a caption describes an image: `w * max(cos(E_v(image), E_t(caption)), 0)` with CLIP
encoders fine-tuned by positive-augmented contrastive learning (LoRA adapters). With references, RefPAC-S++ is the
harmonic mean of that score and the best caption-reference cosine. The same module computes CLIP-S / RefCLIP-S
and PAC-S / RefPAC-S (pick them with `config_name` or `model`).
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (`list` of `str`): candidate captions, one per image.
    images (`list`): one image per prediction: file paths (fastest: stored as strings), PIL images, numpy arrays
        (HxWxC) or torch tensors (CxHxW) of uint8, uint16 or floats in [0, 1], raw bytes, or
        `datasets.Image(decode=False)` dicts; the full rules are in docs/concepts/image-inputs.md. Repeated images
        are encoded once.
    references (`list` of `list` of `str`, *optional*): reference captions, one list per prediction. A prediction
        with an empty list gets None in the reference-based results (`ref_scores`; Polos: `scores`), counted in
        `num_without_references`, and the means are over the others. The reference-based configs (`refpac_s_pp`,
        `refpac_s`, `refclip_s`, ...) require a non-empty list for every prediction.
Returns:
    metric (`str`): name of the reference-free score ("PAC-S++", "PAC-S" or "CLIP-S").
    score (`float`): corpus score, the mean of `scores`.
    scores (`list` of `float`): the score of each prediction.
    ref_metric, ref_score, ref_scores: the same for the reference-based score ("RefPAC-S++", ...), with references.
    signature (`str`): the reproducibility signature (model, weights' digest, w, LoRA, prompt, long captions,
        references per prediction, tokenizer, dtype, version), as `pacs-pp evaluate-captions` prints it.
    truncated_tokens (`list` of `int`): the tokens of each prediction the text encoder did not read (0 when it fits
        the 77-token context; Polos: its CLIP features'; Pearl: the most any of its encoders dropped);
        num_truncated (`int`): how many predictions lost tokens. Load the module with `long_captions="chunks"` to
        read long captions in pieces (PAC-S-family models; docs/guides/long-captions.md).
    mode (`str`, *optional*): DENEB's and Polos' scoring mode, `"per_item"` (their default) or `"official"` (the
        authors' chunks: docs/guides/deneb.md); other metrics refuse it.
Videos: pass `videos=` instead of `images=` (files, frame folders, lists of images, (T, H, W, C) arrays or (T, D)
    frame embeddings) and optionally `num_frames=` and `idf=` to `compute`: the EMScore-style video metric (Eq. 13;
    Eq. 14 as `ref_scores` with references), with per-prediction `precision`, `recall`, `f` and `coarse`.
Examples:
    >>> pacs = evaluate.load("pacs_pp", model="tiny")  # random weights: real runs use the default model
    >>> results = pacs.compute(predictions=["a red circle"], images=["examples/images/red_circle.png"])
    >>> sorted(results)
    ['metric', 'num_truncated', 'score', 'scores', 'signature', 'truncated_tokens']
"""

# Short config names (`variants.SHORT_NAMES`) pick the ViT-B/32 release; a "ref" prefix makes references mandatory.
REFERENCE_PREFIX = "ref"
# The rows evaluate stores: whatever form a batch comes in, `add_batch` writes it as these columns of strings.
# `images` holds a path (an image file, or a video file or frame folder), or an `IN_MEMORY_PREFIX` placeholder;
# `references` is an empty list for a prediction without references. One schema suffices: evaluate picks among
# several only by the types of the same columns, and every accepted form is a string here.
ROW_FEATURES = datasets.Features(
    {
        "predictions": datasets.Value("string"),
        "images": datasets.Value("string"),
        "references": datasets.Sequence(datasets.Value("string")),
    }
)
# In-memory images (and videos) never enter Arrow, where they would be re-encoded (PIL -> PNG) and decoded again.
# Their row stores the placeholder "<pacs-pp in-memory image PROCESS:ROW>" instead, ROW being the row's index among
# the pending rows of the process that added it; the object itself stays in that process, in `in_memory_images`
# (a dict ROW -> object), until the computation ends. `_compute` swaps the placeholders back for the objects.
IN_MEMORY_PREFIX = "<pacs-pp in-memory image "
IN_MEMORY_TYPES = (PIL.Image.Image, np.ndarray, torch.Tensor, bytes, bytearray, memoryview, dict)


def config_names() -> list[str]:
    """Every accepted `config_name`: the model aliases, their short forms, and "ref"-prefixed versions."""
    names = sorted(set(PRETRAINED_MODELS) | set(SHORT_NAMES))
    return ["default", *names, *(REFERENCE_PREFIX + name for name in names)]


def parse_config_name(config_name: str) -> tuple[str | None, bool]:
    """`"refpac_s_pp"` -> (`"pac_s_pp_vit_b32"`, True); `"default"` -> (None, False)."""
    if config_name == "default":
        return None, False
    requires_references = config_name.startswith(REFERENCE_PREFIX)
    name = config_name.removeprefix(REFERENCE_PREFIX)
    name = SHORT_NAMES.get(name, name)
    if name not in PRETRAINED_MODELS:
        raise ValueError(f"unknown config_name {config_name!r}: use one of {config_names()}")
    return name, requires_references


class _FailedComputation:
    """What `_compute` returns instead of raising, so that evaluate finishes its computation (see `compute`)."""

    def __init__(self, error: Exception):
        self.error = error


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class PACSPlusPlus(evaluate.Metric):
    """PAC-S++ metric. `evaluate.load("pacs_pp", config_name=..., model=..., device=..., dtype=...)`.

    Args (of `evaluate.load`):
        config_name: a model alias (`pac_s_pp_vit_b32`, `clip_s_vit_l14`, ...), a short name (`pac_s_pp`,
            `pac_s`, `clip_s`), either prefixed with `ref` to require references (`refpac_s_pp`); default PAC-S++
            ViT-B/32 with optional references.
        model: overrides the weights: an alias, a Hub id, a local or converted model directory, `"tiny"`, or an
            already loaded `PACSModel`.
        device, dtype: as in `modeling_pacs.loading.load_model` (`"cuda"`, `"fp16"`, ...).
        image_batch_size, text_batch_size, progress: passed to `PACSModel.score`.
        long_captions: `"truncate"` (default, the official behaviour) or `"chunks"` (`PACSModel.score`).
    """

    def __init__(
        self,
        config_name: str | None = None,
        model: str | PACSModel | None = None,
        device: str | None = None,
        dtype: str | None = None,
        image_batch_size: int = 64,
        text_batch_size: int = 256,
        progress: bool | None = None,
        long_captions: str = "truncate",
        **kwargs,
    ):
        self.model_alias, self.requires_references = parse_config_name(config_name or "default")
        self.model_argument = model
        self.device = device
        self.dtype = dtype
        self.image_batch_size = image_batch_size
        self.text_batch_size = text_batch_size
        self.progress = progress
        self.long_captions = check_long_captions(long_captions)
        self.engine = model if isinstance(model, PACSModel) else None
        # The pending computation's in-process state (evaluate holds its rows): in-memory images by row, the kind
        # of media ("images" or "videos"), and whether `_compute` is only consuming rows (`_drop_pending_rows`).
        self.in_memory_images = {}
        self.input_kind = None
        self._dropping = False
        super().__init__(config_name=config_name, **kwargs)

    # ---------------------------------------------------------------------------------------- evaluate's template
    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            module_type="metric",
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=ROW_FEATURES.copy(),
            homepage="https://github.com/aimagelab/pacscore",
            codebase_urls=["https://github.com/aimagelab/pacscore"],
            reference_urls=["https://arxiv.org/abs/2303.12112"],
        )

    def _download_and_prepare(self, dl_manager):
        self.load_engine()

    def _compute(self, predictions, images, references, **options):
        """Score the gathered rows. A failure is returned rather than raised: see `compute`."""
        if self._dropping:
            return None
        try:
            return self._score(predictions, self._restore_images(images), references, options)
        except Exception as error:
            return _FailedComputation(error)

    def load_engine(self) -> PACSModel:
        """Load the scoring model once (at `evaluate.load`), checking it against the config's variant."""
        if self.engine is None:
            name = self.model_argument or self.model_alias or DEFAULT_MODEL
            self.engine = load_model(name, device=self.device, dtype=self.dtype)
        if self.model_alias is not None and self.engine.config.variant != ALIAS_VARIANTS[self.model_alias]:
            raise ValueError(
                f"config_name {self.config_name!r} asks for {ALIAS_VARIANTS[self.model_alias]} but model "
                f"'{self.engine.name_or_path}' is a {self.engine.config.variant} model: with model=, pass no "
                f"config_name or one of the same variant (e.g. '{self.engine.config.variant}' or "
                f"'{REFERENCE_PREFIX}{self.engine.config.variant}')"
            )
        return self.engine

    # ------------------------------------------------------------------------ this metric's arguments -> rows
    def add_batch(self, *, predictions=None, images=None, references=None, videos=None, **kwargs):
        """Check a batch (clear messages naming the item) and store it as rows; images stay paths or in memory.

        A batch that fails a check stores nothing and leaves the rows of earlier calls as they were.
        """
        if kwargs:
            raise ValueError(f"unexpected inputs {sorted(kwargs)}: pass predictions=, images= and references=")
        images, input_kind = check_video_batch(images, videos, self.input_kind, len(self))
        media = input_kind.removesuffix("s")  # "image" or "video": the messages name what was passed
        if predictions is None or images is None:
            raise ValueError(f"pass both predictions= (captions) and {input_kind}= (one {media} per caption)")
        start = len(self)
        predictions = check_captions(predictions, "prediction")
        images = [images] if isinstance(images, (str, os.PathLike)) else list(images)
        if len(images) != len(predictions):
            raise ValueError(
                f"got {len(predictions)} predictions and {len(images)} {input_kind}: pass exactly one {media} per "
                f"prediction (repeat a{'n' if media == 'image' else ''} {media} for each of its captions; repeats "
                "are encoded once)"
            )
        if references is None:
            references = [[] for _ in predictions]
        else:
            references = check_references(references, len(predictions), allow_empty=True)  # empty: see _score
        stored, in_memory = self._image_column(images, start, input_kind)
        super().add_batch(predictions=predictions, images=stored, references=references)
        # only a batch that was stored changes the state: a failed one leaves the earlier rows as they were
        self.in_memory_images.update(in_memory)
        self.input_kind = input_kind

    def add(self, *, prediction=None, image=None, reference=None, **kwargs):
        """Add one caption with its image (and optionally its list of references)."""
        self.add_batch(
            predictions=[prediction],
            images=[image],
            references=None if reference is None else [reference],
            **kwargs,
        )

    def compute(self, *, predictions=None, images=None, references=None, videos=None, **kwargs) -> dict | None:
        """Score everything added so far plus the given batch; see the module description for the outputs.

        Success or failure, the pending rows are consumed: a failed computation drops them (its message says how many
        came from earlier `add_batch` calls), so the next one scores only what is added after it.
        """
        # evaluate deletes its cache file and releases its lock only when `_compute` returns: one that raised would
        # leave both behind (the next computation would wait `timeout` seconds for the lock, then write a second
        # file). So `_compute` returns its failure, raised here once evaluate has finished; and a batch refused
        # here drops the earlier rows through evaluate's `compute` too (`_drop_pending_rows`).
        pending = len(self)
        try:
            if predictions is not None or images is not None or references is not None or videos is not None:
                self.add_batch(predictions=predictions, images=images, references=references, videos=videos)
            elif not pending:
                raise ValueError("nothing to score: pass predictions= and images= to compute, or call add_batch first")
            results = super().compute(**kwargs)
            if isinstance(results, _FailedComputation):
                raise results.error
            return results
        except Exception as error:
            if len(self):
                self._drop_pending_rows()
            if not pending:
                raise
            note = (
                f" (nothing was scored: the {pending} pending rows of earlier add_batch calls were dropped; add them "
                "again to retry)"
            )
            try:
                annotated = type(error)(f"{error}{note}")
            except Exception:  # an exception type that takes other arguments keeps its message
                raise error from None
            raise annotated.with_traceback(error.__traceback__) from None
        finally:
            self.in_memory_images = {}
            self.input_kind = None

    def _drop_pending_rows(self):
        """Consume the pending rows with evaluate's own `compute` (its writer, cache file and lock end as after any
        computation), scoring nothing."""
        self._dropping = True
        try:
            with contextlib.suppress(Exception):  # the failure being reported matters more than this one
                super().compute()
        finally:
            self._dropping = False

    def _image_column(self, images: list, start: int, input_kind: str) -> tuple[list[str], dict]:
        """The `images` column of rows `start`, `start + 1`, ...: paths as strings, placeholders for the other images,
        which are returned second (row -> object; `add_batch` keeps them once the batch is stored)."""
        stored, in_memory = [], {}
        for offset, image in enumerate(images):
            row = start + offset
            if isinstance(image, dict) and input_kind != "videos":
                image = image_source(image, f"image {row}")  # its bytes or its path; refused without either
            if isinstance(image, (str, os.PathLike)):
                path = os.fspath(image)
                if not os.path.isfile(path) and not (input_kind == "videos" and os.path.isdir(path)):
                    raise FileNotFoundError(f"image {row} ('{path}') does not exist or is not a file")
                stored.append(path)
            elif isinstance(image, IN_MEMORY_TYPES) or input_kind == "videos":
                stored.append(f"{IN_MEMORY_PREFIX}{self.process_id}:{row}>")
                in_memory[row] = image
            else:
                raise TypeError(
                    f"image {row} is {describe_image(image)}: pass a path, a PIL image, a numpy array or bytes"
                )
        return stored, in_memory

    def _restore_images(self, stored: list[str]) -> list:
        images = []
        for index, image in enumerate(stored):
            if not image.startswith(IN_MEMORY_PREFIX):
                images.append(image)
                continue
            process_id, row = image[len(IN_MEMORY_PREFIX) : -1].split(":")
            if int(process_id) != self.process_id:
                raise ValueError(
                    f"image {index} is an in-memory image added by process {process_id}: with num_process > 1, "
                    "pass images as file paths so that process 0 can read them"
                )
            images.append(self.in_memory_images[int(row)])
        return images

    # -------------------------------------------------------------------------------------------- scoring
    def _score(self, predictions, images, references, options) -> dict:
        with_references = [index for index, item_references in enumerate(references) if item_references]
        if self.requires_references and len(with_references) < len(predictions):
            missing = next(index for index, item in enumerate(references) if not item)
            raise ValueError(
                f"config {self.config_name!r} is reference-based but prediction {missing} has no references: pass "
                "references=[[...], ...] (one non-empty list per prediction), or load a reference-free config "
                f"such as {self.config_name[len(REFERENCE_PREFIX) :]!r}"
            )
        if self.input_kind == "videos" and with_references and len(with_references) < len(predictions):
            missing = next(index for index, item in enumerate(references) if not item)
            raise ValueError(
                f"prediction {missing} has no references while prediction {with_references[0]} has some: the video "
                "metric's IDF weights come from all the references of one computation, so compute the videos with "
                "and without references separately"
            )
        if self.input_kind == "videos":
            settings = {"batch_size": self.image_batch_size, "text_batch_size": self.text_batch_size}
            results = compute_video_results(
                self.load_engine(),
                predictions,
                images,
                references,
                bool(with_references),
                options,
                {**settings, "progress": self.progress, **self.long_captions_options()},
            )
            return results | {"signature": self.signature(references if with_references else None)}
        mode = options.pop("mode", None)
        if options:
            raise ValueError(f"unexpected options {sorted(options)}: num_frames= and idf= apply to videos= only")
        engine = self.load_engine()
        # The references policy (results.score_items): predictions without references get None reference scores.
        scored = score_items(
            engine,
            images,
            predictions,
            references if with_references or engine_needs_references(engine) else None,
            **score_options(
                engine,
                self.long_captions,
                image_batch_size=self.image_batch_size,
                text_batch_size=self.text_batch_size,
                progress=self.progress,
                scoring_mode=mode,
            ),
        )
        signature = self.signature(references if with_references else None, mode)
        return _results_from_columns(scored) | {"signature": signature}

    def signature(self, references: list[list[str]] | None, mode: str | None = None) -> str:
        """The reproducibility signature of a computation with these references (`modeling_pacs/signatures.py`): the
        one `pacs-pp evaluate-captions` prints for the same model, settings and references."""
        engine = self.load_engine()
        if isinstance(self.model_argument, str):
            entry = self.model_argument
        elif self.model_argument is not None:  # a loaded model: named by the directory it came from
            entry = getattr(engine.config, "_name_or_path", "") or type(engine).__name__
        else:
            entry = self.model_alias or DEFAULT_MODEL
        return model_signature(engine, entry, references, long_captions=self.long_captions, dtype=self.dtype,
                               mode=mode)  # fmt: skip

    def long_captions_options(self) -> dict:
        """The `long_captions` keyword for the engine: PAC-S-family models read it; others only truncate."""
        return long_captions_keyword(self.engine, self.long_captions)


def engine_needs_references(engine) -> bool:
    """Whether the engine's metric has no reference-free score (Polos): without references it refuses by name."""
    return spec_of(engine).capabilities.needs_references


def _results_from_columns(scored: ScoredItems) -> dict:
    """The results of an image computation, from the columns its spec declares (`results.score_items`): per score
    key `K`, its name (`metric` / `ref_metric`), corpus score (`score` / `ref_score`) and per-item list (`scores` /
    `ref_scores`); per count, the list and how many items are non-zero (`truncated_tokens`, `num_truncated`).
    Predictions without references have None in the reference-based lists, and `num_without_references` counts them
    (their means are over the others)."""
    results = {}
    for column in scored.columns:
        if column.is_score:
            prefix = "" if column.key == "score" else column.key.removesuffix("score")
            results.update({f"{prefix}metric": column.label, column.key: column.mean, f"{column.key}s": column.values})
        else:
            results[column.key] = column.values
            results[f"num_{column.key.removesuffix('_tokens')}"] = sum(bool(value) for value in column.values)
    if scored.without_references:
        results["num_without_references"] = len(scored.without_references)
    return results


__all__ = ["PACSPlusPlus", "ROW_FEATURES", "config_names", "parse_config_name"]
