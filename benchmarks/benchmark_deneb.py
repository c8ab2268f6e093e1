"""Milliseconds per sample of DENEB and RefPAC-S++ (ViT-B/32) in one run, on the same workload and machine, with a
per-stage profile of DENEB (seconds, GFLOP, GFLOP/s and share of this machine's measured fp32 matmul peak).

Default weights are random, at the authors' sizes (no DENEB weights are released; the arithmetic is the same):
OpenCLIP ViT-L/14 (GELU), a RoBERTa-base-sized sentence encoder with the 13-layer ScalarMix, two 3-layer Sim-Vec
transformers of width 1536 and the 4608 -> 1536 -> 768 -> 1 head; RefPAC-S++ is CLIP ViT-B/32 with a random LoRA
adapter merged. Pass `--deneb-model DIR` / `--pacs-model DIR` to time converted or trained models instead.

Both metrics encode each distinct image and text once. DENEB is timed in both modes: `per_item` (default) and
`official` (chunks of `--official-batch-size`). Timed runs are interleaved, `--repeats` rounds, best kept. The time
ratio to RefPAC-S++ is printed beside the FLOP ratio: the FLOP ratio is what the method costs (ViT-L/14 against
ViT-B/32 dominates it), the rest is how well each part runs.

    python benchmarks/benchmark_deneb.py --images 8 --candidates 2 --references 5 --repeats 2
"""

import argparse
import tempfile
import time
from pathlib import Path

import torch
from benchmark_polos import random_ref_pac_s_pp, roberta_flops
from benchmarking_utils import (
    WORDS,
    best_times,
    clip_flops,
    distinct_inputs,
    layer_macs,
    load_average,
    make_workload,
    matmul_peak_gflops,
    positive_int,
    print_stage_table,
    profile_stages,
    workload_columns,
)

from modeling_pacs.cli.arguments import add_example
from modeling_pacs.loading import load_model, resolve_device
from modeling_pacs.models.configuration_deneb import DenebConfig
from modeling_pacs.models.modeling_deneb import DenebModel
from modeling_pacs.testing.roberta import build_tiny_roberta_tokenizer
from modeling_pacs.tokenization import build_clip_tokenizer


def random_deneb(seed: int = 0) -> DenebModel:
    """The authors' geometry with random weights; the BPE is trained on the workload's words, so each word is one
    token as in RoBERTa's vocabulary (token counts, not ids, decide the cost)."""
    torch.manual_seed(seed)
    model = DenebModel(DenebConfig()).eval()
    model.clip_tokenizer = build_clip_tokenizer()
    model.text_tokenizer = build_tiny_roberta_tokenizer(vocab_size=2000, corpus=[" ".join(WORDS)] * 4)
    return model


def sim_vec_flops(config: DenebConfig, reference_counts: list[int]) -> float:
    """FLOPs of the pair projections, both Sim-Vec transformers (post-norm layers: the same multiply-adds) and the
    head, for items with these reference counts."""
    width, hidden = 2 * config.hidden_size, config.hidden_size
    counts = torch.tensor(reference_counts, dtype=torch.float64)
    macs = config.num_sequence_layers * (
        layer_macs(counts + 2, width, config.sequence_intermediate_size, False).sum()
        + layer_macs(counts + 1, width, config.sequence_intermediate_size, False).sum()
    )
    macs += (4 * counts + 2).sum() * hidden * hidden  # the pair projections
    sizes = [config.feature_size, *config.hidden_sizes, 1]
    macs += len(reference_counts) * sum(a * b for a, b in zip(sizes[:-1], sizes[1:]))
    return 2.0 * float(macs)


def profile_deneb(deneb: DenebModel, items, device: torch.device, peak: float) -> list[tuple[str, float, float]]:
    """Each stage of `DenebModel.score` (`per_item`) timed on its own: `(stage, seconds, FLOPs)`."""
    rows = []
    for stage, seconds, _, _, rate in profile_stages(deneb.clip_encoder, items, device, peak):
        if not stage.startswith("scoring"):
            rows.append((f"CLIP {stage}", seconds, rate * seconds * 1e9))
    _, texts = distinct_inputs(items)
    start = time.perf_counter()
    token_ids = deneb.tokenize_sentences(texts, [f"text {index}" for index in range(len(texts))])
    rows.append(("RoBERTa tokenisation", time.perf_counter() - start, 0.0))
    start = time.perf_counter()
    deneb.encode_sentences(token_ids, 256)
    lengths = torch.tensor([len(ids) for ids in token_ids])
    rows.append(
        ("RoBERTa + ScalarMix (sorted, batch 256)", time.perf_counter() - start, roberta_flops(deneb.config, lengths))
    )
    hidden = deneb.config.hidden_size
    counts = [len(references) for _, _, references in items]
    generator = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        start = time.perf_counter()
        for count in sorted(set(counts)):
            rows_of_count = sum(1 for value in counts if value == count)
            features = [torch.randn(rows_of_count, hidden, generator=generator) for _ in range(2)]
            references = [torch.randn(rows_of_count, count, hidden, generator=generator) for _ in range(2)]
            deneb.item_scores(features[0], features[1], references[0], features[1], references[1])
        rows.append(("Sim-Vec transformers + head", time.perf_counter() - start, sim_vec_flops(deneb.config, counts)))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=positive_int, default=8)
    parser.add_argument("--candidates", type=positive_int, default=2, help="candidates per image")
    parser.add_argument("--references", type=positive_int, default=5, help="references per image")
    parser.add_argument("--repeats", type=positive_int, default=2, help="interleaved timed rounds (best is kept)")
    parser.add_argument("--official-batch-size", type=positive_int, default=32)
    parser.add_argument("--deneb-model", help="a DENEB directory (default: random, the authors' geometry)")
    parser.add_argument("--pacs-model", help="a PAC-S++ directory or alias (default: random ViT-B/32 + LoRA)")
    parser.add_argument("--device", default="auto", help="'auto' (CUDA when present), 'cpu', 'cuda'")
    parser.add_argument("--no-profile", action="store_true", help="skip the per-stage profile")
    parser.add_argument("--threads", type=positive_int, help="torch intra-op threads (default: one per core)")
    add_example(parser, "python benchmarks/benchmark_deneb.py --images 8 --candidates 2 --references 5 --repeats 2")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    device = resolve_device(args.device)
    deneb = load_model(args.deneb_model, device=str(device)) if args.deneb_model else random_deneb().to(device)
    pacs = load_model(args.pacs_model, device=str(device)) if args.pacs_model else random_ref_pac_s_pp().to(device)
    weights = "given models" if args.deneb_model and args.pacs_model else "random weights at the authors' sizes"
    print(f"load average before: {load_average()}")
    with tempfile.TemporaryDirectory() as directory:
        items = make_workload(Path(directory), args.images, args.candidates, args.references)
        images, candidates, references = workload_columns(items)
        print(
            f"workload: {args.images} images x {args.candidates} candidates x {args.references} references = "
            f"{len(items)} samples; device={device}, threads={torch.get_num_threads()}, {weights}"
        )
        runs = {
            "RefPAC-S++ (ViT-B/32)": lambda: pacs.score(images, candidates, references, progress=False),
            "DENEB (per_item)": lambda: deneb.score(images, candidates, references, progress=False),
            f"DENEB (official, B={args.official_batch_size})": lambda: deneb.score(
                images, candidates, references, mode="official", batch_size=args.official_batch_size, progress=False
            ),
        }
        timings = best_times(runs, args.repeats)
        seconds = {name: value for name, (value, _) in timings.items()}
        stages, peak = [], 0.0
        if not args.no_profile:
            peak = matmul_peak_gflops(device, torch.float32)
            stages = profile_deneb(deneb, items, device, peak)
        refpacs_flops, clip_part = clip_flops(pacs, items), clip_flops(deneb.clip_encoder, items)
    print(f"load average after: {load_average()}")
    _, texts = distinct_inputs(items)
    token_lengths = torch.tensor([len(ids) for ids in deneb.text_tokenizer(texts)["input_ids"]])
    deneb_flops = (
        clip_part
        + roberta_flops(deneb.config, token_lengths)
        + sim_vec_flops(deneb.config, [len(refs) for refs in references])
    )
    reference = "RefPAC-S++ (ViT-B/32)"
    header = f"{'ms/sample':>10s} {'seconds':>8s} {'time ratio':>11s} {'GFLOP/sample':>13s} {'FLOP ratio':>11s}"
    print(f"\n{'metric':40s} {header}")
    for name, value in seconds.items():
        flops = refpacs_flops if name == reference else deneb_flops
        print(
            f"{name:40s} {1000 * value / len(items):10.2f} {value:8.2f} {value / seconds[reference]:10.2f}x "
            f"{flops / len(items) / 1e9:13.2f} {flops / refpacs_flops:10.2f}x"
        )
    print(
        "(DENEB's FLOPs: OpenCLIP ViT-L/14 on each distinct image and text, RoBERTa on each distinct text, the Sim-Vec "
        "transformers and head once per item; `official` re-runs RoBERTa per chunk)"
    )
    if stages:
        print_stage_table("per-stage profile of DENEB (per_item)", stages, peak, len(items))
        total = sum(row[1] for row in stages)
        print(f"{'sum of stages (serial)':44s} {total:8.3f}   vs end to end {seconds['DENEB (per_item)']:.3f} s")


if __name__ == "__main__":
    main()
