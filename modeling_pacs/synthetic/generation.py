"""Synthetic positives for PAC-S++ training (docs/spec/pacs.md#training): a BLIP caption per image, a Stable Diffusion
image per caption.

Data flows one way: source items (COCO Karpathy `dataset_coco.json` + image root, or an image-caption `datasets`
dataset) -> [`group_by_image`] (one work unit per real image with all its human captions) -> the job engine
(`modeling_pacs.jobs.ShardedJob`: shards of `shard_size` images, atomic parquet files, resume, manifest guard,
exactly-once check) -> per shard: decode the real images -> [`BlipCaptioner`] -> [`StableDiffusionGenerator`] ->
one parquet row per human caption.

Row columns: `image` and `synthetic_image` (`datasets.Image`; the real image by path, or by bytes for an in-memory
source; the synthetic one as PNG bytes), `caption`, `synthetic_caption`, `split`, `row` (position in the source),
`sentid` / `cocoid` (caption and image ids: Karpathy's, or the row index and the image's first row for a `datasets`
source), `seed` (this item's generator seed), `safety_flagged`, `error`, and the provenance (`captioner`,
`captioner_revision`, `caption_decoding`, `generator`, `generator_revision`, `scheduler`, `steps`,
`guidance_scale`, `height`, `width`, `dtype`, `global_seed`).

Policies:
- Seeds: item `sentid` is generated from `item_seed(global_seed, sentid)` (sha256 of both, 63 bits) with its own CPU
  `torch.Generator`, so any item can be regenerated alone, on any device and in any batch.
- Safety checker (on by default): a flagged image is NOT stored (`synthetic_image` is null, `safety_flagged` true)
  and is counted in `summary.json`; nothing is silently replaced by the checker's black image. With
  `safety_checker=False`, `safety_flagged` is null (unchecked).
- Unreadable real images: logged by id, their rows carry `error` and no synthetic data, and `summary.json` counts
  and lists them. The trainer's `--synthetic_data` reader skips rows lacking synthetic data (with a warning);
  [`load_synthetic_dataset`] drops them.
"""

import hashlib
import io
import json
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..errors import InputError
from ..extras import require
from ..jobs import ShardedJob

logger = logging.getLogger(__name__)

DEFAULT_CAPTIONER = "Salesforce/blip-image-captioning-large"
DEFAULT_GENERATOR = "stable-diffusion-v1-5/stable-diffusion-v1-5"
# BLIP's COCO captioning settings (configs/caption_coco.yaml of salesforce/BLIP): prompt, beams, lengths.
DEFAULT_CAPTION_PROMPT = "a picture of "
SCHEDULERS = {
    "default": None,
    "pndm": "PNDMScheduler",
    "ddim": "DDIMScheduler",
    "euler": "EulerDiscreteScheduler",
    "euler_a": "EulerAncestralDiscreteScheduler",
    "dpm++": "DPMSolverMultistepScheduler",
}
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


# ---------------------------------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class GenerationSettings:
    """Everything that changes a generated caption or image (all of it is pinned in the job's manifest).

    Args:
        captioner: BLIP captioning model (Hub id or folder); `captioner_revision` its Hub revision.
        caption_prompt: text the caption continues and that is stripped from it (BLIP's COCO prompt).
        caption_num_beams, caption_max_length, caption_min_length: BLIP's beam-search decoding (lengths in
            tokens, prompt included, as in BLIP).
        generator: Stable Diffusion pipeline (Hub id or folder); `generator_revision` its Hub revision.
        scheduler: one of `SCHEDULERS` (`default`: the pipeline's own, PNDM for SD v1.5).
        steps, guidance_scale, height, width: the diffusion call's arguments.
        global_seed: every item's seed is derived from it and the item's id.
        safety_checker: run the pipeline's safety checker (flagged images are recorded, not stored).
        dtype: `fp32`, `fp16` or `bf16`.

    Example:

    ```python
    >>> GenerationSettings(steps=0)
    Traceback (most recent call last):
    ...
    ValueError: steps must be an integer >= 1, got 0
    ```
    """

    captioner: str = DEFAULT_CAPTIONER
    captioner_revision: str | None = None
    caption_prompt: str = DEFAULT_CAPTION_PROMPT
    caption_num_beams: int = 3
    caption_max_length: int = 20
    caption_min_length: int = 5
    generator: str = DEFAULT_GENERATOR
    generator_revision: str | None = None
    scheduler: str = "default"
    steps: int = 50
    guidance_scale: float = 7.5
    height: int = 512
    width: int = 512
    global_seed: int = 0
    safety_checker: bool = True
    dtype: str = "fp32"

    def __post_init__(self):
        for name in ("caption_num_beams", "caption_max_length", "steps"):
            check_integer(name, getattr(self, name), minimum=1)
        check_integer("caption_min_length", self.caption_min_length, minimum=0)
        if self.caption_min_length > self.caption_max_length:
            raise ValueError(
                f"caption_min_length ({self.caption_min_length}) exceeds caption_max_length ({self.caption_max_length})"
            )
        for name in ("height", "width"):
            value = getattr(self, name)
            check_integer(name, value, minimum=8)
            if value % 8:
                raise ValueError(f"{name} must be a multiple of 8 (the VAE's downsampling), got {value}")
        if not isinstance(self.guidance_scale, int | float) or not math.isfinite(self.guidance_scale):
            raise ValueError(f"guidance_scale must be a finite number, got {self.guidance_scale!r}")
        if self.guidance_scale < 0:
            raise ValueError(f"guidance_scale must be >= 0 (1 or less disables guidance), got {self.guidance_scale}")
        check_integer("global_seed", self.global_seed, minimum=0)
        if self.scheduler not in SCHEDULERS:
            raise ValueError(f"scheduler must be one of {sorted(SCHEDULERS)}, got {self.scheduler!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")

    @property
    def caption_decoding(self) -> str:
        """The caption decoding options as one JSON string (a provenance column)."""
        return json.dumps(
            {
                "prompt": self.caption_prompt,
                "num_beams": self.caption_num_beams,
                "max_length": self.caption_max_length,
                "min_length": self.caption_min_length,
            },
            sort_keys=True,
        )


def check_integer(name: str, value: Any, minimum: int):
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def item_seed(global_seed: int, item_id: int | str) -> int:
    """The generator seed of one item: the first 63 bits of sha256(`"{global_seed}:{item_id}"`).

    Example:

    ```python
    >>> item_seed(0, 770337) == item_seed(0, 770337) != item_seed(1, 770337)
    True
    ```
    """
    digest = hashlib.sha256(f"{global_seed}:{item_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


# ---------------------------------------------------------------------------------------------------- sources
@dataclass
class SourceImage:
    """One real image and its human captions: the unit of work (BLIP captions it once)."""

    image_id: int | str
    image: Any  # a path, a `{"bytes", "path"}` dict, or an `ImageReference` to a row of the source dataset
    split: str
    captions: list[tuple[int, int | str, str]] = field(default_factory=list)  # (row, sentid, caption)


def karpathy_images(karpathy_json: str | Path, image_root: str | Path, splits: Iterable[str]) -> list[SourceImage]:
    """The images of COCO Karpathy's `dataset_coco.json` in the given splits (`restval` is a split of its own).

    Rows are numbered in file order over the selected splits; images are referenced by absolute path. The file is
    read by [`modeling_pacs.data.read_karpathy`] (its errors name the entry).
    """
    from ..data import read_karpathy

    captions = read_karpathy(karpathy_json, Path(image_root).resolve(), splits)
    if not captions.num_rows:
        raise ValueError(f"{karpathy_json}: no image in the splits {sorted(set(splits))}")
    images: list[SourceImage] = []
    columns = zip(*(captions.column(name).to_pylist() for name in ("image", "cocoid", "split", "sentid", "caption")))
    for row, (path, cocoid, split, sentid, caption) in enumerate(columns):
        if not images or images[-1].image != path or images[-1].image_id != cocoid:
            images.append(SourceImage(cocoid, path, split))
        images[-1].captions.append((row, sentid, caption))
    return images


def dataset_images(dataset, image_column: str, caption_column: str, split: str) -> list[SourceImage]:
    """The rows of an image-caption `datasets.Dataset`, grouped by image path when they have one.

    `sentid` is the row index; `cocoid` the row index of the image's first row. Images stored in the dataset (bytes)
    stay there: each unit holds an [`ImageReference`] to its row, read with its shard ([`generate_shard`]).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    from ..data.sources import ArrowSource, ImageReference, is_bytes_type, path_field, struct_field

    missing = [column for column in (image_column, caption_column) if column not in dataset.column_names]
    if missing:
        raise InputError(
            f"the dataset lacks column(s) {missing} (columns: {dataset.column_names}): set --image-column and "
            "--caption-column"
        )
    source = ArrowSource.from_dataset(dataset, "the dataset")
    values = source.table.column(image_column)
    paths = path_field(values).to_pylist()
    if pa.types.is_struct(values.type) and values.type.get_field_index("bytes") >= 0:
        in_memory = pc.is_valid(struct_field(values, "bytes")).to_numpy(zero_copy_only=False)
    else:
        in_memory = [is_bytes_type(values.type)] * source.num_rows
    captions = source.read_columns([caption_column]).column(0).to_pylist()
    images: dict[Any, SourceImage] = {}
    for row, (path, bytes_stored, caption) in enumerate(zip(paths, in_memory, captions)):
        if not isinstance(caption, str):
            raise InputError(f"row {row}: caption is {type(caption).__name__} ({caption!r}), expected a string")
        # Rows naming the same file share one BLIP caption; an image given as bytes is its own unit.
        key = ("path", path) if path and not bytes_stored else ("row", row)
        if key not in images:
            image = path if key[0] == "path" else ImageReference(source, image_column, row)
            images[key] = SourceImage(row, image, split)
        images[key].captions.append((row, row, caption))
    return sorted(images.values(), key=lambda source: source.captions[0][0])


# ---------------------------------------------------------------------------------------------------- models
def resolve_revision(model: str, revision: str | None) -> str | None:
    """The commit a Hub model resolves to (pinned in the provenance); `None` for a local folder."""
    if Path(model).expanduser().is_dir():
        return None
    try:
        from huggingface_hub import model_info

        return model_info(model, revision=revision).sha
    except Exception as error:  # offline or private: keep the requested revision, and say so
        logger.warning(f"could not resolve the revision of {model} ({error}); recording {revision or 'main'!r}")
        return revision or "main"


class BlipCaptioner:
    """BLIP captions with beam search, the prompt stripped as in BLIP's own code.

    Example:

    ```python
    >>> import tempfile, PIL.Image
    >>> from modeling_pacs.testing.synthetic import make_tiny_blip
    >>> captioner = BlipCaptioner(GenerationSettings(captioner=str(make_tiny_blip(tempfile.mkdtemp()))), "cpu")
    >>> len(captioner([PIL.Image.new("RGB", (64, 48))]))  # random tiny weights: random words
    1
    ```
    """

    def __init__(self, settings: GenerationSettings, device: str | torch.device):
        from transformers import AutoTokenizer, BlipForConditionalGeneration, BlipImageProcessorPil

        self.settings = settings
        self.device = torch.device(device)
        self.dtype = DTYPES[settings.dtype]
        kwargs = {"revision": settings.captioner_revision}
        self.model = BlipForConditionalGeneration.from_pretrained(settings.captioner, dtype=self.dtype, **kwargs)
        self.model.to(self.device).eval()
        self.image_processor = BlipImageProcessorPil.from_pretrained(settings.captioner, **kwargs)
        self.tokenizer = AutoTokenizer.from_pretrained(settings.captioner, **kwargs)

    @torch.no_grad()
    def __call__(self, images: list) -> list[str]:
        settings = self.settings
        pixel_values = self.image_processor(images=images, return_tensors="pt")["pixel_values"]
        inputs = {"pixel_values": pixel_values.to(self.device, self.dtype)}
        prompt = settings.caption_prompt.strip()
        if prompt:
            prompts = self.tokenizer([prompt] * len(images), return_tensors="pt")
            inputs["input_ids"] = prompts["input_ids"].to(self.device)
        output = self.model.generate(
            **inputs,
            num_beams=settings.caption_num_beams,
            max_length=settings.caption_max_length,
            min_length=settings.caption_min_length,
            do_sample=False,
        )
        captions = self.tokenizer.batch_decode(output, skip_special_tokens=True)
        # The prompt as the tokenizer writes it back (BLIP's tokenizer lower-cases): strip exactly that.
        prefix = self.tokenizer.decode(self.tokenizer(prompt)["input_ids"], skip_special_tokens=True) if prompt else ""
        return [(caption[len(prefix) :] if caption.startswith(prefix) else caption).strip() for caption in captions]


class StableDiffusionGenerator:
    """Stable Diffusion images, one CPU generator per item seed, with the safety checker's verdict per image.

    Returns `(images, flags)`: PIL images (None where flagged) and `True/False` (None when the checker is off).
    """

    def __init__(self, settings: GenerationSettings, device: str | torch.device):
        diffusers = require("diffusers", "generate", "Generating synthetic images")

        self.settings = settings
        kwargs = {"revision": settings.generator_revision, "dtype": DTYPES[settings.dtype]}
        if not settings.safety_checker:
            kwargs.update(safety_checker=None, requires_safety_checker=False)
        self.pipeline = diffusers.StableDiffusionPipeline.from_pretrained(settings.generator, **kwargs)
        if settings.safety_checker and self.pipeline.safety_checker is None:
            raise InputError(
                f"{settings.generator} has no safety checker: the default keeps it on; pass --no-safety-checker to "
                "generate without one (flags are then recorded as unchecked)"
            )
        scheduler_class = SCHEDULERS[settings.scheduler]
        if scheduler_class:
            scheduler = getattr(diffusers, scheduler_class).from_config(self.pipeline.scheduler.config)
            self.pipeline.scheduler = scheduler
        self.pipeline.to(device)
        self.pipeline.set_progress_bar_config(disable=True)

    def __call__(self, captions: list[str], seeds: list[int]) -> tuple[list, list[bool | None]]:
        settings = self.settings
        output = self.pipeline(
            prompt=captions,
            num_inference_steps=settings.steps,
            guidance_scale=settings.guidance_scale,
            height=settings.height,
            width=settings.width,
            generator=[torch.Generator("cpu").manual_seed(seed) for seed in seeds],
        )
        flags = output.nsfw_content_detected
        if flags is None:
            return list(output.images), [None] * len(captions)
        flags = [bool(flag) for flag in flags]
        return [None if flag else image for image, flag in zip(output.images, flags)], flags


# ---------------------------------------------------------------------------------------------------- one shard
def png_bytes(image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def image_value(image: Any) -> dict:
    """A source image as a `datasets.Image` value: a path stays a path; bytes stay bytes."""
    if isinstance(image, str):
        return {"bytes": None, "path": image}
    if isinstance(image, dict):
        return {"bytes": image.get("bytes"), "path": image.get("path")}
    if isinstance(image, bytes):
        return {"bytes": image, "path": None}
    return {"bytes": png_bytes(image), "path": None}


def generate_shard(
    sources: list[SourceImage],
    captioner,
    generator,
    settings: GenerationSettings,
    provenance: dict,
    caption_batch_size: int,
    image_batch_size: int,
    progress=None,
) -> tuple[list[dict], list]:
    """The parquet rows of one shard (one per human caption, in row order) and the ids of unreadable images."""
    from ..data.sources import resolve_references
    from ..models.inputs import load_image

    decoded, unreadable = {}, []
    stored = resolve_references([source.image for source in sources])  # this shard's images, read together
    for position, source in enumerate(sources):
        try:
            decoded[position] = load_image(stored[position], source.image_id)
        except (OSError, ValueError, TypeError) as error:  # e.g. "image 1003 ('x.jpg') could not be decoded: ..."
            logger.warning(f"{error}: skipped, its {len(source.captions)} captions get no synthetic data")
            unreadable.append((position, str(error)))
    readable = sorted(decoded)
    synthetic_captions = {}
    for start in range(0, len(readable), caption_batch_size):
        batch = readable[start : start + caption_batch_size]
        for position, caption in zip(batch, captioner([decoded[p] for p in batch])):
            synthetic_captions[position] = caption
    items = [(p, row, sentid, caption) for p in readable for row, sentid, caption in sources[p].captions]
    synthetic_images, flags = {}, {}
    for start in range(0, len(items), image_batch_size):
        batch = items[start : start + image_batch_size]
        seeds = [item_seed(settings.global_seed, sentid) for _, _, sentid, _ in batch]
        images, batch_flags = generator([caption for *_, caption in batch], seeds)
        for (_, row, _, _), image, flag in zip(batch, images, batch_flags):
            synthetic_images[row] = None if image is None else {"bytes": png_bytes(image), "path": None}
            flags[row] = flag
        if progress is not None:
            progress.update(len(batch))
    errors = dict(unreadable)
    rows = []
    for position, source in enumerate(sources):
        for row, sentid, caption in source.captions:
            rows.append(
                {
                    "row": row,
                    "sentid": sentid,
                    "cocoid": source.image_id,
                    "image": image_value(stored[position]),
                    "caption": caption,
                    "synthetic_image": synthetic_images.get(row),
                    "synthetic_caption": synthetic_captions.get(position),
                    "split": source.split,
                    "seed": item_seed(settings.global_seed, sentid),
                    "safety_flagged": flags.get(row),
                    "error": errors.get(position),
                    **provenance,
                }
            )
        if progress is not None and position in errors:
            progress.update(len(source.captions))
    return rows, [sources[position].image_id for position, _ in unreadable]


def shard_features():
    """The parquet schema (with `datasets` features, so `load_dataset("parquet")` decodes both image columns)."""
    import datasets

    ids = datasets.Value("int64")  # Karpathy's sentid/cocoid, or row indices
    return datasets.Features(
        {
            "row": datasets.Value("int64"),
            "sentid": ids,
            "cocoid": ids,
            "image": datasets.Image(),
            "caption": datasets.Value("string"),
            "synthetic_image": datasets.Image(),
            "synthetic_caption": datasets.Value("string"),
            "split": datasets.Value("string"),
            "seed": datasets.Value("int64"),
            "safety_flagged": datasets.Value("bool"),
            "error": datasets.Value("string"),
            "captioner": datasets.Value("string"),
            "captioner_revision": datasets.Value("string"),
            "caption_decoding": datasets.Value("string"),
            "generator": datasets.Value("string"),
            "generator_revision": datasets.Value("string"),
            "scheduler": datasets.Value("string"),
            "steps": datasets.Value("int64"),
            "guidance_scale": datasets.Value("float64"),
            "height": datasets.Value("int64"),
            "width": datasets.Value("int64"),
            "dtype": datasets.Value("string"),
            "global_seed": datasets.Value("int64"),
        }
    )


# Rows per parquet row group: parquet's unit of random access, so a training batch reads about 8 synthetic images
# for each one it needs (3 MiB for Stable Diffusion's ~400 KiB PNGs), not the whole shard.
ROW_GROUP_ROWS = 8
IMAGE_COLUMNS = ("image", "synthetic_image")


def parquet_options(column_names: Iterable[str]) -> dict:
    """`pyarrow.parquet.write_table` options of a shard: small row groups, no dictionary for the image columns (PNG
    bytes never repeat)."""
    return {
        "row_group_size": ROW_GROUP_ROWS,
        "use_dictionary": [name for name in column_names if name not in IMAGE_COLUMNS],
    }


def write_parquet(rows: list[dict], path: Path):
    """One shard as parquet, its schema carrying the `datasets` features (both image columns are `datasets.Image`)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = shard_features().arrow_schema
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), str(path), **parquet_options(schema.names))


def rewrite_row_groups(path: Path) -> bool:
    """Rewrite one parquet shard with [`parquet_options`] (atomically; one old row group in memory at a time) if
    any of its row groups holds more than `ROW_GROUP_ROWS` rows; returns whether it did. Shards written before
    `ROW_GROUP_ROWS` existed hold one row group, which training would read whole for every row it takes.
    A shard's checksum record (docs/concepts/recovery.md), when it has one, is rewritten with it."""
    import pyarrow.parquet as pq

    from ..jobs import atomic_path, record_path, write_recorded

    handle = pq.ParquetFile(path)
    metadata = handle.metadata
    if all(metadata.row_group(group).num_rows <= ROW_GROUP_ROWS for group in range(metadata.num_row_groups)):
        return False

    def write(temporary: Path):
        schema = handle.schema_arrow
        dictionary_columns = parquet_options(schema.names)["use_dictionary"]
        with pq.ParquetWriter(str(temporary), schema, use_dictionary=dictionary_columns) as writer:
            for group in range(metadata.num_row_groups):
                writer.write_table(handle.read_row_group(group), row_group_size=ROW_GROUP_ROWS)

    if record_path(path).is_file():
        write_recorded(Path(path), write, rows=metadata.num_rows)
    else:
        with atomic_path(Path(path)) as temporary:
            write(temporary)
    return True


def read_shard_ids(path: Path) -> Iterable[dict]:
    """The id and status columns of a parquet shard (the images stay on disk)."""
    import pyarrow.parquet as pq

    return pq.read_table(path, columns=["row", "sentid", "cocoid", "safety_flagged", "error"]).to_pylist()


# ---------------------------------------------------------------------------------------------------- the job
def summarize(job: ShardedJob, num_images: int, num_rows: int) -> dict:
    """Check every row is in the shards exactly once and count what was generated, flagged and skipped."""
    generated, flagged, unreadable_ids = 0, 0, []
    for row in job.merged_rows(num_images, read_shard_ids, num_rows=num_rows):
        if row["error"] is not None:
            if not unreadable_ids or unreadable_ids[-1] != row["cocoid"]:
                unreadable_ids.append(row["cocoid"])
        elif row["safety_flagged"]:
            flagged += 1
        else:
            generated += 1
    return {
        "num_rows": num_rows,
        "num_images": num_images,
        "num_shards": job.num_shards(num_images),
        "synthetic_images": generated,
        "safety_flagged": flagged,
        "unreadable_images": len(unreadable_ids),
        "unreadable_image_ids": unreadable_ids,
        "shards": str(job.shard_dir / "*.parquet"),
    }


def load_synthetic_dataset(output_dir: str | Path, usable_only: bool = True):
    """The generated shards as one `datasets.Dataset` (all columns; images decode to PIL on access).

    With `usable_only`, rows that cannot train (unreadable real image, flagged or missing synthetic image) are
    dropped, so the result has the four training columns filled on every row.

    Example:

    ```python
    >>> dataset = load_synthetic_dataset("synthetic/")
    >>> dataset.column_names[:4]
    ['row', 'sentid', 'cocoid', 'image']
    ```
    """
    import datasets

    files = sorted(str(path) for path in (Path(output_dir) / "shards").glob("shard-*.parquet"))
    if not files:
        raise FileNotFoundError(f"{output_dir}: no shards/shard-*.parquet (run scripts/generate_synthetic.py first)")
    dataset = datasets.load_dataset("parquet", data_files=files, split="train")
    if usable_only:
        columns = ["error", "synthetic_image", "synthetic_caption"]
        probe = dataset.select_columns(columns).cast_column("synthetic_image", datasets.Image(decode=False))
        keep = [
            index
            for index, row in enumerate(probe)
            if row["error"] is None and row["synthetic_image"] is not None and row["synthetic_caption"] is not None
        ]
        dataset = dataset.select(keep)
    return dataset


__all__ = [
    "DEFAULT_CAPTIONER",
    "DEFAULT_GENERATOR",
    "SCHEDULERS",
    "BlipCaptioner",
    "GenerationSettings",
    "SourceImage",
    "StableDiffusionGenerator",
    "dataset_images",
    "generate_shard",
    "item_seed",
    "karpathy_images",
    "load_synthetic_dataset",
    "resolve_revision",
    "rewrite_row_groups",
    "summarize",
    "write_parquet",
]
