"""Milliseconds per sample of DENEB and RefPAC-S++ (ViT-B/32) in one run, on the same workload and machine, with a
per-stage profile of DENEB (seconds, GFLOP, GFLOP/s and share of this machine's measured fp32 matmul peak).

Default weights are random, at the authors' sizes (no DENEB weights are released; the arithmetic is the same):
OpenCLIP ViT-L/14 (GELU), a RoBERTa-base-sized sentence encoder with the 13-layer ScalarMix, two 3-layer Sim-Vec
transformers of width 1536 and the 4608 -> 1536 -> 768 -> 1 head; RefPAC-S++ is CLIP ViT-B/32 with a random LoRA
adapter merged. Pass `--deneb-model DIR` / `--pacs-model DIR` to time converted or trained models instead.

Both metrics encode each distinct image and text once. DENEB is timed in both modes: `per_item` (default) and
`official` (chunks of `--official-batch-size`). Timed runs are interleaved, `--repeats` rounds, best kept. The time
ratio to RefPAC-S++ is printed beside the FLOP ratio: the FLOP ratio is what the method costs (ViT-L/14 against
ViT-B/32 dominates it), the rest is how well each part runs. The profile splits the Sim-Vec stage into the pair
vectors, the two transformers and the head, in the calls `score` makes, and re-times it as the engine ran it before
`fast_deneb` (the modules, 32 items a call: a comparison row, not summed). The figures of
docs/concepts/polos-pearl-cost.md#deneb (about 3 minutes on a quiet 2-core machine):

    python benchmarks/benchmark_deneb.py --images 16 --candidates 8 --references 5 --repeats 2
"""

import time

import torch
from benchmarking_utils import (
    NOT_SUMMED,
    WORDS,
    clip_flops,
    compare_with_ref_pac_s_pp,
    comparison_parser,
    distinct_inputs,
    layer_macs,
    profile_stages,
    roberta_flops,
    synchronize,
)

from modeling_pacs.models.configuration_deneb import DenebConfig
from modeling_pacs.models.modeling_deneb import DenebModel, sim_vec_items_per_call
from modeling_pacs.models.scoring_deneb import sim_vec_sequences
from modeling_pacs.testing.roberta import build_tiny_roberta_tokenizer
from modeling_pacs.tokenization import build_clip_tokenizer

PREVIOUS_BATCH_SIZE = 32  # items per Sim-Vec call in `per_item` mode before `fast_deneb` (the chunk default)


def random_deneb(seed: int = 0) -> DenebModel:
    """The authors' geometry with random weights; the BPE is trained on the workload's words, so each word is one
    token as in RoBERTa's vocabulary (token counts, not ids, decide the cost)."""
    torch.manual_seed(seed)
    model = DenebModel(DenebConfig()).eval()
    model.clip_tokenizer = build_clip_tokenizer()
    model.text_tokenizer = build_tiny_roberta_tokenizer(vocab_size=2000, corpus=[" ".join(WORDS)] * 4)
    return model


def sim_vec_flops(config: DenebConfig, reference_counts: list[int], class_token_only: bool = True) -> float:
    """FLOPs of the pair projections, both Sim-Vec transformers (post-norm layers: the same multiply-adds) and the
    head, for items with these reference counts; with `class_token_only`, the last layer as `fast_deneb` runs it."""
    width, hidden, layers = 2 * config.hidden_size, config.hidden_size, config.num_sequence_layers
    counts = torch.tensor(reference_counts, dtype=torch.float64)
    macs = 0.0
    for tokens in (counts + 2, counts + 1):  # class token, image pair and references; class token and references
        macs += (layers - 1) * layer_macs(tokens, width, config.sequence_intermediate_size, False).sum()
        macs += layer_macs(tokens, width, config.sequence_intermediate_size, class_token_only).sum()
    macs += (4 * counts + 2).sum() * hidden * hidden  # the pair projections
    sizes = [config.feature_size, *config.hidden_sizes, 1]
    macs += len(reference_counts) * sum(a * b for a, b in zip(sizes[:-1], sizes[1:]))
    return 2.0 * float(macs)


def deneb_flops(deneb: DenebModel, items) -> float:
    """OpenCLIP ViT-L/14 on each distinct image and text, RoBERTa on each distinct text, Sim-Vec and head per item."""
    _, texts = distinct_inputs(items)
    token_lengths = torch.tensor([len(ids) for ids in deneb.text_tokenizer(texts)["input_ids"]])
    return (
        clip_flops(deneb.clip_encoder, items)
        + roberta_flops(deneb.config, token_lengths)
        + sim_vec_flops(deneb.config, [len(references) for _, _, references in items])
    )


def official_deneb_flops(deneb: DenebModel, items, batch_size: int) -> float:
    """`deneb_flops` with RoBERTa as `official` runs it: once per distinct sentence of each chunk (candidates, then
    references cut to the chunk's smallest count), not once per distinct text of the workload."""
    per_item = deneb_flops(deneb, items)
    _, texts = distinct_inputs(items)
    lengths = dict(zip(texts, (len(ids) for ids in deneb.text_tokenizer(texts)["input_ids"])))
    chunk_lengths = []
    for start in range(0, len(items), batch_size):
        chunk = items[start : start + batch_size]
        count = min(len(references) for _, _, references in chunk)
        sentences = [caption for _, caption, _ in chunk]
        sentences += [reference for _, _, references in chunk for reference in references[:count]]
        chunk_lengths += [lengths[sentence] for sentence in dict.fromkeys(sentences)]
    distinct_lengths = torch.tensor(list(lengths.values()))
    chunked = roberta_flops(deneb.config, torch.tensor(chunk_lengths)) - roberta_flops(deneb.config, distinct_lengths)
    return per_item + chunked


def timed(function, *arguments) -> tuple[float, object]:
    start = time.perf_counter()
    result = function(*arguments)
    return time.perf_counter() - start, result


def sim_vec_batches(counts: list[int], batch_size, width: int, device: torch.device) -> list[tuple]:
    """Random `item_scores` inputs of the real shapes, in the batches `score` makes: items of one reference count,
    `batch_size(count)` at a time."""
    generator = torch.Generator().manual_seed(0)
    batches = []
    for count in sorted(set(counts)):
        rows_of_count = sum(1 for value in counts if value == count)
        for start in range(0, rows_of_count, batch_size(count)):
            size = min(batch_size(count), rows_of_count - start)
            shapes = [(size, width)] * 2 + [(size, count, width), (size, width), (size, count, width)]
            batches.append(tuple(torch.randn(shape, generator=generator).to(device) for shape in shapes))
    return batches


def profile_sim_vec(deneb: DenebModel, counts: list[int], device: torch.device) -> list[tuple[str, float, float]]:
    """The Sim-Vec stage as `score` runs it in `per_item` mode (pair vectors, both transformers, head), and the
    previous engine's (the modules, `PREVIOUS_BATCH_SIZE` items a call) for comparison."""
    config, hidden = deneb.config, deneb.config.hidden_size
    projections = (deneb.clip_projection, deneb.text_projection)
    weights = [tensor for projection in projections for tensor in (projection.weight, projection.bias)]
    seconds = {"projections": 0.0, "transformers": 0.0, "head": 0.0}
    with torch.inference_mode():
        batches = sim_vec_batches(counts, sim_vec_items_per_call, hidden, device)
        deneb.item_scores(*batches[0])  # builds the packed copy outside the timing
        fast = deneb.fast_sim_vec()
        encoders = (deneb.clip_sequence_encoder, deneb.text_sequence_encoder)
        if fast is not None:
            encoders = (fast.clip_sequence_encoder, fast.text_sequence_encoder)
        head = deneb.head if fast is None else fast.head
        for batch in batches:
            elapsed, (clip_sequence, text_sequence, image_pair) = timed(sim_vec_sequences, *batch, *weights)
            seconds["projections"] += elapsed
            start = time.perf_counter()
            summary = torch.cat([encoders[0](clip_sequence), encoders[1](text_sequence), image_pair], dim=-1)
            synchronize(device)
            seconds["transformers"] += time.perf_counter() - start
            elapsed, _ = timed(head, summary)
            seconds["head"] += elapsed
        previous = sim_vec_batches(counts, lambda count: PREVIOUS_BATCH_SIZE, hidden, device)
        deneb.fast_cpu_encoders = False
        try:
            previous_seconds = sum(timed(deneb.item_scores, *batch)[0] for batch in previous)
        finally:
            deneb.fast_cpu_encoders = True
    total = sim_vec_flops(config, counts)
    head_flops = 2.0 * len(counts) * sum(layer.weight.numel() for layer in deneb.head.layers)
    projection_flops = 2.0 * sum(4 * count + 2 for count in counts) * hidden * hidden
    return [
        ("Sim-Vec pair vectors (projections)", seconds["projections"], projection_flops),
        ("Sim-Vec transformers (2 x 3 layers)", seconds["transformers"], total - head_flops - projection_flops),
        ("head (4608 -> 1536 -> 768 -> 1)", seconds["head"], head_flops),
        (
            f"Sim-Vec + head, modules, {PREVIOUS_BATCH_SIZE} a call {NOT_SUMMED}",
            previous_seconds,
            sim_vec_flops(config, counts, class_token_only=False),
        ),
    ]


def profile_deneb(deneb: DenebModel, items, device: torch.device, peak: float) -> list[tuple[str, float, float]]:
    """Each stage of `DenebModel.score` (`per_item`) timed on its own: `(stage, seconds, FLOPs)`."""
    rows = []
    for stage, seconds, _, _, rate in profile_stages(deneb.clip_encoder, items, device, peak):
        if not stage.startswith("scoring"):
            rows.append((f"CLIP {stage}", seconds, rate * seconds * 1e9))
    _, texts = distinct_inputs(items)
    seconds, token_ids = timed(deneb.tokenize_sentences, texts, [f"text {index}" for index in range(len(texts))])
    rows.append(("RoBERTa tokenisation", seconds, 0.0))
    lengths = torch.tensor([len(ids) for ids in token_ids])
    seconds, _ = timed(deneb.encode_sentences, token_ids, 256)
    rows.append(("RoBERTa + ScalarMix (sorted, batch 256)", seconds, roberta_flops(deneb.config, lengths)))
    return rows + profile_sim_vec(deneb, [len(references) for _, _, references in items], device)


def main():
    example = "python benchmarks/benchmark_deneb.py --images 8 --candidates 2 --references 5 --repeats 2"
    args = comparison_parser(__doc__, "DENEB", images=8, repeats=2, example=example).parse_args()
    compare_with_ref_pac_s_pp(
        args,
        "DENEB",
        random_deneb,
        deneb_flops,
        profile_deneb,
        "(DENEB's FLOPs: OpenCLIP ViT-L/14 on each distinct image and text, RoBERTa on each distinct text (`official`: "
        "of each chunk), the Sim-Vec transformers and head once per item)",
        official_flops=official_deneb_flops,
    )


if __name__ == "__main__":
    main()
