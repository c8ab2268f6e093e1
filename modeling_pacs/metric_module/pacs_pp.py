"""PAC-S++ / PAC-S / CLIP-S (and their reference-based versions) as an `evaluate` metric.

A thin wrapper: models load through `modeling_pacs.loading.load_model` and every score comes from
`PACSModel.score`. Images never pass through Arrow as pixels: paths are stored as strings, and in-memory images
(PIL, arrays, bytes) stay in this process until `compute`, so nothing is re-encoded to PNG.

State after a failure (docs/concepts/recovery.md): a failed `add_batch` stores nothing and keeps the rows of earlier
calls; a failed `compute` drops every pending row (those of earlier `add_batch` calls too), as a successful one
consumes them, and its message says how many were dropped; the next computation starts empty.
"""

import contextlib
import os

import datasets
import evaluate
import numpy as np
import PIL.Image
import torch

from modeling_pacs.loading import load_model, long_captions_keyword
from modeling_pacs.metric_module.video import check_video_batch, compute_video_results
from modeling_pacs.models.inputs import (
    check_captions,
    check_long_captions,
    check_references,
    describe_image,
    image_source,
)
from modeling_pacs.models.modeling_pacs import PACSModel
from modeling_pacs.pacs.model_card import CITATION
from modeling_pacs.registry import ALIAS_VARIANTS, DEFAULT_MODEL, PRETRAINED_MODELS, SHORT_NAMES

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
    references (`list` of `list` of `str`, *optional*): reference captions, one non-empty list per prediction.
        Required by the reference-based configs (`refpac_s_pp`, `refpac_s`, `refclip_s`, ...).
Returns:
    metric (`str`): name of the reference-free score ("PAC-S++", "PAC-S" or "CLIP-S").
    score (`float`): corpus score, the mean of `scores`.
    scores (`list` of `float`): the score of each prediction.
    ref_metric, ref_score, ref_scores: the same for the reference-based score ("RefPAC-S++", ...), with references.
    truncated_tokens (`list` of `int`): the tokens of each prediction the text encoder did not read (0 when it fits
        the 77-token context; Polos: its CLIP features'; Pearl: the most any of its encoders dropped);
        num_truncated (`int`): how many predictions lost tokens. Load the module with `long_captions="chunks"` to
        read long captions in pieces (PAC-S-family models; docs/guides/long-captions.md).
Videos: pass `videos=` instead of `images=` (files, frame folders, lists of images, (T, H, W, C) arrays or (T, D)
    frame embeddings) and optionally `num_frames=` and `idf=` to `compute`: the EMScore-style video metric (Eq. 13;
    Eq. 14 as `ref_scores` with references), with per-prediction `precision`, `recall`, `f` and `coarse`.
Examples:
    >>> pacs = evaluate.load("pacs_pp", model="tiny")  # random weights: real runs use the default model
    >>> results = pacs.compute(predictions=["a red circle"], images=["examples/images/red_circle.png"])
    >>> sorted(results)
    ['metric', 'num_truncated', 'score', 'scores', 'truncated_tokens']
"""

# Short config names (`variants.SHORT_NAMES`) pick the ViT-B/32 release; a "ref" prefix makes references mandatory.
REFERENCE_PREFIX = "ref"
# Placeholder written to the Arrow column for an image that stays in this process (see `_store_images`).
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
        self.in_memory_images = []
        self.input_kind = None
        super().__init__(config_name=config_name, **kwargs)

    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            module_type="metric",
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            # Images are declared as strings: paths are stored as is and never re-encoded as PNG.
            features=datasets.Features(
                {
                    "predictions": datasets.Value("string"),
                    "images": datasets.Value("string"),
                    "references": datasets.Sequence(datasets.Value("string")),
                }
            ),
            homepage="https://github.com/aimagelab/pacscore",
            codebase_urls=["https://github.com/aimagelab/pacscore"],
            reference_urls=["https://arxiv.org/abs/2303.12112"],
        )

    def _download_and_prepare(self, dl_manager):
        self.load_engine()

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

    # -------------------------------------------------------------------------------------- gathering inputs
    def add_batch(self, *, predictions=None, images=None, references=None, videos=None, **kwargs):
        """Validate a batch (clear messages naming the item) and store it; images stay paths or in memory."""
        if kwargs:
            raise ValueError(f"unexpected inputs {sorted(kwargs)}: pass predictions=, images= and references=")
        images, input_kind = check_video_batch(images, videos, self.input_kind, len(self))
        if predictions is None or images is None:
            raise ValueError("pass both predictions= (captions) and images= (one image per caption)")
        start = len(self)
        predictions = check_captions(predictions, "prediction")
        images = [images] if isinstance(images, (str, os.PathLike)) else list(images)
        if len(images) != len(predictions):
            raise ValueError(
                f"got {len(predictions)} predictions and {len(images)} images: pass exactly one image per "
                "prediction (repeat an image for each of its captions; repeats are encoded once)"
            )
        if references is None:
            references = [[] for _ in predictions]
        else:
            references = check_references(references, len(predictions))
        stored, in_memory = self._store_images(images, start, input_kind)
        super().add_batch(predictions=predictions, images=stored, references=references)
        # only a batch that was stored changes the state: a failed one leaves the earlier rows as they were
        self.in_memory_images.extend(in_memory)
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
        pending = len(self)
        try:
            if predictions is not None or images is not None or references is not None or videos is not None:
                self.add_batch(predictions=predictions, images=images, references=references, videos=videos)
            elif self.writer is None:
                raise ValueError("nothing to score: pass predictions= and images= to compute, or call add_batch first")
            return super().compute(**kwargs)
        except Exception as error:
            self.drop_pending_rows()
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
            self.in_memory_images = []
            self.input_kind = None

    def drop_pending_rows(self):
        """Forget every row added since the last computation, with `evaluate`'s cache file and its lock."""
        if self.writer is not None:
            with contextlib.suppress(Exception):  # a writer broken by the failure is being thrown away anyway
                self.writer.finalize()
        self.writer = self.data = self.buf_writer = None
        locks = [self.filelock] if self.filelock is not None else []
        locks += getattr(self, "filelocks", None) or []
        paths = [self.cache_file_name] if self.cache_file_name else []
        paths += getattr(self, "file_paths", None) or []
        for lock in locks:
            lock.release()
        if self.process_id == 0:  # as evaluate itself does: process 0 removes the computation's cache files
            for path in paths:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)
        self.cache_file_name = self.filelock = self.selected_feature_format = None
        self.filelocks = self.file_paths = None

    def _store_images(self, images: list, start: int, input_kind: str) -> tuple[list[str], list]:
        """Paths become strings for the Arrow column; other images stay here (returned second: `add_batch` keeps them
        once the batch is stored) and a placeholder goes to Arrow."""
        stored, in_memory = [], []
        for offset, image in enumerate(images):
            index = start + offset
            if isinstance(image, dict) and self.input_kind != "videos":
                image = image_source(image, f"image {index}")  # its bytes or its path; refused without either
            if isinstance(image, (str, os.PathLike)):
                path = os.fspath(image)
                if not os.path.isfile(path) and not (input_kind == "videos" and os.path.isdir(path)):
                    raise FileNotFoundError(f"image {index} ('{path}') does not exist or is not a file")
                stored.append(path)
            elif isinstance(image, IN_MEMORY_TYPES) or input_kind == "videos":
                stored.append(f"{IN_MEMORY_PREFIX}{self.process_id}:{len(self.in_memory_images) + len(in_memory)}>")
                in_memory.append(image)
            else:
                raise TypeError(
                    f"image {index} is {describe_image(image)}: pass a path, a PIL image, a numpy array or bytes"
                )
        return stored, in_memory

    def _restore_images(self, stored: list[str]) -> list:
        images = []
        for index, image in enumerate(stored):
            if not image.startswith(IN_MEMORY_PREFIX):
                images.append(image)
                continue
            process_id, position = image[len(IN_MEMORY_PREFIX) : -1].split(":")
            if int(process_id) != self.process_id:
                raise ValueError(
                    f"image {index} is an in-memory image added by process {process_id}: with num_process > 1, "
                    "pass images as file paths so that process 0 can read them"
                )
            images.append(self.in_memory_images[int(position)])
        return images

    # -------------------------------------------------------------------------------------------- scoring
    def _compute(self, predictions, images, references, **options):
        with_references = [index for index, item_references in enumerate(references) if item_references]
        if self.requires_references and len(with_references) < len(predictions):
            missing = next(index for index, item in enumerate(references) if not item)
            raise ValueError(
                f"config {self.config_name!r} is reference-based but prediction {missing} has no references: pass "
                "references=[[...], ...] (one non-empty list per prediction), or load a reference-free config "
                f"such as {self.config_name[len(REFERENCE_PREFIX) :]!r}"
            )
        if with_references and len(with_references) < len(predictions):
            missing = next(index for index, item in enumerate(references) if not item)
            raise ValueError(
                f"prediction {missing} has no references while prediction {with_references[0]} has some: pass "
                "references for every prediction, or for none (reference-free score only)"
            )
        if self.input_kind == "videos":
            settings = {"batch_size": self.image_batch_size, "text_batch_size": self.text_batch_size}
            return compute_video_results(
                self.load_engine(),
                predictions,
                self._restore_images(images),
                references,
                bool(with_references),
                options,
                {**settings, "progress": self.progress, **self.long_captions_options()},
            )
        if options:
            raise ValueError(f"unexpected options {sorted(options)}: num_frames= and idf= apply to videos= only")
        output = self.load_engine().score(
            self._restore_images(images),
            predictions,
            references=references if with_references else None,
            image_batch_size=self.image_batch_size,
            text_batch_size=self.text_batch_size,
            progress=self.progress,
            **self.long_captions_options(),
        )
        free_name, ref_name = self.engine.config.score_names
        results = {"metric": free_name, "score": output.mean_score, "scores": output.scores.tolist()}
        if getattr(output, "ref_scores", None) is not None:  # Polos returns one (reference-based) score
            results.update(ref_metric=ref_name, ref_score=output.mean_ref_score, ref_scores=output.ref_scores.tolist())
        return {**results, **truncation_results(output)}

    def long_captions_options(self) -> dict:
        """The `long_captions` keyword for the engine: PAC-S-family models read it; others only truncate."""
        return long_captions_keyword(self.engine, self.long_captions)


def truncation_results(output) -> dict:
    """`truncated_tokens` per prediction and `num_truncated`, where the engine reports them."""
    truncated = getattr(output, "truncated_tokens", None)
    if truncated is None:
        return {}
    return {"truncated_tokens": truncated.tolist(), "num_truncated": int((truncated > 0).sum())}
