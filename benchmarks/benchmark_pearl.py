"""Pearl's cost per sample against RefPAC-S++, in one process, with a per-stage profile (seconds, GFLOP, GFLOP/s and
share of this machine's measured fp32 matmul peak). Random weights: the arithmetic is the real one.

1. Head only, on cached features: the default 103.55 M Pearl head (docs/spec/pearl.md#vss) on random features of the
   default encoders' shapes (CLIP 512, BEiT-3 768, BLIP-2 32x256, Stella 768), reference-free and with `--references`.
2. End to end: images and captions in, scores out, through the four encoders and the default head, against
   RefPAC-S++ ViT-B/32 on the same workload. `--encoders full` (default) builds the encoders at their real sizes with
   random weights: PAC-S++ ViT-B/32, BLIP-2 `blip2-itm-vit-g` (EVA ViT-g/14 and the Q-Former), BEiT-3 base, and for
   Stella 400M (whose "new" architecture is Hub remote code this repository does not carry) a BERT stand-in of its
   geometry (24 layers, width 1024, MLP 4096) with the 1024 -> 768 Dense; about 16 GB of memory (the encoders'
   weights, 9 GB, and their packed copies for oneDNN). The head then sees the features it sees in real use (32
   BLIP-2 tokens of 256 dimensions, ...). `--encoders tiny`: the tiny test encoders (width 32, 4 BLIP-2 tokens),
   whose small zero-padded features make the head cheaper than with real ones.

Every timed run is interleaved with the others, `--repeats` rounds, best kept (other jobs' load hits them alike);
the load average is printed. Time ratios to RefPAC-S++ are printed beside FLOP ratios: the FLOP ratio is what the
method costs, the rest is how well each part runs. Encoder FLOPs are torch's `FlopCounterMode` count of their
matrix products and convolutions (attention products on CPU are not counted: a few per cent); CLIP's and the head's
are counted from their shapes. The paper: Pearl 8.2 ms/sample, RefPAC-S 4.45 ms on an RTX 3090.

    python benchmarks/benchmark_pearl.py --items 8 --references 5 --repeats 3
"""

import argparse
import io
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch
import transformers
from benchmarking_utils import (
    WORDS,
    best_times,
    clip_flops,
    distinct_inputs,
    load_average,
    make_workload,
    matmul_peak_gflops,
    print_stage_table,
    text_flops,
    vision_flops_per_image,
    vit_b32_clip_config,
    workload_columns,
)
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from modeling_pacs import PACSModel, PearlConfig, PearlModel
from modeling_pacs.cli.arguments import add_example
from modeling_pacs.encoders.clip import PACSEncoder
from modeling_pacs.models.fast_clip import plain_linears
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


# ------------------------------------------------------------------------------------------------ head stages
class StageClock:
    """Seconds and FLOPs per stage, accumulated by wrapping the callables of a `FastPearlHead`."""

    def __init__(self):
        self.seconds, self.flops = defaultdict(float), defaultdict(float)
        self.stages = []  # in the order they were wrapped

    def wrap(self, owner, attribute: str, stage: str, flops):
        function = getattr(owner, attribute)
        if stage not in self.stages:
            self.stages.append(stage)

        def timed(*args):
            start = time.perf_counter()
            result = function(*args)
            self.seconds[stage] += time.perf_counter() - start
            self.flops[stage] += flops(*args)
            return result

        setattr(owner, attribute, timed)

    def reset(self):
        self.seconds.clear()
        self.flops.clear()


def linear_flops(linear: nn.Linear):
    return lambda x: 2.0 * x.numel() * linear.out_features


def instrument(model: PearlModel) -> StageClock:
    """Wrap every stage of the model's fast head with a clock (HadamardNet per GEM, the other ARSM matrices, the
    VSS transformer, its cross-attention, the heads)."""
    clock = StageClock()
    with torch.inference_mode():
        fast = model.fast_head()
    if fast is None:
        raise SystemExit("the Pearl fast path does not apply here (it needs fp32 on CPU with oneDNN)")
    config = model.config
    for group, modules, arsms in (
        ("image", model.image_arsms, fast.image_arsms),
        ("reference", model.reference_arsms, fast.reference_arsms),
    ):
        for name, arsm in arsms.items():
            module = modules[name]
            convolutions = [m for m in module.hadamard_net.network if isinstance(m, nn.Conv2d)]
            macs = sum(convolution.weight.numel() for convolution in convolutions)
            clock.wrap(
                arsm,
                "hadamard_net",
                f"HadamardNet, {group} tokens (real coordinates)",
                lambda u, c, m=macs: 2.0 * u.numel() * m,
            )
            clock.wrap(arsm, "adapter_in", "adapters (+ DiffNet, projections)", linear_flops(module.adapter[0]))
            clock.wrap(arsm, "adapter_out", "adapters (+ DiffNet, projections)", linear_flops(module.adapter[3]))
            if arsm.projection is not None:
                clock.wrap(
                    arsm, "projection", "adapters (+ DiffNet, projections)", linear_flops(module.input_projection)
                )
    width, ffn, queries = config.token_dim, config.ffn_dim, config.num_queries

    def transformer_flops(tokens):
        batch, length, _ = tokens.shape
        per_layer = 2 * batch * length * (4 * width**2 + 2 * width * ffn) + 4 * batch * length**2 * width
        return float(per_layer * len(fast.vss.layers))

    def cross_attention_flops(hidden):
        batch, length, _ = hidden.shape
        return float(
            2 * batch * length * 2 * width**2 + 4 * batch * queries * length * width + 2 * batch * queries * width**2
        )

    def head_flops(head):
        linears = [m for m in head if isinstance(m, nn.Linear)]
        return lambda x: 2.0 * x.shape[0] * sum(linear.weight.numel() for linear in linears)

    clock.wrap(fast.vss, "transformer", "VSS transformer (2 layers)", transformer_flops)
    clock.wrap(fast.vss, "cross_attention", "VSS cross-attention (8 queries)", cross_attention_flops)
    clock.wrap(fast, "image_head", "image and reference heads", head_flops(model.image_head))
    clock.wrap(fast, "reference_head", "image and reference heads", head_flops(model.reference_head))
    return clock


def profile_head(head: PearlModel, clock: StageClock, features: dict, calls: int, rounds: int, sample_peak):
    """`(best total seconds, per-stage rows)` of `calls` forwards, best of `rounds` per stage (the matmul peak is
    sampled before each round: the load of other jobs comes and goes)."""
    best_total, best_stages = float("inf"), {}
    for _ in range(rounds):
        sample_peak()
        clock.reset()
        start = time.perf_counter()
        with torch.inference_mode():
            for _ in range(calls):
                head(**features)
        total = time.perf_counter() - start
        best_total = min(best_total, total)
        for stage, seconds in clock.seconds.items():
            if stage not in best_stages or seconds < best_stages[stage][0]:
                best_stages[stage] = (seconds, clock.flops[stage])
    rows = [(stage, *best_stages[stage]) for stage in clock.stages if stage in best_stages]
    rows.append(
        ("rest (token assembly, fusion; best-round difference)", max(0.0, best_total - sum(r[1] for r in rows)), 0.0)
    )
    return best_total, rows


# ------------------------------------------------------------------------------------------------ real-size encoders
def word_vocabulary(folder: Path) -> Path:
    """A BERT word-piece vocabulary in which every workload word is one token, as in the real vocabularies."""
    folder.mkdir(parents=True, exist_ok=True)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[DEC]", "[EMPTY]", *sorted(set(WORDS))]
    (folder / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    return folder / "vocab.txt"


def full_size_encoders(folder: Path, seed: int = 0) -> dict:
    """The four Pearl encoders at their real sizes, random weights (see the module doc)."""
    import sentencepiece
    from transformers import (
        BertConfig,
        BertModel,
        BertTokenizer,
        Blip2Config,
        Blip2TextModelWithProjection,
        Blip2VisionModelWithProjection,
        XLMRobertaTokenizer,
    )

    from modeling_pacs.encoders.beit3 import BEiT3Config, BEiT3ForRetrieval, BEiT3RetrievalEncoder
    from modeling_pacs.encoders.blip2 import BLIP2Encoder
    from modeling_pacs.encoders.stella import StellaEncoder

    torch.manual_seed(seed)
    bert_tokenizer = BertTokenizer(str(word_vocabulary(folder / "bert")), do_lower_case=True)
    clip = make_tiny_model(clip_config=vit_b32_clip_config()).eval()
    clip.clip = clip.peft_model.merge_and_unload()
    clip._peft_model = None
    blip2_config = Blip2Config(qformer_config={"use_qformer_text_input": True})  # blip2-itm-vit-g's geometry
    blip2 = BLIP2Encoder(
        Blip2VisionModelWithProjection(blip2_config), Blip2TextModelWithProjection(blip2_config), bert_tokenizer
    )
    model_file = io.BytesIO()
    sentences = [" ".join(WORDS[index:] + WORDS[:index]) for index in range(len(WORDS))]
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_writer=model_file,
        vocab_size=len(set(WORDS)) + 40,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    (folder / "spm").mkdir(parents=True, exist_ok=True)
    (folder / "spm" / "sentencepiece.bpe.model").write_bytes(model_file.getvalue())
    beit3_tokenizer = XLMRobertaTokenizer.from_pretrained(folder / "spm", model_max_length=77)
    beit3 = BEiT3RetrievalEncoder(BEiT3ForRetrieval(BEiT3Config()), beit3_tokenizer)
    stella_model = BertModel(
        BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096),
        add_pooling_layer=False,
    )
    stella = StellaEncoder(stella_model, bert_tokenizer, nn.Linear(1024, 768))
    encoders = {"clip": PACSEncoder(clip), "blip2": blip2, "beit3": beit3, "stella": stella}
    for encoder in (blip2.vision_model, blip2.text_model, beit3.model, stella.model):
        encoder.requires_grad_(False)  # frozen (FlopCounterMode follows gradients of trainable tensors)
    return encoders


def tiny_encoders(folder: Path) -> tuple[dict, PearlConfig]:
    tiny = PearlScorer.from_pretrained(make_tiny_pearl(folder / "tiny_pearl"))
    for encoder in tiny.encoders.values():
        for model in (getattr(encoder, "model", None), getattr(encoder, "vision_model", None)):
            if isinstance(model, nn.Module):
                model.requires_grad_(False)
    return tiny.encoders, tiny.config


def counted_flops(function, encoder) -> float:
    """FLOPs of `function` on transformers' forward with `F.linear` (packed oneDNN kernels are invisible to
    `FlopCounterMode`)."""
    fast_vision = getattr(encoder, "fast_cpu_vision", None)
    if fast_vision is not None:
        encoder.fast_cpu_vision = False
    try:
        with plain_linears(), torch.inference_mode(), FlopCounterMode(display=False) as counter:
            function()
    finally:
        if fast_vision is not None:
            encoder.fast_cpu_vision = fast_vision
    return float(counter.get_total_flops())


def profile_encoders(encoders: dict, config: PearlConfig, items, rounds: int, sample_peak) -> list:
    """Each encoder on the workload's distinct images and texts, timed alone (best of `rounds`):
    `(stage, seconds, FLOPs)`."""
    paths, texts = distinct_inputs(items)
    image_names = [encoder["name"] for encoder in config.image_encoders]
    jobs = []
    for name, encoder in encoders.items():
        if name in image_names:
            jobs.append((f"{name} images ({len(paths)})", encoder, lambda e=encoder: e.encode_image(paths)))
        jobs.append((f"{name} texts ({len(texts)})", encoder, lambda e=encoder: e.encode_text(texts)))
    flops = {}
    for stage, encoder, job in jobs:
        if stage.startswith("clip"):  # fast_clip's packed kernels are invisible to FlopCounterMode: from the shapes
            model = encoders["clip"].model
            backbone = model.config.backbone_config
            if "images" in stage:
                flops[stage] = vision_flops_per_image(backbone, pooled_last=True) * len(paths)
            else:
                flops[stage] = text_flops(backbone, model.tokenize(texts)["attention_mask"].sum(dim=1), True)
            job()  # builds fast_clip's packed copy outside the timing
        else:
            flops[stage] = counted_flops(job, encoder)
            job()  # packs the weights outside the timing
    seconds = {stage: float("inf") for stage, _, _ in jobs}
    for _ in range(rounds):
        sample_peak()
        for stage, _, job in jobs:
            start = time.perf_counter()
            job()
            seconds[stage] = min(seconds[stage], time.perf_counter() - start)
    return [(stage, seconds[stage], flops[stage]) for stage, _, _ in jobs]


# ------------------------------------------------------------------------------------------------ main
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=8, help="samples per measurement (> 0)")
    parser.add_argument("--references", type=int, default=5, help="references per sample (1..5)")
    parser.add_argument("--batch-size", type=int, default=64, help="Pearl head batch (> 0; 64, as PearlScorer scores)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved timed rounds, best kept (> 0)")
    parser.add_argument("--encoders", choices=["full", "tiny", "none"], default="full", help="end-to-end encoders")
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's, one per core)")
    parser.add_argument("--output", type=Path, help="also write the figures as JSON")
    add_example(parser, "python benchmarks/benchmark_pearl.py --items 8 --references 5 --repeats 3")
    args = parser.parse_args()
    if args.threads is not None:
        if args.threads < 1:
            parser.error("--threads must be at least 1")
        torch.set_num_threads(args.threads)
    if args.items <= 0 or args.batch_size <= 0 or args.repeats <= 0 or not 1 <= args.references <= 5:
        parser.error("--items, --batch-size and --repeats must be > 0 and --references in 1..5")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    device = torch.device("cpu")
    figures = {"items": args.items, "references": args.references, "threads": torch.get_num_threads()}
    figures["load_average_before"] = load_average()
    print(f"load average before: {figures['load_average_before']}; threads={figures['threads']}")
    peaks = []

    def sample_peak():
        peaks.append(matmul_peak_gflops(device, torch.float32))

    head = PearlModel(PearlConfig()).eval()
    clock = instrument(head)
    calls = -(-args.items // args.batch_size)
    samples = calls * args.batch_size
    head_rows = {}
    for label, num_refs in (("reference-free", 0), (f"{args.references} references", args.references)):
        features = head_features(head.config, args.batch_size, num_refs)
        with torch.inference_mode():
            head(**features)  # builds the packed copy and warms up outside the timing
        total, rows = profile_head(head, clock, features, calls, args.repeats, sample_peak)
        head_rows[label] = (total, rows)
        figures[f"pearl_head_{'ref_free' if not num_refs else 'ref_based'}_ms"] = 1000 * total / samples
        figures[f"pearl_head_{'ref_free' if not num_refs else 'ref_based'}_gflop"] = (
            sum(r[2] for r in rows) / samples / 1e9
        )

    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        items = make_workload(folder, args.items, 1, args.references)
        images, candidates, references = workload_columns(items)
        vit_b32 = make_tiny_model(clip_config=vit_b32_clip_config()).eval()
        vit_b32.clip = vit_b32.peft_model.merge_and_unload()  # as PACSModel.from_pretrained does
        runs = {"RefPAC-S++ ViT-B/32": lambda: vit_b32.score(images, candidates, references, progress=False)}
        encoder_rows = []
        if args.encoders != "none":
            if args.encoders == "full":
                print("building the encoders at their real sizes (random weights; about 16 GB) ...", flush=True)
                encoders, pearl_config = full_size_encoders(folder / "encoders"), PearlConfig()
            else:
                encoders, tiny_config = tiny_encoders(folder)
                pearl_config = PearlConfig(
                    image_encoders=tiny_config.image_encoders,
                    reference_encoders=tiny_config.reference_encoders,
                    encoder_specs=tiny_config.encoder_specs,
                )
            pearl = PearlModel(pearl_config).eval()
            end_to_end_clock = instrument(pearl)
            scorer = PearlScorer(pearl, encoders, batch_size=args.batch_size)
            runs[f"Pearl end to end ({args.encoders} encoders)"] = lambda: scorer.score(images, candidates, references)
            if args.encoders == "tiny":
                tiny_pacs = PACSModel.from_pretrained(folder / "tiny_pearl" / "encoders" / "clip", dtype=torch.float32)
                runs["RefPAC-S++ tiny"] = lambda: tiny_pacs.eval().score(images, candidates, references, progress=False)
        timings = best_times(runs, args.repeats)
        refpacs_flops = clip_flops(vit_b32, items)
        if args.encoders != "none":
            encoder_rows = profile_encoders(encoders, pearl_config, items, args.repeats, sample_peak)
            encoded = scorer.encode(images, candidates, references)
            head_seconds = float("inf")
            for _ in range(args.repeats):
                end_to_end_clock.reset()
                start = time.perf_counter()
                scorer.score_features(encoded)
                head_seconds = min(head_seconds, time.perf_counter() - start)
            head_flops = sum(end_to_end_clock.flops.values())
            encoder_rows.append((f"Pearl head ({len(items)} items)", head_seconds, head_flops))
    sample_peak()
    peak = max(peaks)
    figures["load_average_after"] = load_average()
    figures["fp32_matmul_peak_gflops"] = peak

    refpacs = timings["RefPAC-S++ ViT-B/32"][0]
    figures["ref_pac_s_pp_vit_b32_ms"] = 1000 * refpacs / len(items)
    figures["ref_pac_s_pp_vit_b32_gflop"] = refpacs_flops / len(items) / 1e9
    print(f"load average after: {figures['load_average_after']}")
    print(f"\n{'metric':44s} {'ms/sample':>10s} {'time ratio':>11s} {'GFLOP/sample':>13s} {'FLOP ratio':>11s}")
    table = [("RefPAC-S++ ViT-B/32 (end to end)", refpacs / len(items), refpacs_flops / len(items))]
    for label, (total, rows) in head_rows.items():
        table.append((f"Pearl head only, {label}", total / samples, sum(r[2] for r in rows) / samples))
    if args.encoders != "none":
        name = f"Pearl end to end ({args.encoders} encoders)"
        pearl_flops = sum(row[2] for row in encoder_rows)
        table.append((name + f", {args.references} refs", timings[name][0] / len(items), pearl_flops / len(items)))
        figures[f"pearl_end_to_end_{args.encoders}_encoders_ms"] = 1000 * timings[name][0] / len(items)
        figures[f"pearl_end_to_end_{args.encoders}_encoders_gflop"] = pearl_flops / len(items) / 1e9
        if "RefPAC-S++ tiny" in timings:
            figures["ref_pac_s_pp_tiny_ms"] = 1000 * timings["RefPAC-S++ tiny"][0] / len(items)
    base_seconds, base_flops = table[0][1], table[0][2]
    for label, seconds, flops in table:
        ratios = f"{seconds / base_seconds:10.2f}x {flops / 1e9:13.2f} {flops / base_flops:10.2f}x"
        print(f"{label:44s} {1000 * seconds:10.2f} {ratios}")
    for label, (_, rows) in head_rows.items():
        print_stage_table(f"Pearl head only, {label}, batch {args.batch_size}", rows, peak, samples)
    if encoder_rows:
        print_stage_table(
            f"Pearl end to end ({args.encoders} encoders), stage by stage", encoder_rows, peak, len(items)
        )
        name = f"Pearl end to end ({args.encoders} encoders)"
        serial = sum(row[1] for row in encoder_rows)
        print(f"{'sum of stages (serial)':44s} {serial:8.3f}   vs end to end {timings[name][0]:.3f} s")
    if args.output:
        args.output.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
