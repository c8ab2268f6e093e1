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

import time

import torch
from benchmarking_utils import (
    WORDS,
    clip_flops,
    compare_with_ref_pac_s_pp,
    comparison_parser,
    distinct_inputs,
    profile_stages,
    roberta_flops,
    vit_b32_clip_config,
)

from modeling_pacs.models.configuration_polos import PolosConfig
from modeling_pacs.models.modeling_polos import PolosModel
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


def polos_flops(polos: PolosModel, items) -> float:
    """Its CLIP work (RefPAC-S++'s), RoBERTa on each distinct text, the head on each (candidate, reference) pair."""
    _, texts = distinct_inputs(items)
    token_lengths = torch.tensor([len(ids) for ids in polos.text_tokenizer(texts)["input_ids"]])
    pairs = sum(len(refs) for _, _, refs in items)
    return clip_flops(polos.clip_encoder, items) + roberta_flops(polos.config, token_lengths) + head_flops(polos, pairs)


def transformers_forward_run(polos: PolosModel, images, candidates, references) -> dict:
    """Polos on transformers' RoBERTa forward and the module head (`--transformers-forward`)."""

    def run():
        polos.fast_cpu_encoders = False
        try:
            return polos.score(images, candidates, references, progress=False)
        finally:
            polos.fast_cpu_encoders = True

    return {"Polos (per_item), transformers' forward": run}


def main():
    example = "python benchmarks/benchmark_polos.py --images 20 --candidates 2 --references 5 --repeats 3"
    parser = comparison_parser(__doc__, "Polos", images=20, repeats=3, example=example)
    parser.add_argument("--transformers-forward", action="store_true", help="also time fast_cpu_encoders=False")
    args = parser.parse_args()
    compare_with_ref_pac_s_pp(
        args,
        "Polos",
        random_polos,
        polos_flops,
        profile_polos,
        "(Polos's FLOPs: its CLIP work, which equals RefPAC-S++'s, plus RoBERTa on each distinct text and the head on "
        "each (candidate, reference) pair; `official` runs RoBERTa once per distinct text of each chunk)",
        transformers_forward_run if args.transformers_forward else None,
    )


if __name__ == "__main__":
    main()
