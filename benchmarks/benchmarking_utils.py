"""What the speed and memory benchmarks share: workloads, timing (best of N, interleaved rounds), the machine's matmul
peak, FLOP counts and per-stage profiles with their table, memory probes, and the CLIP / SigLIP ViT-B/32 geometries
that random-weight benchmarks run at (see benchmarks/README.md)."""

import argparse
import os
import random
import resource
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from transformers import CLIPConfig, PreTrainedTokenizerBase, SiglipConfig

from modeling_pacs.cli.arguments import add_example, positive_float, positive_int
from modeling_pacs.loading import load_model, resolve_device
from modeling_pacs.models.backbones import backbone_family, encode_image_batch
from modeling_pacs.models.fast_clip import PackedLinear, packed_linear_available
from modeling_pacs.models.inputs import load_image, preprocess_image
from modeling_pacs.models.scoring import harmonic_mean, max_reference_similarity, reference_free_score
from modeling_pacs.testing.pacs import make_tiny_model
from modeling_pacs.tokenization import CLIP_VOCAB_SIZE

# The ViT-B/32 image tower (CLIP's and SigLIP's B/32 share it), for random-weight benchmarks.
VIT_B32_VISION = {
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "patch_size": 32,
}


def vit_b32_clip_config() -> CLIPConfig:
    """CLIP ViT-B/32 geometry (OpenAI), for random-weight benchmarks."""
    text_config = {"hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 12, "num_attention_heads": 8}
    vision_config = dict(VIT_B32_VISION)
    for tower in (text_config, vision_config):
        tower["hidden_act"] = "quick_gelu"
    text_config.update(
        bos_token_id=CLIP_VOCAB_SIZE - 2, eos_token_id=CLIP_VOCAB_SIZE - 1, pad_token_id=CLIP_VOCAB_SIZE - 1
    )
    return CLIPConfig(text_config=text_config, vision_config=vision_config, projection_dim=512)


def vit_b32_siglip_config(tokenizer: PreTrainedTokenizerBase) -> SiglipConfig:
    """SigLIP with the tower sizes of `vit_b32_clip_config` (text 512 x 12, vision 768 x 12, 32 px patches), for
    throughput comparisons with CLIP at equal size."""
    text_config = {
        "vocab_size": len(tokenizer),
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "bos_token_id": tokenizer.bos_token_id,
        "hidden_size": 512,
        "intermediate_size": 2048,
        "num_hidden_layers": 12,
        "num_attention_heads": 8,
        "max_position_embeddings": 64,
        "projection_size": 768,  # SigLIP's text head maps to the vision width
    }
    vision_config = dict(VIT_B32_VISION)
    return SiglipConfig(text_config=text_config, vision_config=vision_config)


WORDS = (
    "a man woman dog cat child girl boy two three people red blue green black white small large young old "
    "is are on in at with near under next to the of and playing running sitting standing riding jumping "
    "street beach park grass water snow field road table bike horse ball frisbee wave surfboard building"
).split()


def make_workload(
    folder: Path, num_images: int, num_candidates: int, num_references: int, seed: int = 0, words: list[str] = WORDS
):
    """JPEG images of Flickr8k-like sizes (written to `folder`) and random captions over `words`: one
    `(image path, candidate, references)` per candidate, the references shared by an image's candidates."""
    rng = random.Random(seed)
    noise = np.random.default_rng(seed)
    items = []
    for index in range(num_images):
        path = folder / f"{index:04d}.jpg"
        width, height = rng.choice([(500, 375), (375, 500), (500, 333), (640, 480)])
        base = noise.integers(0, 256, (height // 8, width // 8, 3), dtype=np.uint8)
        Image.fromarray(base).resize((width, height), Image.BILINEAR).save(path, quality=90)
        references = [" ".join(rng.choices(words, k=rng.randint(8, 16))) for _ in range(num_references)]
        for _ in range(num_candidates):
            items.append((str(path), " ".join(rng.choices(words, k=rng.randint(6, 14))), references))
    return items


def announced_workload(folder: Path, args, details: str) -> tuple[list[tuple], list[str], list[str], list[list[str]]]:
    """`make_workload` of `args.images` x `args.candidates` x `args.references`, its size printed with `details`:
    `(items, images, candidates, references)`."""
    items = make_workload(folder, args.images, args.candidates, args.references)
    print(
        f"workload: {args.images} images x {args.candidates} candidates x {args.references} references = "
        f"{len(items)} samples; {details}"
    )
    return (items, *workload_columns(items))


def workload_columns(items: list[tuple]) -> tuple[list[str], list[str], list[list[str]]]:
    """`make_workload`'s items as the three lists `score` takes: images, candidates, references."""
    return [path for path, _, _ in items], [caption for _, caption, _ in items], [refs for _, _, refs in items]


def best_time(function, repeats: int, warmup: bool = False) -> tuple[float, object]:
    """Best wall time of `repeats` calls (after one untimed call with `warmup`) and the last call's result."""
    if warmup:
        function()
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - start)
    return best, result


def synchronize(device: torch.device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_peak_gflops(device: torch.device, dtype: torch.dtype, size: int = 2048, repeats: int = 10) -> float:
    """Measured dense matmul throughput of this machine in the engine's precision (the achievable peak): the fastest
    of `torch.mm` and, on CPU in fp32, oneDNN's packed linear kernel (the one `fast_clip` runs), on a `size`-cubed
    product and, on CPU, on a `4096 x 1024 x 512` one whose operands fit in the last-level cache (the 2048-cubed
    operands, 48 MB, do not: on this project's machine one thread ran the cache-resident product at up to 1.3x)."""
    if device.type == "cuda":
        size, repeats = 8192, 50
    shapes = [(size, size, size)]
    if device.type == "cpu":
        shapes.append((4096, 1024, 512))
    best = 0.0
    for rows, inner, columns in shapes:
        a = torch.randn(rows, inner, device=device, dtype=dtype)
        b = torch.randn(inner, columns, device=device, dtype=dtype)
        kernels = [partial(torch.mm, a, b)]
        if device.type == "cpu" and dtype == torch.float32 and packed_linear_available():
            kernels.append(partial(PackedLinear(b.t(), None), a))
        count = max(1, round(repeats * size**3 / (rows * inner * columns)))
        for kernel in kernels:
            kernel()
            synchronize(device)
            start = time.perf_counter()
            for _ in range(count):
                kernel()
            synchronize(device)
            best = max(best, 2 * rows * inner * columns * count / (time.perf_counter() - start) / 1e9)
    return best


def best_times(runs: dict, rounds: int, warmup: bool = True) -> dict[str, tuple[float, object]]:
    """`{name: (best wall time, last result)}` of each run over `rounds` interleaved rounds: one call of every run
    per round, so a burst of load from other jobs hits them alike (after one untimed call of each with `warmup`)."""
    if warmup:
        for function in runs.values():
            function()
    best = {name: (float("inf"), None) for name in runs}
    for _ in range(rounds):
        for name, function in runs.items():
            start = time.perf_counter()
            result = function()
            best[name] = (min(best[name][0], time.perf_counter() - start), result)
    return best


def load_average() -> str:
    """The 1, 5 and 15 minute load averages of `/proc/loadavg` ("n/a" where there is none)."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def print_stage_table(title: str, rows: list[tuple[str, float, float]], peak: float, samples: int):
    """Print `(stage, seconds, FLOPs or 0)` rows with ms/sample, GFLOP, GFLOP/s and the share of `peak` (GFLOP/s)."""
    print(f"\n{title} (matmul peak {peak:.1f} GFLOP/s, {samples} samples)")
    print(f"{'stage':44s} {'seconds':>8s} {'ms/sample':>10s} {'GFLOP':>9s} {'GFLOP/s':>8s} {'of peak':>8s}")
    for stage, seconds, flops in rows:
        rate = flops / seconds / 1e9 if flops and seconds > 0 else 0.0
        numbers = f"{flops / 1e9:9.2f} {rate:8.1f} {rate / peak:8.0%}" if flops else f"{'':9s} {'':8s} {'':8s}"
        print(f"{stage:44s} {seconds:8.3f} {1000 * seconds / samples:10.2f} {numbers}")


# ------------------------------------------------------------------------------------------------ FLOP counts
def layer_macs(tokens, width: int, intermediate: int, pooled_last: bool):
    """Multiply-adds of one pre-norm transformer layer over `tokens` positions; with `pooled_last`, as the engine's
    last layer runs it (`fast_clip`): keys and values for every position, the rest for the pooled position only."""
    if not pooled_last:
        return 4 * tokens * width**2 + 2 * tokens**2 * width + 2 * tokens * width * intermediate
    return 2 * tokens * width**2 + 2 * width**2 + 2 * tokens * width + 2 * width * intermediate


def vision_flops_per_image(config, pooled_last: bool = False) -> float:
    """Multiply-adds x 2 of one ViT forward (patch embedding, attention, MLP) plus the projection."""
    vision = config.vision_config
    width, layers = vision.hidden_size, vision.num_hidden_layers
    patches = (vision.image_size // vision.patch_size) ** 2
    tokens = patches + 1
    macs = patches * width * 3 * vision.patch_size**2
    macs += (layers - 1) * layer_macs(tokens, width, vision.intermediate_size, False)
    macs += layer_macs(tokens, width, vision.intermediate_size, pooled_last) + width * config.projection_dim
    return 2.0 * macs


def text_flops(config, lengths: torch.Tensor, pooled_last: bool = False) -> float:
    """FLOPs of the text encoder on captions of these real lengths (padding excluded) plus the projection."""
    text = config.text_config
    width, lengths = text.hidden_size, lengths.double()
    macs = (text.num_hidden_layers - 1) * layer_macs(lengths, width, text.intermediate_size, False).sum()
    macs += layer_macs(lengths, width, text.intermediate_size, pooled_last).sum()
    macs += len(lengths) * width * config.projection_dim
    return 2.0 * float(macs)


def distinct_inputs(items) -> tuple[list[str], list[str]]:
    """The workload's distinct image paths and distinct texts (candidates, then references), as both metrics see."""
    paths = list(dict.fromkeys(path for path, _, _ in items))
    texts = list(dict.fromkeys([caption for _, caption, _ in items] + [r for _, _, refs in items for r in refs]))
    return paths, texts


def clip_flops(model, items) -> float:
    """FLOPs of a PAC-S-style metric's encoders on the workload: each distinct image and text once (as the engine
    runs them: padding excluded, the last layer for the pooled position only)."""
    paths, texts = distinct_inputs(items)
    config = model.config.backbone_config
    lengths = model.tokenize(texts)["attention_mask"].sum(dim=1)
    return vision_flops_per_image(config, pooled_last=True) * len(paths) + text_flops(config, lengths, True)


def profile_stages(model, items, device: torch.device, peak: float) -> list[tuple[str, float, int, str, float]]:
    """Each stage of `PACSModel.score` timed on its own over the workload's distinct images and texts:
    (stage, seconds, count, unit, GFLOP/s or 0)."""
    size = model.config.backbone_config.vision_config.image_size
    paths, texts = distinct_inputs(items)
    rows = []
    start = time.perf_counter()
    decoded = [load_image(path, index) for index, path in enumerate(paths)]
    rows.append(("image decoding (1 thread)", time.perf_counter() - start, len(paths), "images", 0.0))
    start = time.perf_counter()
    pixels = torch.stack([preprocess_image(image, size) for image in decoded])
    rows.append(("preprocessing (1 thread)", time.perf_counter() - start, len(paths), "images", 0.0))
    pixels = pixels.to(device=device, dtype=model.dtype)
    fast = model.fast_encoders()  # the engine's packed CPU path where it applies (fast_clip), else transformers'
    family = backbone_family(model.config.backbone_config)
    with torch.inference_mode():
        encode = fast.encode_images if fast is not None else partial(encode_image_batch, model.clip, family)
        encode(pixels[:2])  # first-call overhead outside the timing
        synchronize(device)
        start = time.perf_counter()
        image_embeds = torch.cat([encode(batch) for batch in pixels.split(64)])
        synchronize(device)
        seconds = time.perf_counter() - start
    pooled_last = fast is not None
    flops = vision_flops_per_image(model.config.backbone_config, pooled_last) * len(paths) / seconds / 1e9
    rows.append(("image encoding (batch 64)", seconds, len(paths), "images", flops))
    start = time.perf_counter()
    tokens = model.tokenize(texts)
    rows.append(("tokenisation", time.perf_counter() - start, len(texts), "texts", 0.0))
    start = time.perf_counter()
    text_embeds = model.encode_texts(texts, progress=False)
    seconds = time.perf_counter() - start - rows[-1][1]  # encode_texts tokenises first
    flops = text_flops(model.config.backbone_config, tokens["attention_mask"].sum(dim=1), pooled_last) / seconds / 1e9
    rows.append(("text encoding (sorted, batch 256)", seconds, len(texts), "texts", flops))
    index = {text: position for position, text in enumerate(texts)}
    candidates = text_embeds[[index[caption] for _, caption, _ in items]]
    references = text_embeds[[index[r] for _, _, refs in items for r in refs]]
    owner = torch.tensor([i for i, (_, _, refs) in enumerate(items) for _ in refs])
    images = image_embeds.float().cpu()[[paths.index(path) for path, _, _ in items]]
    start = time.perf_counter()
    harmonic_mean(
        reference_free_score(images, candidates, model.config.w),
        max_reference_similarity(candidates, references, owner),
    )
    rows.append(("scoring (Eqs. 4, 5)", time.perf_counter() - start, len(items), "items", 0.0))
    return rows


# ----------------------------------------------------------------------------------------------- a metric vs RefPAC-S++
REF_PAC_S_PP = "RefPAC-S++ (ViT-B/32)"
NOT_SUMMED = "(not summed)"  # a profile row that re-times a stage another way (a comparison, not a stage)


def random_ref_pac_s_pp():
    """RefPAC-S++ at CLIP ViT-B/32's size with a random LoRA adapter merged, as at inference (random weights)."""
    model = make_tiny_model(variant="pac_s_pp", clip_config=vit_b32_clip_config()).eval()
    model.clip = model.peft_model.merge_and_unload()
    model._peft_model = None
    return model


def roberta_flops(config, lengths: torch.Tensor) -> float:
    """FLOPs of a ScalarMix metric's sentence encoder over these real lengths (embeddings and ScalarMix not
    counted)."""
    text = config.text_config
    per_layer = layer_macs(lengths.double(), text.hidden_size, text.intermediate_size, False).sum()
    return 2.0 * float(per_layer) * text.num_hidden_layers


def comparison_parser(doc: str, metric: str, images: int, repeats: int, example: str) -> argparse.ArgumentParser:
    """The options of a `benchmark_<metric>.py` that times a metric with `per_item` / `official` modes against
    RefPAC-S++ (`compare_with_ref_pac_s_pp`); the script may add its own."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=positive_int, default=images)
    parser.add_argument("--candidates", type=positive_int, default=2, help="candidates per image")
    parser.add_argument("--references", type=positive_int, default=5, help="references per image")
    parser.add_argument("--repeats", type=positive_int, default=repeats, help="interleaved timed rounds (best is kept)")
    parser.add_argument("--official-batch-size", type=positive_int, default=32)
    parser.add_argument(
        f"--{metric.lower()}-model", dest="metric_model", help=f"a {metric} directory (default: random weights)"
    )
    parser.add_argument("--pacs-model", help="a PAC-S++ directory or alias (default: random ViT-B/32 + LoRA)")
    parser.add_argument("--device", default="auto", help="'auto' (CUDA when present), 'cpu', 'cuda'")
    parser.add_argument("--no-profile", action="store_true", help="skip the per-stage profile")
    parser.add_argument("--threads", type=positive_int, help="torch intra-op threads (default: one per core)")
    add_example(parser, example)
    return parser


def compare_with_ref_pac_s_pp(
    args: argparse.Namespace,
    metric: str,
    random_model: Callable,
    metric_flops: Callable,
    profile: Callable,
    flops_note: str,
    extra_runs: Callable | None = None,
    official_flops: Callable | None = None,
):
    """Time `metric` (`per_item` and `official`, plus `extra_runs(model, images, candidates, references)`) against
    RefPAC-S++ on one workload, interleaved (`best_times`); print ms/sample, time ratio, GFLOP/sample and FLOP ratio
    (`metric_flops(model, items)`; for the `official` row `official_flops(model, items, batch_size)` where given),
    then `profile(model, items, device, peak)`'s `(stage, seconds, FLOPs)` rows, best of `--repeats` rounds, each
    with the matmul peak measured just before it (the best of them is printed)."""
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    model = load_model(args.metric_model, device=str(device)) if args.metric_model else random_model().to(device)
    pacs = load_model(args.pacs_model, device=str(device)) if args.pacs_model else random_ref_pac_s_pp().to(device)
    weights = "given models" if args.metric_model and args.pacs_model else "random weights at the published sizes"
    print(f"load average before: {load_average()}")
    with tempfile.TemporaryDirectory() as directory:
        details = f"device={device}, threads={torch.get_num_threads()}, {weights}"
        items, images, candidates, references = announced_workload(Path(directory), args, details)
        runs = {
            REF_PAC_S_PP: lambda: pacs.score(images, candidates, references, progress=False),
            f"{metric} (per_item)": lambda: model.score(images, candidates, references, progress=False),
            f"{metric} (official, B={args.official_batch_size})": lambda: model.score(
                images, candidates, references, mode="official", batch_size=args.official_batch_size, progress=False
            ),
        }
        if extra_runs is not None:
            runs.update(extra_runs(model, images, candidates, references))
        seconds = {name: value for name, (value, _) in best_times(runs, args.repeats).items()}
        stages, peak = [], 0.0
        if not args.no_profile:
            for _ in range(args.repeats):
                peak = max(peak, matmul_peak_gflops(device, torch.float32))
                rounds = profile(model, items, device, peak)
                stages = rounds if not stages else [min(a, b, key=lambda row: row[1]) for a, b in zip(stages, rounds)]
        official = f"{metric} (official, B={args.official_batch_size})"
        flops = {name: metric_flops(model, items) for name in runs}
        flops[REF_PAC_S_PP] = clip_flops(pacs, items)
        if official_flops is not None:
            flops[official] = official_flops(model, items, args.official_batch_size)
    print(f"load average after: {load_average()}")
    header = f"{'ms/sample':>10s} {'seconds':>8s} {'time ratio':>11s} {'GFLOP/sample':>13s} {'FLOP ratio':>11s}"
    print(f"\n{'metric':40s} {header}")
    for name, value in seconds.items():
        print(
            f"{name:40s} {1000 * value / len(items):10.2f} {value:8.2f} {value / seconds[REF_PAC_S_PP]:10.2f}x "
            f"{flops[name] / len(items) / 1e9:13.2f} {flops[name] / flops[REF_PAC_S_PP]:10.2f}x"
        )
    print(flops_note)
    if stages:
        print_stage_table(f"per-stage profile of {metric} (per_item)", stages, peak, len(items))
        total = sum(row[1] for row in stages if not row[0].endswith(NOT_SUMMED))
        print(f"{'sum of stages (serial)':44s} {total:8.3f}   vs end to end {seconds[f'{metric} (per_item)']:.3f} s")


def peak_rss_mib() -> float:
    """Peak resident memory of THIS process image in MiB (`VmHWM`). `ru_maxrss` is no measure for a subprocess:
    Linux carries the parent's peak over `vfork` + `exec` (a probe started by a 3.6 GiB benchmark reported 3.6 GiB
    whatever it did)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class PeakMemory:
    """Peak resident memory (MiB) of this process while the `with` block runs, sampled every 5 ms."""

    def __enter__(self):
        self.peak = current_rss_mib()
        self.running = True
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()
        return self

    def sample(self):
        while self.running:
            self.peak = max(self.peak, current_rss_mib())
            time.sleep(0.005)

    def __exit__(self, *exc):
        self.running = False
        self.thread.join()


__all__ = [
    "NOT_SUMMED",
    "REF_PAC_S_PP",
    "VIT_B32_VISION",
    "WORDS",
    "PeakMemory",
    "announced_workload",
    "best_time",
    "best_times",
    "clip_flops",
    "compare_with_ref_pac_s_pp",
    "comparison_parser",
    "current_rss_mib",
    "distinct_inputs",
    "layer_macs",
    "load_average",
    "make_workload",
    "matmul_peak_gflops",
    "peak_rss_mib",
    "positive_float",
    "positive_int",
    "print_stage_table",
    "profile_stages",
    "random_ref_pac_s_pp",
    "roberta_flops",
    "synchronize",
    "text_flops",
    "vision_flops_per_image",
    "vit_b32_clip_config",
    "vit_b32_siglip_config",
]
