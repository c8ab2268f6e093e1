"""Throughput of the PAC-S++ engine against a reference-style pipeline, in one process, on the same weights.

Workload: Flickr8k-shaped, ViT-B/32-sized random weights with a random LoRA adapter (the real checkpoints cannot be
downloaded here; the arithmetic is the same). Both pipelines compute PAC-S++ and RefPAC-S++ through the same formula
functions; they differ only in how they encode:

- reference-style (as the official code and most CLIPScore scripts do): every candidate re-encodes its image,
  every text is padded to 77 tokens, unmerged LoRA layers, images decoded on the main thread, fp32;
- ours (`PACSModel.score`): each distinct image and text encoded once, texts sorted by length and padded to the
  batch's longest, LoRA merged into the weights, decoding in a thread pool, fp32.

Prints the throughput ratio, the largest score difference, and the image encoder's achieved GFLOP/s as a fraction of
this machine's measured fp32 matmul peak.

    python scripts/benchmark_speed.py --images 200 --candidates 3 --references 5
"""

import argparse
import copy
import random
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from modeling_pacs.inputs import load_and_preprocess, prepare_caption
from modeling_pacs.loading import DTYPES, resolve_device
from modeling_pacs.scoring import harmonic_mean, max_reference_similarity, reference_free_score
from modeling_pacs.tiny import make_tiny_model, vit_b32_clip_config

WORDS = (
    "a man woman dog cat child girl boy two three people red blue green black white small large young old "
    "is are on in at with near under next to the of and playing running sitting standing riding jumping "
    "street beach park grass water snow field road table bike horse ball frisbee wave surfboard building"
).split()


def make_workload(folder: Path, num_images: int, num_candidates: int, num_references: int, seed: int = 0):
    rng = random.Random(seed)
    noise = np.random.default_rng(seed)
    items = []
    for index in range(num_images):
        path = folder / f"{index:04d}.jpg"
        width, height = rng.choice([(500, 375), (375, 500), (500, 333), (640, 480)])
        base = noise.integers(0, 256, (height // 8, width // 8, 3), dtype=np.uint8)
        Image.fromarray(base).resize((width, height), Image.BILINEAR).save(path, quality=90)
        references = [" ".join(rng.choices(WORDS, k=rng.randint(8, 16))) for _ in range(num_references)]
        for _ in range(num_candidates):
            items.append((str(path), " ".join(rng.choices(WORDS, k=rng.randint(6, 14))), references))
    return items


def reference_style_scores(model, items, batch_size: int = 64):
    """Per candidate: decode and encode its image, encode caption and references padded to 77 tokens."""
    size = model.config.backbone_config.vision_config.image_size
    scores, ref_scores = [], []
    clip = model.clip
    device = model.device
    with torch.inference_mode():
        for start in range(0, len(items), batch_size):
            batch = items[start : start + batch_size]
            pixels = torch.stack([load_and_preprocess(path, i, size) for i, (path, _, _) in enumerate(batch)])
            image_embeds = clip.get_image_features(pixel_values=pixels.to(device)).pooler_output.float().cpu()

            def encode(texts):
                tokens = model.tokenizer(
                    [prepare_caption(text, model.config.prompt_prefix) for text in texts],
                    padding="max_length",
                    truncation=True,
                    max_length=77,
                    return_tensors="pt",
                )
                return clip.get_text_features(**tokens.to(device)).pooler_output.float().cpu()

            candidate_embeds = encode([caption for _, caption, _ in batch])
            references = [reference for _, _, refs in batch for reference in refs]
            owner = torch.tensor([i for i, (_, _, refs) in enumerate(batch) for _ in refs])
            reference_embeds = encode(references)
            score = reference_free_score(image_embeds, candidate_embeds, model.config.w)
            scores.append(score)
            ref_scores.append(harmonic_mean(score, max_reference_similarity(candidate_embeds, reference_embeds, owner)))
    return torch.cat(scores), torch.cat(ref_scores)


def vision_flops_per_image(config) -> float:
    """Multiply-adds x 2 of one ViT forward (patch embedding, attention, MLP) plus the projection."""
    vision = config.vision_config
    width, layers = vision.hidden_size, vision.num_hidden_layers
    patches = (vision.image_size // vision.patch_size) ** 2
    tokens = patches + 1
    macs = patches * width * 3 * vision.patch_size**2
    per_layer = 4 * tokens * width * width + 2 * tokens * tokens * width + 2 * tokens * width * vision.intermediate_size
    macs += layers * per_layer + width * config.projection_dim
    return 2.0 * macs


def synchronize(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_peak_gflops(device: torch.device, dtype: torch.dtype, size: int = 2048, repeats: int = 10) -> float:
    """Measured dense matmul throughput of this machine in the engine's precision (the achievable peak)."""
    if device.type == "cuda":
        size, repeats = 8192, 50
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    torch.mm(a, b)
    synchronize(device)
    start = time.perf_counter()
    for _ in range(repeats):
        torch.mm(a, b)
    synchronize(device)
    return 2 * size**3 * repeats / (time.perf_counter() - start) / 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--candidates", type=int, default=3)
    parser.add_argument("--references", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=1, help="timed runs of each pipeline (best is kept)")
    parser.add_argument("--device", default="auto", help="'auto' (CUDA when present), 'cpu', 'cuda'")
    parser.add_argument(
        "--dtype",
        choices=["fp32", "fp16", "bf16"],
        default="fp32",
        help="precision of OUR engine (the reference-style pipeline stays fp32)",
    )
    args = parser.parse_args()
    torch.manual_seed(0)

    print("building ViT-B/32-sized random model with a random LoRA adapter (real weights are not downloadable here)")
    with tempfile.TemporaryDirectory() as directory:
        device = resolve_device(args.device)
        reference_model = make_tiny_model(variant="pac_s_pp", clip_config=vit_b32_clip_config()).eval().to(device)
        ours = copy.deepcopy(reference_model)
        ours.clip = ours.peft_model.merge_and_unload()
        ours._peft_model = None
        if args.dtype != "fp32":
            ours = ours.to(DTYPES[args.dtype])
        items = make_workload(Path(directory), args.images, args.candidates, args.references)
        images = [path for path, _, _ in items]
        candidates = [caption for _, caption, _ in items]
        references = [refs for _, _, refs in items]
        print(
            f"workload: {args.images} images x {args.candidates} candidates x {args.references} references "
            f"= {len(items)} items, device={device}, ours in {args.dtype}, threads={torch.get_num_threads()}"
        )

        baseline_time = ours_time = float("inf")
        for _ in range(args.repeats):
            start = time.perf_counter()
            baseline_scores, baseline_ref_scores = reference_style_scores(reference_model, items)
            baseline_time = min(baseline_time, time.perf_counter() - start)
            start = time.perf_counter()
            output = ours.score(images, candidates, references, progress=False)
            ours_time = min(ours_time, time.perf_counter() - start)

        difference = max(
            (output.scores - baseline_scores).abs().max().item(),
            (output.ref_scores - baseline_ref_scores).abs().max().item(),
        )
        size = ours.config.backbone_config.vision_config.image_size
        pixels = torch.stack([load_and_preprocess(path, i, size) for i, path in enumerate(images[:64])])
        pixels = pixels.to(device=device, dtype=ours.dtype)
        with torch.inference_mode():
            ours.clip.vision_model(pixel_values=pixels[:8])
            synchronize(device)
            start = time.perf_counter()
            ours.clip.visual_projection(ours.clip.vision_model(pixel_values=pixels).pooler_output)
            synchronize(device)
            encoder_seconds = time.perf_counter() - start
        achieved = vision_flops_per_image(ours.config.backbone_config) * len(pixels) / encoder_seconds / 1e9
        peak = matmul_peak_gflops(device, ours.dtype)

    print(f"reference-style pipeline: {baseline_time:7.2f} s  ({len(items) / baseline_time:6.1f} items/s)")
    print(f"pacs-pp engine:           {ours_time:7.2f} s  ({len(items) / ours_time:6.1f} items/s)")
    print(f"throughput ratio (ours / reference-style): {baseline_time / ours_time:.2f}x")
    print(f"max |score difference| (PAC-S++ and RefPAC-S++): {difference:.2e}")
    print(
        f"image encoder: {achieved:.1f} GFLOP/s achieved, {args.dtype} matmul peak {peak:.1f} GFLOP/s "
        f"-> {achieved / peak:.0%} of peak"
    )


if __name__ == "__main__":
    main()
