"""PAC-S++ Space: compare candidate captions of one image with CLIP-S, PAC-S++ and RefPAC-S++.

Every score comes from the core: `modeling_pacs.loading.load_model` loads the models and `PACSModel.score` computes
the scores; this file only validates the request, calls the models and lays out the results.

Run it locally (offline, tiny model with random weights; `--model DIR` or `PACS_SPACE_MODEL=DIR` adds a local
PAC-S++ model directory as the default entry):

```bash
PACS_SPACE_TINY=1 python space/app.py --port 7860
```

Call it from Python:

```python
>>> from gradio_client import Client, handle_file
>>> client = Client("http://127.0.0.1:7860/")
>>> best, table, chart, details = client.predict(
...     handle_file("space/examples/red_circle.png"), "a red circle\\na blue square", "a red disc", "ViT-B/32",
...     api_name="/score")
>>> details["results"][0]["caption"]
```
"""

import argparse
import importlib.util
import ipaddress
import logging
import math
import os
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import PIL.Image

from modeling_pacs import PACSModel, results
from modeling_pacs.errors import InputError, UnsupportedOptionError
from modeling_pacs.evaluation.captions import evaluate_captions, java_available
from modeling_pacs.extras import require
from modeling_pacs.loading import check_media, check_scoring_mode, load_model
from modeling_pacs.model_sources import spec_for_model_name
from modeling_pacs.models.inputs import ImageInputError, load_image
from modeling_pacs.registry import (
    METRICS,
    RELEASES,
    SPACE_CHOICES,
    TINY_ALIASES,
    parse_tiny_alias,
    spec_of,
    tiny_alias,
)

gr = require("gradio", "demo", "The Space")
pd = require("pandas", "demo", "The Space")
logger = logging.getLogger("pacs_space")

# Offline mode: a random 32-dim model stands in for the real ones (for tests and machines without the Hub).
TINY_ENVIRONMENT_VARIABLE = "PACS_SPACE_TINY"
TINY_CHOICE = "tiny (random weights)"
# Model selector entry -> (CLIP-S model, PAC-S++ model), both as `load_model` names.
HUB_CHOICES = SPACE_CHOICES
TINY_CHOICES = {TINY_CHOICE: (tiny_alias("clip_s"), tiny_alias())}
# A local PAC-S++ model directory to offer first in the selector (a Space or a user serving their own model).
LOCAL_MODEL_ENVIRONMENT_VARIABLE = "PACS_SPACE_MODEL"
CLIP_S_NAME = "CLIP-S"

# Request limits: each keeps one request to a few seconds of CPU and stops abuse of a shared Space.
MAX_CAPTIONS = 16
MAX_REFERENCES = 10
MAX_CAPTION_CHARACTERS = 300
MAX_IMAGE_PIXELS = 4096 * 4096
# The engine resizes the short side to the model's input size, so a 1x15000 strip would become 224x3360000 pixels:
# with this bound, the resized image is at most 20 times the crop, and the pixel limit bounds the memory.
MAX_ASPECT_RATIO = 20
# Decoders a visitor may reach: common photo formats only (PIL's EPS plugin, for one, runs Ghostscript).
IMAGE_FORMATS = ("PNG", "JPEG", "WEBP", "GIF", "BMP", "TIFF")  # JPEG includes multi-picture (MPO) files
# The raw textboxes, before splitting into lines: bounds the work spent on a request that is refused anyway.
MAX_TEXTBOX_CHARACTERS = 20_000
MAX_MODEL_NAME_CHARACTERS = 1_000
# One message for every image path the Space refuses or cannot open: whether a server path exists never leaks.
REFUSED_IMAGE_MESSAGE = (
    "the image is not a file uploaded to this Space: upload it again (API clients: send it with "
    "gradio_client.handle_file, which uploads it first)"
)
MAX_FILE_SIZE = "10mb"
# What to do when a Hub model cannot be loaded on the operator's machine (shown once, in the page's message box).
OFFLINE_FIX = (
    "In this Space: connect this machine to the internet once (the model is then cached), or run the Space "
    "offline with `python space/app.py --tiny` (random weights) or `--model DIR` (a local PAC-S++ model directory)."
)
# Requests scored at once; the rest wait in the queue (CPU Spaces gain nothing from more).
CONCURRENCY_ENVIRONMENT_VARIABLE = "PACS_SPACE_CONCURRENCY"
DEFAULT_CONCURRENCY_LIMIT = 2
MAX_QUEUE_SIZE = 64
# Uploads older than this are deleted (checked as often): a long-running Space does not fill its disk.
UPLOAD_LIFETIME_SECONDS = 3600

EXAMPLES_DIRECTORY = Path(__file__).resolve().parent / "examples"
EXAMPLES = [
    [
        str(EXAMPLES_DIRECTORY / "red_circle.png"),
        "a red circle on a white background\na blue square\na photo of a dog",
        "a red disc in the middle of a white image",
    ],
    [
        str(EXAMPLES_DIRECTORY / "blue_square.png"),
        "a blue square on a pale yellow background\na red circle\na green triangle",
        "a dark blue square in the centre",
    ],
    [
        str(EXAMPLES_DIRECTORY / "green_triangle.png"),
        "a green triangle on a black background\na photo of a dog\na blue square",
        "",
    ],
]


def tiny_mode_enabled() -> bool:
    """`PACS_SPACE_TINY=1` (or `true`/`yes`) selects the offline tiny model."""
    return os.environ.get(TINY_ENVIRONMENT_VARIABLE, "").strip().lower() in ("1", "true", "yes")


def is_public(host: str) -> bool:
    """A Space on the Hub (`SPACE_ID` is set) or a server reachable from other machines (a non-loopback `host`).

    Public servers refuse typed model paths and show no server-side error details.
    """
    if "SPACE_ID" in os.environ:
        return True
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to any interface
        return True


def concurrency_limit() -> int:
    """`PACS_SPACE_CONCURRENCY` (requests scored at once, default 2), checked to be a whole number of at least 1."""
    text = os.environ.get(CONCURRENCY_ENVIRONMENT_VARIABLE, str(DEFAULT_CONCURRENCY_LIMIT))
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(
            f"{CONCURRENCY_ENVIRONMENT_VARIABLE}={text!r} is not a whole number of at least 1: set it to the number "
            f"of requests to score at once (default {DEFAULT_CONCURRENCY_LIMIT})"
        )
    return value


def shown(text: str, limit: int = 40) -> str:
    """User text quoted in a message, cut to `limit` characters. Messages are plain text: the page shows them in a
    text box (`page_handler`), API clients read them as they are."""
    return text if len(text) <= limit else text[:limit] + "..."


# ---------------------------------------------------------------------------------------------------- models
@dataclass
class ScoringModels:
    """The two models behind one selector entry: a CLIP for CLIP-S (may be missing) and a PAC-S++ model."""

    clip_s: PACSModel | None
    pac_s: PACSModel
    clip_s_unavailable_reason: str | None = None


def local_model_entry(local_model: str, public: bool) -> str:
    """How the selector shows the operator's `--model` directory: its path when run locally; on a public Space only
    its folder's name, so the page never shows a server path."""
    return f"local model: {Path(local_model).name}" if public else local_model


class ModelCache:
    """Loads each selector entry once; concurrent first requests wait for one load instead of loading twice.

    Typed local directories are accepted only when `allow_typed_paths` is set: on a public Space a visitor must not
    probe or load the server's files. `local_model` (chosen by whoever runs the app) is always accepted.
    """

    def __init__(self, choices: dict[str, tuple[str, str]], local_model: str | None, allow_typed_paths: bool):
        self.choices = choices
        self.local_model = local_model
        self.allow_typed_paths = allow_typed_paths
        # The selector entry of the operator's model: its path locally, its folder's name on a public Space.
        self.local_entry = local_model_entry(local_model, public=not allow_typed_paths) if local_model else None
        self.loaded: dict[str, ScoringModels] = {}
        # Each model once per process, whichever entries or compared metrics name it (`load_model` name -> model).
        self.models: dict[str, PACSModel] = {}
        # One lock per entry and per model: a slow load (the Hub retrying) never holds up requests for models already
        # loaded.
        self.locks: dict[str, threading.Lock] = {}
        self.model_locks: dict[str, threading.Lock] = {}
        self.locks_lock = threading.Lock()

    def get(self, choice: str) -> ScoringModels:
        """The models of `choice`: a selector entry or a local model directory."""
        choice = (choice or "").strip()
        if self.local_model and choice == self.local_entry:
            choice = self.local_model
        if choice not in self.choices and choice != self.local_model and not self.allow_typed_paths:
            raise gr.Error(
                f"model '{shown(choice)}' is not one of {sorted(self.choices)}: typed model paths are disabled on a "
                "public Space (run the app yourself to score with a local model)",
                title="Unknown model",
            )
        with self.locks_lock:
            lock = self.locks.setdefault(choice, threading.Lock())
        with lock:
            if choice not in self.loaded:
                self.loaded[choice] = self.load(choice)
            return self.loaded[choice]

    def load(self, choice: str) -> ScoringModels:
        # Messages name the selector entry: on a public Space, the operator's model by its folder's name only.
        label = self.local_entry if self.local_model and choice == self.local_model else choice
        if choice in self.choices:
            clip_s_name, pac_s_name = self.choices[choice]
            return ScoringModels(clip_s=self.model(clip_s_name, choice), pac_s=self.model(pac_s_name, choice))
        if not Path(choice).expanduser().is_dir():
            raise gr.Error(
                f"model '{shown(label)}' is neither one of {sorted(self.choices)} nor an existing local model "
                "directory: pick an entry of the list or type the path of a PAC-S++ model directory",
                title="Unknown model",
            )
        pac_s = self.model(str(Path(choice).expanduser()), label)
        # A model names the CLIP it was trained from (`base_model_id`, Polos' `clip_model_id`); one naming none
        # (Pearl, with its own CLIP among its encoders) scores on its own.
        clip_model_id = getattr(pac_s.config, "base_model_id", None) or getattr(pac_s.config, "clip_model_id", None)
        if clip_model_id is None:
            reason = f"{spec_of(pac_s).display_name} models score on their own"
            return ScoringModels(clip_s=None, pac_s=pac_s, clip_s_unavailable_reason=reason)
        if getattr(pac_s.config, "variant", None) == "clip_s":
            raise gr.Error(
                f"'{shown(label)}' is a CLIP-S model: type the directory of a PAC-S or PAC-S++ model (CLIP-S is "
                "then computed with the CLIP named by its config's base_model_id)",
                title="Not a PAC-S++ model",
            )
        # A local PAC-S++ model names the CLIP it was trained from; CLIP-S uses that CLIP when it can be loaded.
        try:
            clip_s = load_model(clip_model_id)
        except (OSError, ValueError) as error:
            reason = str(error) if self.allow_typed_paths else "its CLIP could not be loaded on this server"
            if not self.allow_typed_paths:
                logger.warning("CLIP-S of %r is not available: %s", choice, error)
            return ScoringModels(clip_s=None, pac_s=pac_s, clip_s_unavailable_reason=reason)
        return ScoringModels(clip_s=clip_s, pac_s=pac_s)

    def model(self, name: str, choice: str) -> PACSModel:
        """The model `load_model(name)`, loaded once per process (a failed load is not kept: a retry loads)."""
        with self.locks_lock:
            lock = self.model_locks.setdefault(name, threading.Lock())
        with lock:
            if name not in self.models:
                spec = spec_for_model_name(name)
                if spec is not None and spec.capabilities.not_in_space:
                    raise gr.Error(
                        f"'{shown(choice)}' is a {spec.display_name} model, which this app does not serve: "
                        f"{spec.capabilities.not_in_space}",
                        title="Not served here",
                    )
                self.models[name] = self.load_or_explain(name, choice)
            return self.models[name]

    def load_or_explain(self, name: str, choice: str) -> PACSModel:
        """`load_model(name)`; a failure is a `gr.Error` with the reason (public Space: logged, not shown)."""
        try:
            return load_model(name)
        except (
            Exception
        ) as error:  # any damage (bad JSON, a truncated safetensors file): nothing is cached, a retry loads
            if self.allow_typed_paths:
                message = f"could not load model '{shown(name, limit=200)}': {error}"
                if not Path(name).expanduser().is_dir():  # a Hub model: the usual cause is a machine offline
                    message += f"\n{OFFLINE_FIX}"
            else:  # the reason names server paths and Hub internals
                incident = uuid.uuid4().hex[:8]
                logger.error("incident %s: could not load model %r: %s", incident, name, error)
                message = (
                    f"model '{shown(choice)}' is not available on this server right now (incident {incident}, "
                    "logged): pick another entry or try again later"
                )
            raise gr.Error(message, title="Model not available") from error


# ---------------------------------------------------------------------------------------------------- requests
@dataclass
class ScoreRequest:
    """A validated request: the decoded RGB image, the candidate captions and the references (may be empty)."""

    image: PIL.Image.Image
    captions: list[str]
    references: list[str]


def split_lines(text: str | None, what: str) -> list[str]:
    """Non-blank lines of a textbox, stripped; a `gr.Error` when the box holds something else than text."""
    if text is None:
        return []
    if not isinstance(text, str):
        raise gr.Error(f"the {what}s must be text (one per line), got {type(text).__name__}", title=f"Invalid {what}s")
    if len(text) > MAX_TEXTBOX_CHARACTERS:
        raise gr.Error(
            f"the {what}s box holds {len(text)} characters; the limit is {MAX_TEXTBOX_CHARACTERS}: remove some",
            title=f"Too many {what}s",
        )
    return [line.strip() for line in text.splitlines() if line.strip()]


def check_texts(texts: list[str], what: str, limit: int):
    """Raise a `gr.Error` naming the first violated limit on the number or length of `texts`."""
    if len(texts) > limit:
        raise gr.Error(
            f"got {len(texts)} {what}s; the limit is {limit}: remove {len(texts) - limit} of them",
            title=f"Too many {what}s",
        )
    for index, text in enumerate(texts, start=1):
        if len(text) > MAX_CAPTION_CHARACTERS:
            raise gr.Error(
                f"{what} {index} ('{shown(text)}') is {len(text)} characters long; the limit is "
                f"{MAX_CAPTION_CHARACTERS}: shorten it",
                title=f"{what.capitalize()} too long",
            )


def uploaded_path(image: object) -> tuple[str, str]:
    """The real path and the display name of an image uploaded to this server, else one neutral `gr.Error`.

    The handler runs without gradio's preprocessing (which would decode the image before the limits are checked), so
    it checks what gradio would: the path must lie in gradio's upload folder. Every other path (a server file, a
    folder, a missing file, `..`, a link out of the folder, a URL) gets the same message, whether it exists or not.
    """
    if image is None or (isinstance(image, dict) and not image.get("path")):
        raise gr.Error("upload an image first (or click one of the examples below)", title="No image")
    refused = gr.Error(REFUSED_IMAGE_MESSAGE, title="Image not accepted")
    if not isinstance(image, dict) or not isinstance(image["path"], str):
        raise refused
    try:
        path = os.path.realpath(image["path"])  # resolves `..` and links before the containment check
        folder = os.path.realpath(gr.utils.get_upload_folder())
        inside = os.path.commonpath([folder, path]) == folder and path != folder
    except ValueError as error:  # a NUL byte, or a relative path on another drive
        raise refused from error
    if not inside or not os.path.isfile(path):
        raise refused
    name = image.get("orig_name")
    name = name if isinstance(name, str) and name.strip() else os.path.basename(path)
    return path, name


def check_image(image: object) -> PIL.Image.Image:
    """The uploaded image, decoded to RGB; a `gr.Error` when there is none, it is refused, unreadable or too large.

    `image` is the uploaded file as gradio stores it (`{"path": ..., "orig_name": ...}`, in gradio's upload folder).
    The size is read from the header before anything is decoded: decoding and resizing then cost at most
    `MAX_IMAGE_PIXELS` pixels and a resized image at most `MAX_ASPECT_RATIO` times the model's input.
    """
    path, name = uploaded_path(image)
    not_an_image = gr.Error(
        f"the uploaded file '{shown(name)}' could not be read as an image: upload a PNG, JPEG, WebP, GIF, BMP or "
        "TIFF file",
        title="Not an image",
    )
    PIL.Image.init()  # registers every plugin: `formats` below may only name registered ones
    try:
        opened = PIL.Image.open(path, formats=IMAGE_FORMATS)  # reads the header only
    except PIL.Image.DecompressionBombError as error:
        raise gr.Error(
            f"the image '{shown(name)}' is far too large (over {PIL.Image.MAX_IMAGE_PIXELS / 1e6:.0f} megapixels); "
            f"the limit is {MAX_IMAGE_PIXELS / 1e6:.1f}: downscale it and upload it again",
            title="Image too large",
        ) from error
    except (OSError, ValueError, SyntaxError) as error:  # SyntaxError: what some PIL plugins raise on bad headers
        raise not_an_image from error
    with opened:
        width, height = opened.size
        if width * height > MAX_IMAGE_PIXELS:
            raise gr.Error(
                f"the image '{shown(name)}' is {width}x{height} = {width * height / 1e6:.1f} megapixels; the limit "
                f"is {MAX_IMAGE_PIXELS / 1e6:.1f}: downscale it and upload it again",
                title="Image too large",
            )
        if width < 1 or height < 1 or max(width, height) > MAX_ASPECT_RATIO * min(width, height):
            raise gr.Error(
                f"the image '{shown(name)}' is {width}x{height} pixels; the longer side may be at most "
                f"{MAX_ASPECT_RATIO} times the shorter: crop it (the models see only its centre square) and upload "
                "it again",
                title="Image too narrow",
            )
        try:
            opened.load()
            return load_image(opened, name=f"the image '{shown(name)}'")  # the engine's one image validator
        except ImageInputError as error:  # a mode or values the image rules refuse
            raise gr.Error(str(error), title="Image refused") from error
        except (OSError, ValueError, SyntaxError) as error:  # truncated or corrupt data behind a valid header
            raise not_an_image from error


def check_model(model: object) -> str:
    """The selector's value, stripped; a `gr.Error` for anything else than a non-blank string."""
    if not isinstance(model, str) or len(model) > MAX_MODEL_NAME_CHARACTERS:
        raise gr.Error(
            f"the model must be the name of a selector entry (at most {MAX_MODEL_NAME_CHARACTERS} characters)",
            title="Unknown model",
        )
    if not model.strip():  # a blank path would name the server's current directory
        raise gr.Error("pick a model in the list", title="No model")
    return model.strip()


def parse_texts(captions_text: object, references_text: object) -> tuple[list[str], list[str]]:
    """The candidate captions (at least one) and references of a form, one per line, within the Space's limits."""
    captions = split_lines(captions_text, "caption")
    if not captions:
        raise gr.Error("enter at least one candidate caption, one per line", title="No captions")
    check_texts(captions, "caption", MAX_CAPTIONS)
    references = split_lines(references_text, "reference")
    check_texts(references, "reference", MAX_REFERENCES)
    return captions, references


def parse_request(image: object, captions_text: object, references_text: object) -> ScoreRequest:
    """Validate the form inputs; every violation is a `gr.Error` the user reads in the page."""
    captions, references = parse_texts(captions_text, references_text)
    return ScoreRequest(image=check_image(image), captions=captions, references=references)


# ---------------------------------------------------------------------------------------------------- scoring
def scoring_modes(spec) -> tuple[str, ...]:
    """The scoring modes a visitor may choose for a metric: its `Capabilities.scoring_modes` when it has several."""
    modes = spec.capabilities.scoring_modes if spec is not None else ()
    return modes if len(modes) > 1 else ()


def check_scoring_mode_choice(mode: object, spec) -> str | None:
    """The chosen scoring mode (None: the model's default, for an empty choice); a `gr.Error` naming the valid ones
    for a mode the metric does not have, or for any mode of a metric without scoring modes."""
    if mode is None or (isinstance(mode, str) and not mode.strip()):
        return None
    if not isinstance(mode, str):
        raise gr.Error("the scoring mode must be a name such as 'per_item'", title="Unknown scoring mode")
    try:
        return check_scoring_mode(spec, mode.strip())
    except (UnsupportedOptionError, InputError) as error:
        raise gr.Error(str(error).replace(mode.strip(), shown(mode.strip())), title="Unknown scoring mode") from None


def mode_radio(modes: tuple[str, ...], label: str, elem_id: str) -> gr.Radio:
    """The scoring-mode choice: the first metric's modes, its first (default) mode chosen, hidden without modes."""
    return gr.Radio(
        choices=list(modes),
        value=modes[0] if modes else None,
        visible=bool(modes),
        label=label,
        info="per_item: each caption alone (the default); official: the authors' batching",
        elem_id=elem_id,
    )


def mode_choice_update(spec) -> dict:
    """The "Scoring mode" choice for a metric: shown with its modes (the first, its default, chosen) only for a
    metric with several; hidden and empty otherwise."""
    modes = scoring_modes(spec)
    return gr.update(choices=list(modes), value=modes[0] if modes else None, visible=bool(modes))


def score_request(request: ScoreRequest, models: ScoringModels, mode: str | None = None) -> pd.DataFrame:
    """Per-caption scores, best first: one CLIP-S call and one PAC-S++ call (with references when given); `mode` is
    the scoring mode of a metric that has several (None: its default).

    The image is passed once per caption; `PACSModel.score` encodes repeated images once.
    """
    images = [request.image] * len(request.captions)
    references = [request.references] * len(request.captions) if request.references else None
    spec = spec_of(models.pac_s)
    if spec.capabilities.needs_references and references is None:
        raise gr.Error(
            f"{spec.display_name} is a reference-based metric: enter at least one reference", title="No references"
        )
    options = {} if mode is None else {"mode": mode}
    pac_s_output = models.pac_s.score(images, request.captions, references=references, **options)
    table = pd.DataFrame({"caption": request.captions})
    if models.clip_s is not None:
        table[CLIP_S_NAME] = models.clip_s.score(images, request.captions).scores.tolist()
    for column in results.score_columns(results.result_columns(models.pac_s, pac_s_output, spec)):
        table[column.label] = column.values
        ranked_by = column.label  # the last score: the reference-based one where references are given
    check_finite(table)
    table = table.sort_values(ranked_by, ascending=False, kind="stable").reset_index(drop=True)
    table.insert(0, "rank", range(1, len(table) + 1))
    table.attrs["ranked_by"] = ranked_by
    truncated = getattr(pac_s_output, "truncated_tokens", None)
    table.attrs["truncated"] = 0 if truncated is None else int((truncated > 0).sum())
    # Polos and Pearl have no piecewise mode: they name their own fix (`SHORTEN_FIX`).
    table.attrs["truncation_fix"] = getattr(models.pac_s, "truncation_fix", None)
    table.attrs["mode"] = getattr(pac_s_output, "mode", None) if scoring_modes(spec) else None
    return table


def score_columns(table: pd.DataFrame) -> list[str]:
    return [column for column in table.columns if column not in ("rank", "caption")]


def check_finite(table: pd.DataFrame):
    """A `gr.Error` naming the first score that is NaN or infinite: no such number is shown, ranked or sent."""
    for column in score_columns(table):
        for index, (caption, value) in enumerate(zip(table["caption"], table[column]), start=1):
            if not math.isfinite(value):
                logger.error("the model returned %s = %r for caption %d (%r)", column, value, index, caption)
                raise gr.Error(
                    f"{column} of caption {index} ('{shown(caption)}') came out as {value}, not a number: the model "
                    "is faulty (this is logged); pick another model",
                    title="Could not score",
                )


def styled_table(table: pd.DataFrame):
    """The ranked table with the best caption's row (the first) highlighted and scores to four decimals."""
    highlight = "background-color: rgba(250, 204, 21, 0.35); font-weight: bold"

    def highlight_best(row: pd.Series) -> list[str]:
        return [highlight if row.name == 0 else "" for _ in row]

    scores = {column: "{:.4f}" for column in score_columns(table)}
    return table.rename(columns={"rank": "#"}).style.apply(highlight_best, axis=1).format(scores)


def chart_data(table: pd.DataFrame) -> pd.DataFrame:
    """Long format for the bar chart: one bar per (caption, score name), labelled `#01 · PAC-S++`.

    gr.BarPlot stacks bars that share an x value, and stacked scores would read as a sum, so every score gets its
    own x value; zero-padded ranks keep the plot's alphabetical x order equal to the ranking.
    """
    long = table.melt(id_vars=["rank"], value_vars=score_columns(table), var_name="score", value_name="value")
    long.insert(0, "bar", [f"#{rank:02d} · {score}" for rank, score in zip(long["rank"], long["score"])])
    return long.sort_values("bar", kind="stable").drop(columns="rank").reset_index(drop=True)


def summary_text(table: pd.DataFrame, models: ScoringModels | None, random_weights: bool) -> str:
    """The best caption, what it was ranked by, and notes the user needs to read the numbers right.

    Plain text, shown in a text box: a caption is never rendered as Markdown or HTML.
    """
    ranked_by = table.attrs["ranked_by"]
    best = table.iloc[0]
    lines = [f"“{best['caption']}”", f"{ranked_by} {best[ranked_by]:.4f} (ranked by {ranked_by})"]
    if models is not None and models.clip_s_unavailable_reason:
        lines.append(f"CLIP-S is not shown: {models.clip_s_unavailable_reason}")
    if table.attrs.get("truncated") and table.attrs.get("truncation_fix"):
        lines.append(
            f"{table.attrs['truncated']} caption(s) are longer than a text encoder's context and were truncated: "
            f"their scores read only the first tokens ({table.attrs['truncation_fix']})."
        )
    elif table.attrs.get("truncated"):
        lines.append(
            f"{table.attrs['truncated']} caption(s) are longer than the text encoder's context (77 tokens for CLIP) "
            "and were truncated: their scores read only the first tokens (the pacs-pp library reads them whole "
            "with long_captions='chunks', or use a Long-CLIP model)."
        )
    if random_weights:
        lines.append("Tiny model with random weights: these numbers are meaningless.")
    return "\n".join(lines)


def results_json(table: pd.DataFrame, model: str) -> dict:
    """The ranked results as plain JSON (the `details` output of the `/score` endpoint)."""
    details = {"model": model, "ranked_by": table.attrs["ranked_by"], "results": table.to_dict(orient="records")}
    if table.attrs.get("mode"):  # a metric with scoring modes: the one that scored
        details["mode"] = table.attrs["mode"]
    return details


def page_handler(handler, num_outputs: int):
    """The page's version of an endpoint: a `gr.Error` becomes one plain-text message in the message box (first
    output) and empties the results, instead of a toast rendered as HTML and an "Error" badge on every output."""

    def handle(*arguments):
        try:
            results = handler(*arguments)
        except gr.Error as error:
            text = str(error.message) if error.title in ("Error", None) else f"{error.title}: {error.message}"
            return gr.update(value=text, visible=True), *([None] * num_outputs)
        return gr.update(value="", visible=False), *results

    handle.__name__ = f"{handler.__name__}_in_page"
    return handle


def run_guarded(handler, *arguments):
    """Run a request handler: its `gr.Error`s reach the visitor; anything else is logged with an incident id and
    shown without its class, message or any path (they may name server files)."""
    try:
        return handler(*arguments)
    except gr.Error:
        raise
    except MemoryError as error:
        logger.exception("out of memory scoring a request")
        raise gr.Error(
            "the server ran out of memory scoring this request: try again later, with a smaller image or fewer "
            "captions",
            title="Out of memory",
        ) from error
    except Exception as error:
        incident = uuid.uuid4().hex[:8]
        logger.exception("incident %s: scoring failed", incident)
        raise gr.Error(
            f"could not score this request: internal error (incident {incident}, logged on the server); try "
            "again, and report the incident if it persists",
            title="Internal error",
        ) from error


# ---------------------------------------------------------------------------------------------------- video tab
# Video tab: frames sampled per clip (decoding seeks to them, so the clip's length does not matter).
MAX_VIDEO_FRAMES = 32
VIDEO_FILE_TYPES = (".mp4", ".webm", ".mkv", ".avi", ".mov")


def build_video_tab(cache: ModelCache, selector_entries: list[str]):
    """The "Video captions" tab and its `/score_video` endpoint: a short clip, candidate captions, optional
    references; per caption the EMScore-style video metric of `PACSModel.score_videos` (docs/spec/pacs.md#video): P, R,
    F and coarse against the frames (Eq. 13), and against the references with the combined score (Eq. 14) when given.
    """
    from modeling_pacs.models.video import VideoFile

    def score_video(video: str | None, captions_text: str, references_text: str, num_frames: float, model: str):
        """Score candidate captions (one per line) of a video clip, with optional references (one per line).

        Returns the best caption (as text), the per-caption table and the results as JSON.
        """
        return run_guarded(score_video_form, video, captions_text, references_text, num_frames, model)

    def score_video_form(video, captions_text, references_text, num_frames, model):
        model = check_model(model)
        if isinstance(num_frames, bool) or not isinstance(num_frames, (int, float)) or num_frames != int(num_frames):
            raise gr.Error(f"frames must be a whole number between 1 and {MAX_VIDEO_FRAMES}", title="Bad frame count")
        if not video:
            raise gr.Error("upload a video clip first (mp4, webm, mkv, avi or mov)", title="No video")
        refused = gr.Error(REFUSED_IMAGE_MESSAGE.replace("the image", "the video"), title="Video not accepted")
        if not isinstance(video, str):
            raise refused
        try:
            video, _ = uploaded_path({"path": video})  # only files uploaded to this server, as for images
        except gr.Error:
            raise refused from None
        captions, references = parse_texts(captions_text, references_text)
        if not 1 <= int(num_frames) <= MAX_VIDEO_FRAMES:
            raise gr.Error(f"frames must be between 1 and {MAX_VIDEO_FRAMES}", title="Bad frame count")
        try:
            with VideoFile(video) as clip:  # reads packets only: size and frame count before any decoding
                width, height = clip.stream.width, clip.stream.height
        except (OSError, ValueError, ImportError) as error:
            raise gr.Error(str(error).replace(video, Path(video).name), title="Not a readable video") from error
        if width * height > MAX_IMAGE_PIXELS:
            raise gr.Error(f"the video is {width}x{height}: downscale it and upload it again", title="Video too large")
        models = cache.get(model)
        try:
            check_media(spec_of(models.pac_s), "video")
        except UnsupportedOptionError as error:
            raise gr.Error(str(error), title="Not a video metric") from error
        free_name, ref_name = models.pac_s.config.score_names
        videos = [video] * len(captions)
        output = models.pac_s.score_videos(
            videos,
            captions,
            references=[references] * len(captions) if references else None,
            num_frames=int(num_frames),
        )
        table = pd.DataFrame({"caption": captions})
        if models.clip_s is not None:
            table[f"{CLIP_S_NAME} video"] = models.clip_s.score_videos(
                videos, captions, num_frames=int(num_frames)
            ).scores
        table[f"{free_name} video"] = output.video_scores.tolist()
        for column in ("precision", "recall", "f", "coarse"):
            table[f"video {column}"] = getattr(output, f"video_{column}").tolist()
        ranked_by = f"{free_name} video"
        if references:
            table[f"{ref_name} video"] = output.scores.tolist()
            for column in ("precision", "recall", "f", "coarse"):
                table[f"reference {column}"] = getattr(output, f"reference_{column}").tolist()
            ranked_by = f"{ref_name} video"
        table = table.sort_values(ranked_by, ascending=False, kind="stable").reset_index(drop=True)
        table.insert(0, "rank", range(1, len(table) + 1))
        table.attrs["ranked_by"] = ranked_by
        return (
            summary_text(table, models, random_weights=model == TINY_CHOICE),
            styled_table(table),
            results_json(table, model),
        )

    with gr.Tab("Video", id="video"):
        gr.Markdown(
            "Upload a short clip and candidate captions: each caption is matched to sampled frames token by token "
            "(precision, recall, F) and as a whole (coarse); the score is `(coarse + F) / 2`, averaged with the "
            "same against the references when given (EMScore-style, as in the PAC-S++ paper)."
        )
        with gr.Row():
            with gr.Column():
                video = gr.File(label="Video clip", file_types=list(VIDEO_FILE_TYPES), type="filepath")
                frames = gr.Slider(1, MAX_VIDEO_FRAMES, value=10, step=1, label="Frames sampled (VATEX-EVAL: 10)")
                model = gr.Dropdown(choices=selector_entries, value=selector_entries[0], label="Model")
            with gr.Column():
                captions = gr.Textbox(lines=5, label="Candidate captions (one per line)", elem_id="video-captions")
                references = gr.Textbox(lines=3, label="Reference captions (optional)", elem_id="video-references")
                button = gr.Button("Score video captions", variant="primary", elem_id="score-video-button")
        message = gr.Textbox(label="Message", lines=2, interactive=False, visible=False, elem_id="video-message")
        best = gr.Textbox(label="Best caption", lines=2, interactive=False, elem_id="best-video-caption")
        table = gr.Dataframe(label="Captions, per-caption P/R/F/coarse", interactive=False, wrap=True)
        with gr.Accordion("Results as JSON", open=False):
            details = gr.JSON(label="details")
        inputs = [video, captions, references, frames, model]
        button.click(
            page_handler(score_video, 3),
            inputs=inputs,
            outputs=[message, best, table, details],
            api_visibility="private",
        )
        # The API endpoint: the same scoring, its errors raised to the client (the page shows them as text).
        gr.Button(visible=False).click(
            score_video, inputs=inputs, outputs=[best, table, details], api_name="score_video"
        )


# ---------------------------------------------------------------------------------------------------- compare tab
# The n-gram metrics a request can afford, offered only where Java runs (pycocoevalcap's PTB tokenizer is a Java
# program): BLEU and ROUGE-L score each caption on its own. CIDEr-D is left out: its IDF comes from the corpus'
# references, which one image's captions share, so every n-gram weighs 0 and every caption scores 0. METEOR and SPICE
# start a large Java program per call.
SPACE_NGRAM_METRICS = ("bleu", "rouge_l")


def ngram_metrics_available() -> bool:
    """Whether pycocoevalcap is installed and `java -version` runs: then the compare tab offers BLEU and ROUGE-L."""
    return importlib.util.find_spec("pycocoevalcap") is not None and java_available()


def metric_choices(entries: dict[str, tuple[str, str]], local_entry: str | None, ngrams: bool) -> dict[str, str]:
    """The compare tab's metrics: value (the name `pacs-pp evaluate-captions --metrics` takes; the operator's model by
    its selector entry) -> the text the list shows. The model metrics are those of the selector's `entries` (tiny
    ones: every tiny model of the CLIP backbone that the app serves), the first entry's pair first."""
    names = [name for pair in entries.values() for name in pair]
    tiny = parse_tiny_alias(names[0]) is not None
    if tiny:
        names += [
            alias
            for alias in TINY_ALIASES
            if parse_tiny_alias(alias)[0] == "clip" and not spec_for_model_name(alias).capabilities.not_in_space
        ]
    choices = {local_entry: f"{local_entry} (this server's model)"} if local_entry else {}
    for name in dict.fromkeys(names):
        if tiny:
            choices[name] = f"{name} (tiny model, random weights)"
        else:
            choices[name] = f"{name}: {RELEASES[name][1].description}"
    if ngrams:
        for name in SPACE_NGRAM_METRICS:
            choices[name] = f"{name}: {METRICS[name].display_name} (pycocoevalcap; needs references)"
    return choices


def check_metrics(metrics: object, choices: dict[str, str]) -> list[str]:
    """The chosen metrics (each once, in order); a `gr.Error` for anything that is not a list of offered names."""
    if isinstance(metrics, str):  # an API client may send one name
        metrics = [metrics]
    if not isinstance(metrics, list) or not all(isinstance(metric, str) for metric in metrics):
        raise gr.Error("the metrics must be a list of names, as /list_metrics returns them", title="Unknown metric")
    chosen = list(dict.fromkeys(metric.strip() for metric in metrics if metric.strip()))
    if not chosen:
        raise gr.Error("pick at least one metric in the list", title="No metrics")
    for metric in chosen:
        if metric in choices:
            continue
        if metric in SPACE_NGRAM_METRICS:
            raise gr.Error(
                f"{metric} is not offered by this server: it needs Java (pycocoevalcap's PTB tokenizer), which is "
                "not installed here; pick a model metric",
                title="Unknown metric",
            )
        raise gr.Error(f"unknown metric '{shown(metric)}': pick from {list(choices)}", title="Unknown metric")
    return chosen


def compare_request(request: ScoreRequest, metrics: list[str], load, mode: object = None) -> pd.DataFrame:
    """One column per output score of each metric, per caption, in the order of `metrics` (not ranked yet).

    `mode` is the scoring mode of the chosen metrics that have several (empty: their defaults); the others score as
    always, and a mode no chosen metric has is a `gr.Error` naming the valid ones.

    `load(metric)` gives a metric's model (loaded once per process). Model metrics are `model.score` read through
    `results.result_columns`, as `pacs-pp evaluate-captions` reads them; the image is decoded once (the request's)
    and encoded once per model. The n-gram metrics are `evaluate_captions` itself. A heading is the column's label
    (`CLIP-S`, `RefPAC-S++`, `Bleu_4`), followed by `[metric]` where two metrics give the same label; `attrs["columns"]`
    maps each heading to its `evaluate-captions` column (`tiny:clip_s/score`, `Bleu_4`).
    """
    captions = request.captions
    images = [request.image] * len(captions)
    references = [request.references] * len(captions) if request.references else None
    ngrams = [metric for metric in metrics if metric in SPACE_NGRAM_METRICS]
    if ngrams and references is None:
        raise gr.Error(
            f"{' and '.join(ngrams)} compare each caption with references: enter at least one reference, or leave "
            f"{'it' if len(ngrams) == 1 else 'them'} out",
            title="No references",
        )
    found: dict[str, list[tuple[str, str, list]]] = {}  # metric -> (label, evaluate-captions column, values)
    truncated, fixes, random_weights = set(), [], False
    models = {metric: load(metric) for metric in metrics if metric not in ngrams}
    moded = [spec_of(model) for model in models.values() if scoring_modes(spec_of(model))]
    chosen_mode = None
    if mode is not None and not (isinstance(mode, str) and not mode.strip()):
        if not models:
            raise gr.Error("a scoring mode applies to model metrics only: leave it empty", title="Unknown scoring mode")
        # Checked against every chosen metric with modes; with none, the first metric's refusal names those that have.
        for spec in moded or [spec_of(next(iter(models.values())))]:
            chosen_mode = check_scoring_mode_choice(mode, spec)
    for metric, model in models.items():
        spec = spec_of(model)
        if spec.capabilities.needs_references and references is None:
            raise gr.Error(
                f"{metric} ({spec.display_name}) is a reference-based metric: enter at least one reference, or leave "
                "it out",
                title="No references",
            )
        options = {"mode": chosen_mode} if chosen_mode is not None and scoring_modes(spec) else {}
        output = model.score(images, captions, references=references, **options)
        columns = results.score_columns(results.result_columns(model, output, spec))
        found[metric] = [(column.label, f"{metric}/{column.key}", column.values) for column in columns]
        counts = getattr(output, "truncated_tokens", None)
        truncated |= set() if counts is None else {index for index, count in enumerate(counts.tolist()) if count > 0}
        fixes.append(getattr(model, "truncation_fix", None))
        random_weights = random_weights or parse_tiny_alias(metric) is not None
    if ngrams:
        items = [{"image_id": index, "caption": caption, "references": request.references}
                 for index, caption in enumerate(captions)]  # fmt: skip
        try:
            evaluation = evaluate_captions(items, metrics=ngrams, duplicates="separate", progress=False)
        except InputError as error:
            raise gr.Error(str(error), title="Could not score") from error
        for metric in ngrams:
            columns = [column for column in METRICS[metric].scorer_columns if column in evaluation.corpus]
            if not columns:  # Java stopped working since the server started: the evaluation skipped it
                raise gr.Error(
                    f"{metric} could not run on this server right now: pick a model metric", title="Could not score"
                )
            found[metric] = [(column, column, [row[column] for row in evaluation.items]) for column in columns]
    labels = [label for metric in metrics for label, _, _ in found[metric]]
    table = pd.DataFrame({"caption": captions})
    headings = {}
    for metric in metrics:
        for label, column, values in found[metric]:
            heading = label if labels.count(label) == 1 else f"{label} [{metric}]"
            table[heading] = values
            headings[heading] = column
    check_finite(table)
    table.attrs.update(
        metrics=metrics,
        columns=headings,
        truncated=len(truncated),
        truncation_fix=next((fix for fix in fixes if fix), None),
        random_weights=random_weights,
    )
    return table


def rank_comparison(table: pd.DataFrame, rank_by: object) -> pd.DataFrame:
    """`table` ranked by the column `rank_by` (a heading; empty: the first column), best first; a `gr.Error` naming
    the columns when `rank_by` is not one of them."""
    headings = score_columns(table)
    if rank_by is None or (isinstance(rank_by, str) and not rank_by.strip()):
        rank_by = headings[0]
    if not isinstance(rank_by, str) or rank_by.strip() not in headings:
        shown_value = shown(rank_by) if isinstance(rank_by, str) else type(rank_by).__name__
        raise gr.Error(
            f"cannot rank by '{shown_value}': the columns of this comparison are {headings}", title="Unknown column"
        )
    rank_by = rank_by.strip()
    ranked = table.sort_values(rank_by, ascending=False, kind="stable").reset_index(drop=True)
    ranked.insert(0, "rank", range(1, len(ranked) + 1))
    ranked.attrs = {**table.attrs, "ranked_by": rank_by}
    return ranked


def comparison_json(table: pd.DataFrame) -> dict:
    """The ranked comparison as plain JSON (the `details` output of `/compare`): the metrics, the column the ranking
    used, each heading's `pacs-pp evaluate-captions` column, and one record per caption, best first."""
    return {
        "metrics": table.attrs["metrics"],
        "ranked_by": table.attrs["ranked_by"],
        "columns": table.attrs["columns"],
        "results": table.to_dict(orient="records"),
    }


def build_compare_tab(cache: ModelCache, choices: dict[str, str], default_metrics: list[str]):
    """The "Compare metrics" tab and its `/compare` endpoint: several metrics of the registry side by side, one
    column per output score, per caption, ranked by any column (the "Rank by" list re-ranks without re-scoring)."""

    def load(metric: str) -> PACSModel:
        name = cache.local_model if cache.local_model and metric == cache.local_entry else metric
        return cache.model(name, metric)

    def metric_spec(metric: str):
        """A listed metric's spec, from the registry or its config.json (nothing loads); None for an n-gram metric."""
        if metric in SPACE_NGRAM_METRICS or metric not in choices:
            return None
        return spec_for_model_name(cache.local_model if cache.local_model and metric == cache.local_entry else metric)

    def chosen_metrics_changed(metrics):
        """New metrics: "Rank by" and the kept comparison belong to the previous ones, so they are emptied (the next
        comparison fills them); the "Scoring mode" choice is shown when a chosen metric has several modes."""
        chosen = [metric for metric in metrics or [] if isinstance(metric, str)]
        moded = next((spec for spec in map(metric_spec, chosen) if scoring_modes(spec)), None)
        return gr.update(choices=[], value=None), None, mode_choice_update(moded)

    def compare_form(image, captions_text, references_text, metrics, rank_by, mode=None, from_page=False):
        metrics = check_metrics(metrics, choices)
        request = parse_request(image, captions_text, references_text)
        table = compare_request(request, metrics, load, mode)
        if from_page and rank_by not in score_columns(table):
            rank_by = ""  # the page's "Rank by" names a column of the previous comparison: the list shows the new one
        ranked = rank_comparison(table, rank_by)
        return (
            summary_text(ranked, None, random_weights=ranked.attrs["random_weights"]),
            styled_table(ranked),
            comparison_json(ranked),
            table,
        )

    def compare(
        image: dict | None,
        captions_text: str,
        references_text: str,
        metrics: list[str],
        rank_by: str,
        mode: str | None = None,
    ):
        """Compare metrics on candidate captions (one per line) of an image, with optional references (one per
        line): `metrics` are names from `/list_metrics`; `rank_by` is a column heading ('' for the first column);
        `mode` is the scoring mode of the chosen metrics that have several ('per_item', 'official'; empty: their
        defaults).

        Returns the best caption (plain text), the ranked table and the results as JSON.
        """
        return run_guarded(compare_form, image, captions_text, references_text, metrics, rank_by, mode)[:3]

    def compare_and_keep(image, captions_text, references_text, metrics, rank_by, mode=None):
        best, styled, details, table = run_guarded(
            compare_form, image, captions_text, references_text, metrics, rank_by, mode, True
        )
        return best, styled, details, gr.update(choices=score_columns(table), value=details["ranked_by"]), table

    def rerank(table, rank_by):
        if table is None:
            raise gr.Error("compare some captions first", title="Nothing to rank")
        ranked = run_guarded(rank_comparison, table, rank_by)
        return (
            summary_text(ranked, None, random_weights=ranked.attrs["random_weights"]),
            styled_table(ranked),
            comparison_json(ranked),
        )

    with gr.Tab("Compare metrics", id="compare"):
        gr.Markdown(
            "Pick several metrics: each caption gets one column per score of each (CLIP-S, PAC-S++, RefPAC-S++, "
            "Polos, ... and, on servers with Java, BLEU and ROUGE-L against the references). Rank by any column."
        )
        with gr.Row():
            with gr.Column():
                image = gr.Image(
                    type="filepath", sources=["upload", "clipboard"], label="Image", height=260, elem_id="compare-image"
                )
                metrics = gr.CheckboxGroup(
                    choices=[(text, value) for value, text in choices.items()],
                    value=default_metrics,
                    label="Metrics",
                    elem_id="compare-metrics",
                )
                first_modes = next(
                    (modes for modes in (scoring_modes(metric_spec(metric)) for metric in default_metrics) if modes), ()
                )
                mode = mode_radio(first_modes, "Scoring mode (metrics that have several)", "compare-scoring-mode")
            with gr.Column():
                captions = gr.Textbox(
                    lines=6,
                    label=f"Candidate captions (one per line, at most {MAX_CAPTIONS})",
                    elem_id="compare-captions",
                )
                references = gr.Textbox(
                    lines=3,
                    label=f"Reference captions (optional, one per line, at most {MAX_REFERENCES})",
                    elem_id="compare-references",
                )
                button = gr.Button("Compare metrics", variant="primary", elem_id="compare-button")
        message = gr.Textbox(label="Message", lines=2, interactive=False, visible=False, elem_id="compare-message")
        best = gr.Textbox(label="Best caption", lines=2, interactive=False, elem_id="compare-best-caption")
        rank_by = gr.Dropdown(choices=[], value=None, label="Rank by", interactive=True, elem_id="compare-rank-by")
        table = gr.Dataframe(label="Captions, one column per score", interactive=False, wrap=True,
                             elem_id="compare-table")  # fmt: skip
        with gr.Accordion("Results as JSON", open=False):
            details = gr.JSON(label="details")
        scored = gr.State(None)  # the last comparison, unranked: kept on the server, re-ranked by "Rank by"
        gr.Examples(examples=EXAMPLES, inputs=[image, captions, references])
        inputs = [image, captions, references, metrics, rank_by, mode]
        metrics.change(
            chosen_metrics_changed, inputs=[metrics], outputs=[rank_by, scored, mode], api_visibility="private"
        )
        button.click(
            page_handler(compare_and_keep, 5),
            inputs=inputs,
            outputs=[message, best, table, details, rank_by, scored],
            api_visibility="private",
            preprocess=False,
        )
        rank_by.input(
            page_handler(rerank, 3),
            inputs=[scored, rank_by],
            outputs=[message, best, table, details],
            api_visibility="private",
            preprocess=False,
        )
        # `/compare` keeps its five inputs (API clients that post them stay valid); `/compare_mode` adds the mode.
        gr.Button(visible=False).click(
            compare, inputs=inputs[:5], outputs=[best, table, details], api_name="compare", preprocess=False
        )
        gr.Button(visible=False).click(
            compare, inputs=inputs, outputs=[best, table, details], api_name="compare_mode", preprocess=False
        )


# ---------------------------------------------------------------------------------------------------- app
def build_demo(
    tiny: bool | None = None, local_model: str | None = None, public: bool | None = None, ngrams: bool | None = None
) -> gr.Blocks:
    """The Blocks app. `tiny=None` reads `PACS_SPACE_TINY`; `local_model=None` reads `PACS_SPACE_MODEL`;
    `public=None` means "on the Hub" (`SPACE_ID` is set; `main` also counts a non-loopback `--host`); `ngrams=None`
    offers BLEU and ROUGE-L in the compare tab where pycocoevalcap and Java are installed.

    A local model directory becomes the selector's first (default) entry. A public app refuses typed model paths.
    """
    tiny = tiny_mode_enabled() if tiny is None else tiny
    local_model = local_model or os.environ.get(LOCAL_MODEL_ENVIRONMENT_VARIABLE) or None
    public = "SPACE_ID" in os.environ if public is None else public
    choices = TINY_CHOICES if tiny else HUB_CHOICES
    cache = ModelCache(choices, local_model, allow_typed_paths=not public)
    selector_entries = ([cache.local_entry] if local_model else []) + list(choices)

    def score_form(image: object, captions_text: object, references_text: object, model: object, mode: object = None):
        request = parse_request(image, captions_text, references_text)
        model = check_model(model)
        models = cache.get(model)
        table = score_request(request, models, check_scoring_mode_choice(mode, spec_of(models.pac_s)))
        return (
            summary_text(table, models, random_weights=model == TINY_CHOICE),
            styled_table(table),
            chart_data(table),
            results_json(table, model),
        )

    def score(image: dict | None, captions_text: str, references_text: str, model: str, mode: str | None = None):
        """Score candidate captions (one per line) of an image, with optional references (one per line); `mode` is
        the scoring mode of a metric that has several ('per_item', 'official'; empty: its default).

        Returns the best caption (plain text), the ranked table, the bar-chart data and the results as JSON.
        """
        return run_guarded(score_form, image, captions_text, references_text, model, mode)

    def entry_spec(choice: object):
        """The metric of a selector entry, read from the registry or the model's config.json (nothing loads); None
        for an unknown entry (a public Space never looks at a typed path)."""
        if not isinstance(choice, str) or not choice.strip():
            return None
        choice = choice.strip()
        if choice in choices:
            return spec_for_model_name(choices[choice][1])
        if local_model and choice == cache.local_entry:
            return spec_for_model_name(local_model)
        return spec_for_model_name(choice) if not public and Path(choice).expanduser().is_dir() else None

    def mode_choice(choice: object) -> dict:
        return mode_choice_update(entry_spec(choice))

    metrics = metric_choices(choices, cache.local_entry, ngram_metrics_available() if ngrams is None else ngrams)

    def list_metrics() -> list[str]:
        """The metrics `/compare` accepts (model aliases, the operator's model, and BLEU/ROUGE-L where Java runs)."""
        return list(metrics)

    def list_models() -> list[str]:
        """The model selector's entries (the path of any local model directory is accepted as well)."""
        return selector_entries

    with gr.Blocks(
        title="PAC-S++ caption scores", delete_cache=(UPLOAD_LIFETIME_SECONDS, UPLOAD_LIFETIME_SECONDS)
    ) as demo:
        gr.Markdown(
            "# PAC-S++: which caption describes the image (or the video) best?\n"
            "Each candidate caption gets **CLIP-S** (plain CLIP), **PAC-S++** (reference-free) and, with reference "
            "captions, **RefPAC-S++**. Reference-free scores are `w · max(cos, 0)` (w = 2.5 for CLIP-S and "
            "PAC-S++); higher is better."
        )
        if tiny:
            gr.Markdown(
                f"> **Offline mode ({TINY_ENVIRONMENT_VARIABLE}=1): tiny model with RANDOM weights.** "
                "The scores are computed exactly as with the real models but mean nothing."
            )
        with gr.Tabs():
            with gr.Tab("Image", id="image"):
                gr.Markdown("Upload an image, write candidate captions (one per line) and, optionally, references.")
                with gr.Row():
                    with gr.Column():
                        image = gr.Image(type="filepath", sources=["upload", "clipboard"], label="Image", height=260)
                        model = gr.Dropdown(
                            choices=selector_entries,
                            value=selector_entries[0],
                            allow_custom_value=not public,
                            label="Model",
                            info="Pick a model"
                            if public
                            else "Pick a model or type the path of a local PAC-S++ model directory",
                        )
                        first_modes = scoring_modes(entry_spec(selector_entries[0]))
                        mode = mode_radio(first_modes, "Scoring mode", "scoring-mode")
                    with gr.Column():
                        captions = gr.Textbox(
                            lines=6,
                            label=f"Candidate captions (one per line, at most {MAX_CAPTIONS})",
                            placeholder="a red circle on a white background\na blue square",
                            elem_id="captions",
                        )
                        references = gr.Textbox(
                            lines=3,
                            label=f"Reference captions (optional, one per line, at most {MAX_REFERENCES})",
                            elem_id="references",
                        )
                        button = gr.Button("Score captions", variant="primary", elem_id="score-button")
                message = gr.Textbox(label="Message", lines=2, interactive=False, visible=False, elem_id="message")
                best = gr.Textbox(label="Best caption", lines=2, interactive=False, elem_id="best-caption")
                with gr.Row():
                    table = gr.Dataframe(label="Ranked captions", interactive=False, elem_id="scores-table", wrap=True)
                    chart = gr.BarPlot(
                        x="bar",
                        y="value",
                        color="score",
                        label="Scores (bars labelled by rank)",
                        x_title="rank · score",
                        y_title="score",
                        x_label_angle=-45,
                        colors_in_legend=[],  # the bar labels name each score; gradio's legend would be clipped
                        height=380,
                        elem_id="scores-chart",
                    )
                with gr.Accordion("Results as JSON", open=False):
                    details = gr.JSON(label="details")
                gr.Examples(examples=EXAMPLES, inputs=[image, captions, references])
                inputs = [image, captions, references, model, mode]
                # The mode choice follows the model: shown, with its modes, only for a metric with several.
                model.change(mode_choice, inputs=[model], outputs=[mode], api_visibility="private")
                # preprocess=False: check_image reads the upload itself, so a bad file gets a readable error.
                button.click(
                    page_handler(score, 4),
                    inputs=inputs,
                    outputs=[message, best, table, chart, details],
                    api_visibility="private",
                    preprocess=False,
                )
                # The API endpoint: the same scoring, its errors raised to the client (the page shows them as text).
                # `/score` keeps its four inputs (API clients that post them stay valid); `/score_mode` adds the mode.
                for name, given in (("score", inputs[:4]), ("score_mode", inputs)):
                    gr.Button(visible=False).click(
                        score, inputs=given, outputs=[best, table, chart, details], api_name=name, preprocess=False
                    )
            build_video_tab(cache, selector_entries)
            build_compare_tab(cache, metrics, default_metrics=list(next(iter(choices.values()))))
        gr.api(list_models, api_name="list_models")
        gr.api(list_metrics, api_name="list_metrics")
    demo.queue(default_concurrency_limit=concurrency_limit(), max_size=MAX_QUEUE_SIZE)
    return demo


def main(argv: list[str] | None = None):
    """Launch the Space; `--tiny` (or `PACS_SPACE_TINY=1`) runs offline with the random tiny model."""
    parser = argparse.ArgumentParser(description="PAC-S++ caption comparison Space")
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", "7860")))
    parser.add_argument("--tiny", action="store_true", help="offline: the tiny model with random weights")
    parser.add_argument(
        "--model", help=f"local PAC-S++ model directory offered first (or ${LOCAL_MODEL_ENVIRONMENT_VARIABLE})"
    )
    args = parser.parse_args(argv)
    if not 1 <= args.port <= 65535:
        parser.error(f"--port {args.port} is not a port number: give one of 1-65535")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s: %(message)s")
    demo = build_demo(tiny=True if args.tiny else None, local_model=args.model, public=is_public(args.host))
    # show_error=False: only gr.Error messages (written for visitors) reach the page, never a raw exception.
    demo.launch(server_name=args.host, server_port=args.port, max_file_size=MAX_FILE_SIZE, show_error=False)


if __name__ == "__main__":
    main()
