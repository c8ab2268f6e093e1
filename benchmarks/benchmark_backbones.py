"""Throughput of PAC-S++ on a SigLIP backbone against a CLIP backbone of equal size, in one process.

Both models have ViT-B/32-sized towers (text 512 wide x 12 layers, vision 768 wide x 12 layers, 224 px images in
32 px patches) with RANDOM weights and a random LoRA adapter merged into them (real checkpoints cannot be downloaded
here; the arithmetic is the same). They differ only where the backbones differ: SigLIP pads every caption to its
64-token context (CLIP pads to the batch's longest), pools images with an attention head (CLIP takes the class
token), resizes without a crop, and uses its own tokenizer (here a small one trained in code).

Rounds alternate between the two models so that load on a shared machine hits both alike; the best round counts.

    python benchmarks/benchmark_backbones.py --images 64 --candidates 2 --references 3 --rounds 3
"""

import argparse
import tempfile
import time
from pathlib import Path

import torch
from benchmarking_utils import (
    make_workload,
    positive_int,
    vit_b32_clip_config,
    vit_b32_siglip_config,
    workload_columns,
)

from modeling_pacs.cli.arguments import add_example
from modeling_pacs.loading import resolve_device
from modeling_pacs.models.modeling_pacs import PACSModel
from modeling_pacs.testing.pacs import TINY_WORDS, build_siglip_tokenizer, make_tiny_model


def merged(model: PACSModel) -> PACSModel:
    """Merge the random adapter into the weights, as `from_pretrained` does by default."""
    model.clip = model.peft_model.merge_and_unload()
    model._peft_model = None
    return model.eval()


def count_parameters(model: PACSModel) -> tuple[int, int]:
    """Parameters of the two towers without the token embedding table (the vocabularies differ in size)."""
    embedding = model.clip.text_model.embeddings.token_embedding.weight.numel()
    return sum(parameter.numel() for parameter in model.clip.parameters()) - embedding, embedding


def timed(function, *args, **kwargs) -> float:
    start = time.perf_counter()
    function(*args, **kwargs)
    return time.perf_counter() - start


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=positive_int, default=64)
    parser.add_argument("--candidates", type=positive_int, default=2, help="captions per image")
    parser.add_argument("--references", type=positive_int, default=3, help="references per image")
    parser.add_argument("--rounds", type=positive_int, default=3, help="alternating timed rounds (best is kept)")
    parser.add_argument("--device", default="auto", help="'auto' (CUDA when present), 'cpu', 'cuda'")
    add_example(parser, "python benchmarks/benchmark_backbones.py --images 64 --candidates 2 --references 3 --rounds 3")
    args = parser.parse_args(argv)
    device = resolve_device(args.device)
    print("building ViT-B/32-sized random CLIP and SigLIP models with random LoRA adapters (random weights)")
    models = {
        "CLIP": merged(make_tiny_model(variant="pac_s_pp", clip_config=vit_b32_clip_config())).to(device),
        "SigLIP": merged(
            make_tiny_model(
                variant="pac_s_pp", backbone="siglip", clip_config=vit_b32_siglip_config(build_siglip_tokenizer())
            )
        ).to(device),
    }
    for name, model in models.items():
        parameters, embedding = count_parameters(model)
        print(f"{name:6s}: {parameters / 1e6:.1f} M parameters besides a {embedding / 1e6:.2f} M token embedding")
    best = {name: {"images": float("inf"), "texts": float("inf"), "score": float("inf")} for name in models}
    with tempfile.TemporaryDirectory() as directory:
        images, candidates, references = workload_columns(
            make_workload(Path(directory), args.images, args.candidates, args.references, words=TINY_WORDS)
        )
        unique_images = list(dict.fromkeys(images))
        texts = list(dict.fromkeys(candidates + [text for group in references for text in group]))
        print(
            f"workload: {len(unique_images)} images, {len(candidates)} candidates, {len(texts)} distinct texts, "
            f"device={device}, threads={torch.get_num_threads()}, {args.rounds} alternating rounds"
        )
        for _ in range(args.rounds):
            for name, model in models.items():
                times = best[name]
                times["images"] = min(times["images"], timed(model.encode_images, unique_images))
                times["texts"] = min(times["texts"], timed(model.encode_texts, texts))
                score_time = timed(model.score, images, candidates, references, progress=False)
                times["score"] = min(times["score"], score_time)
    print(f"{'backbone':8s} {'images/s':>10s} {'texts/s':>10s} {'items/s (score with refs)':>27s}")
    for name, times in best.items():
        print(
            f"{name:8s} {len(unique_images) / times['images']:10.1f} {len(texts) / times['texts']:10.1f} "
            f"{len(candidates) / times['score']:27.1f}"
        )
    clip, siglip = best["CLIP"], best["SigLIP"]
    print(
        f"SigLIP / CLIP throughput: images {clip['images'] / siglip['images']:.2f}x, texts "
        f"{clip['texts'] / siglip['texts']:.2f}x, scoring {clip['score'] / siglip['score']:.2f}x"
    )
    return best


if __name__ == "__main__":
    main()
