"""The metric's Space: score captions of one image with PAC-S++ (and RefPAC-S++ when references are given)."""

import os
from pathlib import Path

import evaluate

from modeling_pacs.extras import require

gr = require("gradio", "demo", "The metric's Space")

# PACS_MODEL selects other weights (an alias, a Hub id, or "tiny" for an offline smoke run).
metric = evaluate.load(str(Path(__file__).with_name("pacs_pp.py")), model=os.environ.get("PACS_MODEL"))


def score(image_path: str, captions: str, references: str) -> list[dict]:
    """One caption per line; references (one per line) apply to every caption."""
    candidates = [line.strip() for line in captions.splitlines() if line.strip()]
    if image_path is None or not candidates:
        raise gr.Error("upload an image and write at least one caption")
    reference_list = [line.strip() for line in references.splitlines() if line.strip()]
    results = metric.compute(
        predictions=candidates,
        images=[image_path] * len(candidates),
        references=[reference_list] * len(candidates) if reference_list else None,
    )
    rows = []
    for index, caption in enumerate(candidates):
        row = {"caption": caption, results["metric"]: results["scores"][index]}
        if "ref_scores" in results:
            row[results["ref_metric"]] = results["ref_scores"][index]
        rows.append(row)
    return rows


demo = gr.Interface(
    fn=score,
    inputs=[
        gr.Image(type="filepath", label="image"),
        gr.Textbox(lines=4, label="captions (one per line)"),
        gr.Textbox(lines=3, label="references (optional, one per line)"),
    ],
    outputs=gr.JSON(label="scores"),
    title="PAC-S++",
    description=metric.info.description,
    article=Path(__file__).with_name("README.md").read_text(encoding="utf-8").split("---", 2)[-1],
)

if __name__ == "__main__":
    demo.launch()
