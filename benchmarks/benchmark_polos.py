"""Milliseconds per sample of Polos and RefPAC-S++ in one run, on the same workload and machine, with a per-stage
profile of Polos (seconds, GFLOP, GFLOP/s and share of this machine's measured fp32 matmul peak).

Default weights are random, at the released sizes (the real checkpoints cannot be downloaded here; the arithmetic
is the same): CLIP ViT-B/32 for both metrics (RefPAC-S++ with a random LoRA adapter merged, as at inference), and
for Polos a RoBERTa-base-sized sentence encoder with the 13-layer ScalarMix and the 6144 -> 2304 -> 1152 -> 1 head.
Pass `--polos-model DIR` / `--pacs-model DIR` to time converted or trained models instead.

Both metrics encode each distinct image and text once. Polos is timed in both modes: `per_item` (default) and
`official` (chunks of `--official-batch-size`). The timed runs are interleaved, `--repeats` rounds, best kept, so a
burst of load from other jobs hits every metric alike. The ratio to RefPAC-S++ is printed beside the FLOP ratio: the
FLOP ratio is what the method costs, the rest is how well each part runs. `--transformers-forward` also times Polos
on transformers' RoBERTa forward and the module head (`fast_cpu_encoders=False`, the previous engine).
Polos's authors report 6.91 ms vs 4.45 ms per sample (RTX 3090).

    python benchmarks/benchmark_polos.py --images 20 --candidates 2 --references 5 --repeats 3
"""

import argparse
import tempfile
import time
from pathlib import Path

import torch
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
    vit_b32_clip_config,
    workload_columns,
)

from modeling_pacs.cli.arguments import add_example
from modeling_pacs.loading import load_model, resolve_device
from modeling_pacs.models.configuration_polos import PolosConfig
from modeling_pacs.models.modeling_polos import PolosModel
from modeling_pacs.testing.pacs import make_tiny_model
from modeling_pacs.testing.polos import build_tiny_roberta_tokenizer
from modeling_pacs.tokenization import build_clip_tokenizer


def random_polos(seed: int = 0) -> PolosModel:
    """Released Polos geometry with random weights; the BPE is trained on the workload's words, so each word is
    one token as in RoBERTa's vocabulary (token counts, not ids, decide the cost)."""
    torch.manual_seed(seed)
    model = PolosModel(PolosConfig(clip_config=vit_b32_clip_config())).eval()
    model.clip_tokenizer = build_clip_tokenizer()
    model.text_tokenizer = build_tiny_roberta_tokenizer(vocab_size=2000, corpus=[" ".join(WORDS)] * 4)
    return model


def random_ref_pac_s_pp():
    model = make_tiny_model(variant="pac_s_pp", clip_config=vit_b32_clip_config()).eval()
    model.clip = model.peft_model.merge_and_unload()
    model._peft_model = None
    return model


def roberta_flops(config, lengths: torch.Tensor) -> float:
    """FLOPs of the sentence encoder's layers over these real lengths (embeddings and ScalarMix not counted)."""
    text = config.text_config
    per_layer = layer_macs(lengths.double(), text.hidden_size, text.intermediate_size, False).sum()
    return 2.0 * float(per_layer) * text.num_hidden_layers


def head_flops(model: PolosModel, pairs: int) -> float:
    return 2.0 * pairs * sum(layer.weight.numel() for layer in model.head.layers)


def profile_polos(polos: PolosModel, items, device: torch.device, peak: float) -> list[tuple[str, float, float]]:
    """Each stage of `PolosModel.score` (`per_item`) timed on its own: `(stage, seconds, FLOPs)`."""
    rows = []
    for stage, seconds, _, _, rate in profile_stages(polos.clip_encoder, items, device, peak):
        if not stage.startswith("scoring"):
            rows.append((f"CLIP {stage}", seconds, rate * seconds * 1e9))
    _, texts = distinct_inputs(items)
    start = time.perf_counter()
    token_ids = polos.tokenize_sentences(texts, [f"text {index}" for index in range(len(texts))])
    rows.append(("RoBERTa tokenisation", time.perf_counter() - start, 0.0))
    order = sorted(range(len(token_ids)), key=lambda index: -len(token_ids[index]))
    batches = [[token_ids[index] for index in order[start : start + 256]] for start in range(0, len(order), 256)]
    encoding = mixing = 0.0
    with torch.inference_mode():
        polos.sentence_statistics(batches[0][:2])  # builds the packed copy outside the timing
        for batch in batches:
            start = time.perf_counter()
            statistics = polos.sentence_statistics(batch)
            middle = time.perf_counter()
            polos.scalar_mix.first_position(statistics, torch.arange(len(batch), device=device))
            encoding, mixing = encoding + middle - start, mixing + time.perf_counter() - middle
        lengths = torch.tensor([len(ids) for ids in token_ids])
        rows.append(("RoBERTa encoding (sorted, batch 256)", encoding, roberta_flops(polos.config, lengths)))
        rows.append(("ScalarMix (13 layers, CLS)", mixing, 0.0))
        pairs = sum(len(refs) for _, _, refs in items)
        text_width = polos.config.text_config.hidden_size
        clip_width = polos.config.clip_config.projection_dim
        generator = torch.Generator().manual_seed(0)
        text = [torch.randn(pairs, text_width, generator=generator).to(device) for _ in range(2)]
        clip = [torch.randn(pairs, clip_width, generator=generator).to(device) for _ in range(3)]
        polos.pair_scores(text[0][:2], text[1][:2], *(part[:2] for part in clip))
        start = time.perf_counter()
        polos.pair_scores(*text, *clip)
        rows.append((f"head ({pairs} pairs)", time.perf_counter() - start, head_flops(polos, pairs)))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=positive_int, default=20)
    parser.add_argument("--candidates", type=positive_int, default=2, help="candidates per image")
    parser.add_argument("--references", type=positive_int, default=5, help="references per image")
    parser.add_argument("--repeats", type=positive_int, default=3, help="interleaved timed rounds (best is kept)")
    parser.add_argument("--official-batch-size", type=positive_int, default=32)
    parser.add_argument("--polos-model", help="a Polos directory or alias (default: random, released geometry)")
    parser.add_argument("--pacs-model", help="a PAC-S++ directory or alias (default: random ViT-B/32 + LoRA)")
    parser.add_argument("--device", default="auto", help="'auto' (CUDA when present), 'cpu', 'cuda'")
    parser.add_argument("--transformers-forward", action="store_true", help="also time fast_cpu_encoders=False")
    parser.add_argument("--no-profile", action="store_true", help="skip the per-stage profile")
    parser.add_argument("--threads", type=positive_int, help="torch intra-op threads (default: one per core)")
    add_example(parser, "python benchmarks/benchmark_polos.py --images 20 --candidates 2 --references 5 --repeats 3")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    device = resolve_device(args.device)
    polos = load_model(args.polos_model, device=str(device)) if args.polos_model else random_polos().to(device)
    pacs = load_model(args.pacs_model, device=str(device)) if args.pacs_model else random_ref_pac_s_pp().to(device)
    weights = "given models" if args.polos_model and args.pacs_model else "random weights at the released sizes"
    print(f"load average before: {load_average()}")
    with tempfile.TemporaryDirectory() as directory:
        items = make_workload(Path(directory), args.images, args.candidates, args.references)
        images, candidates, references = workload_columns(items)
        print(
            f"workload: {args.images} images x {args.candidates} candidates x {args.references} references = "
            f"{len(items)} samples; device={device}, threads={torch.get_num_threads()}, {weights}"
        )

        def transformers_forward():
            polos.fast_cpu_encoders = False
            try:
                return polos.score(images, candidates, references, progress=False)
            finally:
                polos.fast_cpu_encoders = True

        runs = {
            "RefPAC-S++": lambda: pacs.score(images, candidates, references, progress=False),
            "Polos (per_item)": lambda: polos.score(images, candidates, references, progress=False),
            f"Polos (official, B={args.official_batch_size})": lambda: polos.score(
                images, candidates, references, mode="official", batch_size=args.official_batch_size, progress=False
            ),
        }
        if args.transformers_forward:
            runs["Polos (per_item), transformers' forward"] = transformers_forward
        timings = best_times(runs, args.repeats)
        seconds = {name: value for name, (value, _) in timings.items()}
        stages, peak = [], 0.0
        if not args.no_profile:
            for _ in range(args.repeats):
                peak = max(peak, matmul_peak_gflops(device, torch.float32))
                rounds = profile_polos(polos, items, device, peak)
                stages = rounds if not stages else [min(a, b, key=lambda row: row[1]) for a, b in zip(stages, rounds)]
        refpacs_flops, clip_part = clip_flops(pacs, items), clip_flops(polos.clip_encoder, items)
    print(f"load average after: {load_average()}")
    _, texts = distinct_inputs(items)
    token_lengths = torch.tensor([len(ids) for ids in polos.text_tokenizer(texts)["input_ids"]])
    pairs = sum(len(refs) for refs in references)
    polos_flops = clip_part + roberta_flops(polos.config, token_lengths) + head_flops(polos, pairs)
    header = f"{'ms/sample':>10s} {'seconds':>8s} {'time ratio':>11s} {'GFLOP/sample':>13s} {'FLOP ratio':>11s}"
    print(f"\n{'metric':40s} {header}")
    for name, value in seconds.items():
        flops = refpacs_flops if name == "RefPAC-S++" else polos_flops
        print(
            f"{name:40s} {1000 * value / len(items):10.2f} {value:8.2f} {value / seconds['RefPAC-S++']:10.2f}x "
            f"{flops / len(items) / 1e9:13.2f} {flops / refpacs_flops:10.2f}x"
        )
    print(
        "(Polos's FLOPs: its CLIP work, which equals RefPAC-S++'s, plus RoBERTa on each distinct text and the head "
        "on each (candidate, reference) pair; `official` runs RoBERTa once per distinct text of each chunk)"
    )
    if stages:
        print_stage_table("per-stage profile of Polos (per_item)", stages, peak, len(items))
        total = sum(row[1] for row in stages)
        print(f"{'sum of stages (serial)':44s} {total:8.3f}   vs end to end {seconds['Polos (per_item)']:.3f} s")


if __name__ == "__main__":
    main()
