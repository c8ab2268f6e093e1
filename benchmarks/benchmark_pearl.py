"""Pearl's cost per sample against RefPAC-S++, in one process (random weights: the arithmetic is the real one).

1. Head only, on cached features: the default 103.55 M Pearl head (docs/spec/pearl.md#vss) on random features of the
   default encoders' shapes (CLIP 512, BEiT-3 768, BLIP-2 32x256, Stella 768), reference-free and with 5 references.
2. End to end with tiny encoders: images and captions in, scores out, through the tiny PAC-S++ / BLIP-2 / Stella
   encoders (width 32) and a full-size Pearl head; RefPAC-S++ on the same workload with ViT-B/32-sized random weights
   and with the tiny PAC-S++ model. The real encoders (EVA ViT-g, Stella 400M) dominate real end-to-end time and are
   not measured here.

The head costs about 72 GFLOP per reference-free sample (+6.3 GFLOP per reference), almost all of it in the
HadamardNets: a CPU is the wrong device for Pearl at scale (the paper: 8.2 ms/sample on an RTX 3090).

    python benchmarks/benchmark_pearl.py --items 64 --references 5
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch
from benchmarking_utils import best_time, make_workload, vit_b32_clip_config

from modeling_pacs import PACSModel, PearlConfig, PearlModel
from modeling_pacs.cli.arguments import add_example
from modeling_pacs.pearl.scorer import PearlScorer
from modeling_pacs.testing.pacs import make_tiny_model
from modeling_pacs.testing.pearl import make_tiny_pearl


def head_features(config: PearlConfig, batch: int, num_refs: int) -> dict:
    candidate = {name: torch.randn(batch, 768) for name in config.encoder_names}
    for encoder in config.image_encoders + config.reference_encoders:
        candidate[encoder["name"]] = torch.randn(batch, encoder["dim"])
    image = {e["name"]: torch.randn(batch, e.get("tokens", 1), e["dim"]) for e in config.image_encoders}
    features = {"candidate_features": candidate, "image_features": image}
    if num_refs:
        features["reference_features"] = {
            e["name"]: torch.randn(batch, num_refs, e["dim"]) for e in config.reference_encoders
        }
    return features


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=64, help="samples per measurement (> 0)")
    parser.add_argument("--references", type=int, default=5, help="references per sample (1..5)")
    parser.add_argument("--batch-size", type=int, default=16, help="Pearl head batch (> 0)")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs, best kept (> 0)")
    parser.add_argument("--no-warmup", action="store_true", help="skip the untimed first run (slow CPUs)")
    parser.add_argument("--output", type=Path, help="also write the figures as JSON")
    add_example(parser, "python benchmarks/benchmark_pearl.py --items 64 --references 5")
    args = parser.parse_args()
    if args.items <= 0 or args.batch_size <= 0 or args.repeats <= 0 or not 1 <= args.references <= 5:
        parser.error("--items, --batch-size and --repeats must be > 0 and --references in 1..5")
    torch.manual_seed(0)
    figures = {"items": args.items, "references": args.references, "threads": torch.get_num_threads()}

    def milliseconds_per_item(function, num_items: int) -> float:
        return 1000 * best_time(function, args.repeats, warmup=not args.no_warmup)[0] / num_items

    head = PearlModel(PearlConfig()).eval()
    # HadamardNet runs its 1x1-conv MLP on every one of the 768 coordinates of every token: it dominates the head.
    coordinate_macs = sum(
        m.weight.numel() for m in head.image_arsms["clip"].hadamard_net.modules() if hasattr(m, "kernel_size")
    )
    token_gflop = 2 * coordinate_macs * head.config.feature_dim / 1e9
    figures["hadamard_gflop_ref_free_sample"] = token_gflop * head.config.image_sequence_length
    figures["hadamard_gflop_per_reference"] = token_gflop * head.config.reference_sequence_length
    for label, num_refs in (("pearl_head_ref_free_ms", 0), ("pearl_head_ref_based_ms", args.references)):
        features = head_features(head.config, args.batch_size, num_refs)

        def run_head(features=features):
            with torch.inference_mode():
                for _ in range(0, args.items, args.batch_size):
                    head(**features)

        batches = -(-args.items // args.batch_size)
        figures[label] = milliseconds_per_item(run_head, batches * args.batch_size)

    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        items = make_workload(folder, args.items, 1, args.references)
        images = [item[0] for item in items]
        candidates = [item[1] for item in items]
        references = [item[2] for item in items]
        tiny_dir = make_tiny_pearl(folder / "tiny_pearl")
        tiny = PearlScorer.from_pretrained(tiny_dir)
        full_head_config = PearlConfig(
            image_encoders=tiny.config.image_encoders,
            reference_encoders=tiny.config.reference_encoders,
            encoder_specs=tiny.config.encoder_specs,
        )
        scorer = PearlScorer(PearlModel(full_head_config).eval(), tiny.encoders, batch_size=args.batch_size)
        figures["pearl_end_to_end_tiny_encoders_ms"] = milliseconds_per_item(
            lambda: scorer.score(images, candidates, references), len(items)
        )
        vit_b32 = make_tiny_model(clip_config=vit_b32_clip_config()).eval()
        vit_b32.clip = vit_b32.peft_model.merge_and_unload()  # as PACSModel.from_pretrained does
        figures["ref_pac_s_pp_vit_b32_ms"] = milliseconds_per_item(
            lambda: vit_b32.score(images, candidates, references, progress=False), len(items)
        )
        tiny_pacs = PACSModel.from_pretrained(tiny_dir / "encoders" / "clip", dtype=torch.float32).eval()
        figures["ref_pac_s_pp_tiny_ms"] = milliseconds_per_item(
            lambda: tiny_pacs.score(images, candidates, references, progress=False), len(items)
        )
    for name, value in figures.items():
        print(f"{name:40s} {value:.2f}" if isinstance(value, float) else f"{name:40s} {value}")
    if args.output:
        args.output.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
