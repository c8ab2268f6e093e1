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
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import gradio as gr
import pandas as pd
import PIL.Image

from modeling_pacs import PACSModel
from modeling_pacs.loading import load_model

# Offline mode: a random 32-dim model stands in for the real ones (for tests and machines without the Hub).
TINY_ENVIRONMENT_VARIABLE = "PACS_SPACE_TINY"
TINY_CHOICE = "tiny (random weights)"
# Model selector entry -> (CLIP-S model, PAC-S++ model), both as `load_model` names.
HUB_CHOICES = {
    "ViT-B/32": ("clip_s_vit_b32", "pac_s_pp_vit_b32"),
    "ViT-L/14": ("clip_s_vit_l14", "pac_s_pp_vit_l14"),
}
TINY_CHOICES = {TINY_CHOICE: ("tiny:clip_s", "tiny")}
# A local PAC-S++ model directory to offer first in the selector (a Space or a user serving their own model).
LOCAL_MODEL_ENVIRONMENT_VARIABLE = "PACS_SPACE_MODEL"
CLIP_S_NAME = "CLIP-S"

# Request limits: each keeps one request to a few seconds of CPU and stops abuse of a shared Space.
MAX_CAPTIONS = 16
MAX_REFERENCES = 10
MAX_CAPTION_CHARACTERS = 300
MAX_IMAGE_PIXELS = 4096 * 4096
MAX_FILE_SIZE = "10mb"
# Requests scored at once; the rest wait in the queue (CPU Spaces gain nothing from more).
DEFAULT_CONCURRENCY_LIMIT = int(os.environ.get("PACS_SPACE_CONCURRENCY", "2"))
MAX_QUEUE_SIZE = 64

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


# ---------------------------------------------------------------------------------------------------- models
@dataclass
class ScoringModels:
    """The two models behind one selector entry: a CLIP for CLIP-S (may be missing) and a PAC-S++ model."""

    clip_s: PACSModel | None
    pac_s: PACSModel
    clip_s_unavailable_reason: str | None = None


class ModelCache:
    """Loads each selector entry once; concurrent first requests wait for one load instead of loading twice.

    Typed local directories are accepted only when `allow_typed_paths` is set: on a public Space a visitor must not
    probe or load the server's files. `local_model` (chosen by whoever runs the app) is always accepted.
    """

    def __init__(self, choices: dict[str, tuple[str, str]], local_model: str | None, allow_typed_paths: bool):
        self.choices = choices
        self.local_model = local_model
        self.allow_typed_paths = allow_typed_paths
        self.loaded: dict[str, ScoringModels] = {}
        # One lock per entry: a slow load (the Hub retrying) never holds up requests for models already loaded.
        self.locks: dict[str, threading.Lock] = {}
        self.locks_lock = threading.Lock()

    def get(self, choice: str) -> ScoringModels:
        """The models of `choice`: a selector entry or a local model directory."""
        choice = (choice or "").strip()
        if choice not in self.choices and choice != self.local_model and not self.allow_typed_paths:
            raise gr.Error(
                f"model '{choice}' is not one of {sorted(self.choices)}: typed model paths are disabled on a public "
                "Space (run the app yourself to score with a local model)",
                title="Unknown model",
            )
        with self.locks_lock:
            lock = self.locks.setdefault(choice, threading.Lock())
        with lock:
            if choice not in self.loaded:
                self.loaded[choice] = self.load(choice)
            return self.loaded[choice]

    def load(self, choice: str) -> ScoringModels:
        if choice in self.choices:
            clip_s_name, pac_s_name = self.choices[choice]
            return ScoringModels(clip_s=load_or_explain(clip_s_name), pac_s=load_or_explain(pac_s_name))
        if not Path(choice).expanduser().is_dir():
            raise gr.Error(
                f"model '{choice}' is neither one of {sorted(self.choices)} nor an existing local model directory: "
                "pick an entry of the list or type the path of a PAC-S++ model directory",
                title="Unknown model",
            )
        pac_s = load_or_explain(str(Path(choice).expanduser()))
        if pac_s.config.model_type == "pearl":  # a PearlScorer: Pearl-img and Pearl columns, no CLIP-S
            return ScoringModels(clip_s=None, pac_s=pac_s, clip_s_unavailable_reason="Pearl models score on their own")
        if pac_s.config.variant == "clip_s":
            raise gr.Error(
                f"'{choice}' is a CLIP-S model: type the directory of a PAC-S or PAC-S++ model (CLIP-S is then "
                "computed with the CLIP named by its config's base_model_id)",
                title="Not a PAC-S++ model",
            )
        # A local PAC-S++ model names the CLIP it was trained from; CLIP-S uses that CLIP when it can be loaded.
        try:
            clip_s = load_model(pac_s.config.base_model_id)
        except (OSError, ValueError) as error:
            return ScoringModels(clip_s=None, pac_s=pac_s, clip_s_unavailable_reason=str(error))
        return ScoringModels(clip_s=clip_s, pac_s=pac_s)


def load_or_explain(name: str) -> PACSModel:
    """`load_model(name)`, with loading failures shown to the user as a readable error."""
    try:
        return load_model(name)
    except (OSError, ValueError) as error:
        raise gr.Error(f"could not load model '{name}': {error}", title="Model not available") from error


# ---------------------------------------------------------------------------------------------------- requests
@dataclass
class ScoreRequest:
    """A validated request: the image path, the candidate captions and the references (may be empty)."""

    image: str
    captions: list[str]
    references: list[str]


def split_lines(text: str | None) -> list[str]:
    """Non-blank lines of a textbox, stripped."""
    return [line.strip() for line in (text or "").splitlines() if line.strip()]


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
                f"{what} {index} ('{text[:40]}...') is {len(text)} characters long; the limit is "
                f"{MAX_CAPTION_CHARACTERS}: shorten it",
                title=f"{what.capitalize()} too long",
            )


def check_image(image: dict | None) -> str:
    """The path of the uploaded image; a `gr.Error` when there is none, it cannot be read, or it is too large.

    `image` is the uploaded file as gradio stores it (`{"path": ..., "orig_name": ...}`, in gradio's upload cache):
    the handler skips gradio's own preprocessing so that an undecodable upload gets this message, not a traceback.
    """
    if not image or not image.get("path"):
        raise gr.Error("upload an image first (or click one of the examples below)", title="No image")
    path = image["path"]
    name = image.get("orig_name") or Path(path).name
    try:
        with PIL.Image.open(path) as opened:  # reads the header only: a huge image is refused before decoding
            width, height = opened.size
    except PIL.Image.DecompressionBombError as error:
        raise gr.Error(f"the image '{name}' is far too large: {error}", title="Image too large") from error
    except (OSError, ValueError) as error:
        raise gr.Error(
            f"the uploaded file '{name}' could not be read as an image ({type(error).__name__}): upload a PNG, "
            "JPEG, WebP, GIF, BMP or TIFF file",
            title="Not an image",
        ) from error
    if width * height > MAX_IMAGE_PIXELS:
        raise gr.Error(
            f"the image '{name}' is {width}x{height} = {width * height / 1e6:.1f} megapixels; the limit is "
            f"{MAX_IMAGE_PIXELS / 1e6:.1f}: downscale it and upload it again",
            title="Image too large",
        )
    return path


def parse_request(image: dict | None, captions_text: str | None, references_text: str | None) -> ScoreRequest:
    """Validate the form inputs; every violation is a `gr.Error` the user reads in the page."""
    captions = split_lines(captions_text)
    if not captions:
        raise gr.Error("enter at least one candidate caption, one per line", title="No captions")
    check_texts(captions, "caption", MAX_CAPTIONS)
    references = split_lines(references_text)
    check_texts(references, "reference", MAX_REFERENCES)
    return ScoreRequest(image=check_image(image), captions=captions, references=references)


# ---------------------------------------------------------------------------------------------------- scoring
def score_request(request: ScoreRequest, models: ScoringModels) -> pd.DataFrame:
    """Per-caption scores, best first: one CLIP-S call and one PAC-S++ call (with references when given).

    The image is passed once per caption; `PACSModel.score` encodes repeated images once.
    """
    images = [request.image] * len(request.captions)
    references = [request.references] * len(request.captions) if request.references else None
    free_name, ref_name = models.pac_s.config.score_names
    pac_s_output = models.pac_s.score(images, request.captions, references=references)
    table = pd.DataFrame({"caption": request.captions})
    if models.clip_s is not None:
        table[CLIP_S_NAME] = models.clip_s.score(images, request.captions).scores.tolist()
    table[free_name] = pac_s_output.scores.tolist()
    ranked_by = free_name
    if pac_s_output.ref_scores is not None:
        table[ref_name] = pac_s_output.ref_scores.tolist()
        ranked_by = ref_name
    table = table.sort_values(ranked_by, ascending=False, kind="stable").reset_index(drop=True)
    table.insert(0, "rank", range(1, len(table) + 1))
    table.attrs["ranked_by"] = ranked_by
    return table


def score_columns(table: pd.DataFrame) -> list[str]:
    return [column for column in table.columns if column not in ("rank", "caption")]


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


def summary_markdown(table: pd.DataFrame, models: ScoringModels, random_weights: bool) -> str:
    """The best caption, what it was ranked by, and notes the user needs to read the numbers right."""
    ranked_by = table.attrs["ranked_by"]
    best = table.iloc[0]
    lines = [f"### Best caption: “{best['caption']}”", f"{ranked_by} {best[ranked_by]:.4f} (ranked by {ranked_by})"]
    if models.clip_s_unavailable_reason:
        lines.append(f"\n*CLIP-S is not shown: {models.clip_s_unavailable_reason}*")
    if random_weights:
        lines.append("\n*Tiny model with random weights: these numbers are meaningless.*")
    return "\n".join(lines)


def results_json(table: pd.DataFrame, model: str) -> dict:
    """The ranked results as plain JSON (the `details` output of the `/score` endpoint)."""
    return {
        "model": model,
        "ranked_by": table.attrs["ranked_by"],
        "results": table.to_dict(orient="records"),
    }


# ---------------------------------------------------------------------------------------------------- app
def build_demo(tiny: bool | None = None, local_model: str | None = None) -> gr.Blocks:
    """The Blocks app. `tiny=None` reads `PACS_SPACE_TINY`; `local_model=None` reads `PACS_SPACE_MODEL`.

    A local model directory becomes the selector's first (default) entry.
    """
    tiny = tiny_mode_enabled() if tiny is None else tiny
    local_model = local_model or os.environ.get(LOCAL_MODEL_ENVIRONMENT_VARIABLE) or None
    choices = TINY_CHOICES if tiny else HUB_CHOICES
    # The Hub sets SPACE_ID in every Space: there, visitors pick from the list only.
    cache = ModelCache(choices, local_model, allow_typed_paths="SPACE_ID" not in os.environ)
    selector_entries = ([local_model] if local_model else []) + list(choices)

    def score(image: dict | None, captions_text: str, references_text: str, model: str):
        """Score candidate captions (one per line) of an image, with optional references (one per line).

        Returns the best caption (Markdown), the ranked table, the bar-chart data and the results as JSON.
        """
        request = parse_request(image, captions_text, references_text)
        models = cache.get(model)
        try:
            table = score_request(request, models)
        except (OSError, ValueError, TypeError) as error:
            raise gr.Error(str(error), title="Could not score") from error
        return (
            summary_markdown(table, models, random_weights=model == TINY_CHOICE),
            styled_table(table),
            chart_data(table),
            results_json(table, model),
        )

    def list_models() -> list[str]:
        """The model selector's entries (the path of any local model directory is accepted as well)."""
        return selector_entries

    with gr.Blocks(title="PAC-S++ caption scores") as demo:
        gr.Markdown(
            "# PAC-S++: which caption describes the image best?\n"
            "Upload an image, write candidate captions (one per line) and, optionally, reference captions. "
            "Each caption gets **CLIP-S** (plain CLIP), **PAC-S++** (reference-free) and, with references, "
            "**RefPAC-S++**. Reference-free scores are `w · max(cos, 0)` (w = 2.5 for CLIP-S and PAC-S++); "
            "higher is better."
        )
        if tiny:
            gr.Markdown(
                f"> **Offline mode ({TINY_ENVIRONMENT_VARIABLE}=1): tiny model with RANDOM weights.** "
                "The scores are computed exactly as with the real models but mean nothing."
            )
        with gr.Row():
            with gr.Column():
                image = gr.Image(
                    type="filepath",
                    sources=["upload", "clipboard"],
                    label="Image",
                    height=260,
                )
                model = gr.Dropdown(
                    choices=selector_entries,
                    value=selector_entries[0],
                    allow_custom_value=True,
                    label="Model",
                    info="Pick a model or type the path of a local PAC-S++ model directory",
                )
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
        best = gr.Markdown(elem_id="best-caption")
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
                colors_in_legend=[],  # the bar labels name each score; gradio's legend would be clipped anyway
                height=380,
            )
        with gr.Accordion("Results as JSON", open=False):
            details = gr.JSON(label="details")
        gr.Examples(examples=EXAMPLES, inputs=[image, captions, references])
        button.click(
            score,
            inputs=[image, captions, references, model],
            outputs=[best, table, chart, details],
            api_name="score",
            preprocess=False,  # check_image reads the upload itself, so a bad file gets a readable error
        )
        gr.api(list_models, api_name="list_models")
    demo.queue(default_concurrency_limit=DEFAULT_CONCURRENCY_LIMIT, max_size=MAX_QUEUE_SIZE)
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
    demo = build_demo(tiny=True if args.tiny else None, local_model=args.model)
    demo.launch(server_name=args.host, server_port=args.port, max_file_size=MAX_FILE_SIZE, show_error=True)


if __name__ == "__main__":
    main()
