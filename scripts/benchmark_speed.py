"""Throughput of the PAC-S++ engine against a reference-style pipeline, in one process, on the same weights.

Workload: Flickr8k-shaped, ViT-B/32-sized random weights with a random LoRA adapter (the real checkpoints cannot be
downloaded here; the arithmetic is the same). Both pipelines compute PAC-S++ and RefPAC-S++ through the same formula
functions; they differ only in how they encode:

- reference-style (as the official code and most CLIPScore scripts do): every candidate re-encodes its image,
  every text is padded to 77 tokens, unmerged LoRA layers, images decoded on the main thread, fp32;
- ours (`PACSModel.score`): each distinct image and text encoded once, texts sorted by length and padded to the
  batch's longest, LoRA merged into the weights, decoding in a thread pool, fp32; on CPU the encoders run
  `fast_clip`'s packed oneDNN path (also timed with transformers' forward, `fast_cpu_encoders=False`).

With `--official-dir`, a checkout of the public `aimagelab/pacscore` code is timed too, as the baseline: its
`models/clip_lora/model.py` (CLIP + custom_loralib, the PAC-S++ model), `clip.tokenize` and
`evaluation/pac_score/pac_score.py` (`PACScore` / `RefPACScore`, DataLoaders with 6 workers) are imported by file
path, a PAC-S++ ViT-B/32 checkpoint is built in ITS layout (random weights and LoRA), our model is converted from
that same checkpoint (`convert_state_dict`, lora_mode official), and both score the same workload. torchvision (which
that code imports for its transforms) has no CPU build here: its Resize / CenterCrop / ToTensor / Normalize are
re-derived below; everything else is the official code as published.

Prints the throughput ratios, the largest score differences, a per-stage profile of our engine (decoding,
preprocessing, image encoding, tokenisation, text encoding, scoring) with the encoders' achieved GFLOP/s as a share
of this machine's measured fp32 matmul peak, and the peak RSS of scoring N vs 10 N items.

    python scripts/benchmark_speed.py --images 200 --candidates 3 --references 5
    python scripts/benchmark_speed.py --images 60 --official-dir ../pacscore
"""

import argparse
import contextlib
import copy
import importlib
import importlib.util
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
import types
from functools import partial
from pathlib import Path

import numpy as np
import torch
from PIL import Image

import modeling_pacs
from modeling_pacs.backbones import backbone_family, encode_image_batch
from modeling_pacs.fast_clip import PackedLinear, packed_linear_available
from modeling_pacs.inputs import (
    load_and_preprocess,
    load_image,
    prepare_caption,
    preprocess_image,
)
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


def transformers_forward_scores(model, items):
    """The engine with `fast_cpu_encoders=False`: transformers' CLIP forward instead of `fast_clip`'s packed path."""
    model.fast_cpu_encoders = False
    try:
        output = model.score([i[0] for i in items], [i[1] for i in items], [i[2] for i in items], progress=False)
    finally:
        model.fast_cpu_encoders = True
    return output.scores, output.ref_scores


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


# ---------------------------------------------------------------------------------------------------- official code
def torchvision_transforms_stub() -> types.ModuleType:
    """The part of `torchvision.transforms` the official code uses, re-derived for PIL inputs (torchvision has no CPU
    build matching this torch): Resize(int) on the shorter side with `int()` for the longer one, CenterCrop with
    torchvision's rounding, ToTensor, Normalize. `InterpolationMode` is absent, so the official code falls back to
    `PIL.Image.BICUBIC`, exactly as it does on old torchvision."""
    module = types.ModuleType("torchvision.transforms")

    class Compose:
        def __init__(self, transforms):
            self.transforms = transforms

        def __call__(self, image):
            for transform in self.transforms:
                image = transform(image)
            return image

    class Resize:
        def __init__(self, size, interpolation=Image.BICUBIC):
            self.size, self.interpolation = size, interpolation

        def __call__(self, image):
            width, height = image.size
            if width <= height:
                size = (self.size, int(self.size * height / width))
            else:
                size = (int(self.size * width / height), self.size)
            return image if size == image.size else image.resize(size, self.interpolation)

    class CenterCrop:
        def __init__(self, size):
            self.size = size

        def __call__(self, image):
            width, height = image.size
            top, left = int(round((height - self.size) / 2.0)), int(round((width - self.size) / 2.0))
            return image.crop((left, top, left + self.size, top + self.size))

    def to_tensor(image):
        return torch.from_numpy(np.array(image, dtype=np.uint8)).permute(2, 0, 1).float().div(255)

    class Normalize:
        def __init__(self, mean, std):
            self.mean, self.std = torch.tensor(mean).view(3, 1, 1), torch.tensor(std).view(3, 1, 1)

        def __call__(self, tensor):
            return (tensor - self.mean) / self.std

    module.Compose, module.Resize, module.CenterCrop, module.Normalize = Compose, Resize, CenterCrop, Normalize
    module.ToTensor = lambda: to_tensor
    return module


@contextlib.contextmanager
def official_import_path(official_dir: Path):
    """Import the official `models` package from its checkout, with torchvision.transforms re-derived and
    `pkg_resources.packaging` provided (new setuptools no longer ships pkg_resources)."""
    import packaging.version

    torchvision = types.ModuleType("torchvision")
    torchvision.transforms = torchvision_transforms_stub()
    pkg_resources = types.ModuleType("pkg_resources")
    pkg_resources.packaging = packaging
    stubs = {"torchvision": torchvision, "torchvision.transforms": torchvision.transforms}
    stubs["pkg_resources"] = pkg_resources
    saved = {name: sys.modules.get(name) for name in stubs}
    sys.modules.update(stubs)
    sys.path.insert(0, str(official_dir))
    try:
        yield
    finally:
        sys.path.remove(str(official_dir))
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def load_official_code(official_dir: Path) -> types.SimpleNamespace:
    """The official PAC-S++ model code, its tokenizer and its scoring functions, imported from `official_dir`."""
    official_dir = Path(official_dir).resolve()
    score_file = official_dir / "evaluation" / "pac_score" / "pac_score.py"
    if not score_file.is_file():
        raise SystemExit(f"--official-dir '{official_dir}' is not a checkout of aimagelab/pacscore (no {score_file})")
    with official_import_path(official_dir):
        importlib.import_module("models")
        # Loaded before its package, whose __init__ instantiates the tokenizer at import time.
        tokenizer_file = official_dir / "models" / "clip_lora" / "simple_tokenizer.py"
        spec = importlib.util.spec_from_file_location("models.clip_lora.simple_tokenizer", tokenizer_file)
        tokenizer_module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tokenizer_module)
        sys.modules["models.clip_lora.simple_tokenizer"] = tokenizer_module
        (bpe_path,) = tokenizer_module.SimpleTokenizer.__init__.__defaults__
        if not Path(bpe_path).is_file():
            # A known failure of the official repository: the LoRA model's BPE vocabulary is not committed. Use the
            # same OpenAI vocabulary that this package bundles.
            bundled = Path(modeling_pacs.__file__).parent / "assets" / "bpe_simple_vocab_16e6.txt.gz"
            print(f"official checkout lacks {bpe_path}: using the identical bundled OpenAI vocabulary {bundled}")
            tokenizer_module.SimpleTokenizer.__init__.__defaults__ = (str(bundled),)
        model_module = importlib.import_module("models.clip_lora.model")
        clip_lora = importlib.import_module("models.clip_lora.clip_lora")
        spec = importlib.util.spec_from_file_location("official_pac_score", score_file)
        pac_score = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(pac_score)
    return types.SimpleNamespace(model=model_module, clip_lora=clip_lora, pac_score=pac_score)


def official_checkpoint(official, seed: int = 0) -> dict[str, torch.Tensor]:
    """A PAC-S++ ViT-B/32 state dict in the official layout (OpenAI names + custom_loralib LoRA, r=4): random
    weights, and random LoRA B matrices (they start at zero) so that every delta counts."""
    torch.manual_seed(seed)
    model = official.model.CLIP(512, 224, 12, 768, 32, 77, 49408, 512, 8, 12, lora=4)
    state_dict = {key: value.detach().clone() for key, value in model.state_dict().items()}
    for key, value in state_dict.items():
        if key.endswith("lora_B"):
            state_dict[key] = torch.randn_like(value) * 0.02
    return state_dict


def build_official_model(official, state_dict: dict[str, torch.Tensor], device: torch.device):
    """As `compute_correlations_pac++.py` does: build_model (which returns an eval model), float, load, eval."""
    model = official.model.build_model({key: value.clone() for key, value in state_dict.items()}, lora=4)
    model = model.to(device).float()
    model.load_state_dict(state_dict)
    return model.eval()


def official_scores(official, model, items, device: torch.device, w: float):
    """`compute_scores` of the official code: PACScore, then RefPACScore on its candidate features, then the
    harmonic mean. The official RefPACScore does not clip the reference term at 0 (Eq. 5 does): clipped here."""
    images = [path for path, _, _ in items]
    candidates = [caption for _, caption, _ in items]
    references = [refs for _, _, refs in items]
    transform = official.clip_lora._transform(224)
    _, scores, candidate_features, lengths = official.pac_score.PACScore(
        model, transform, images, candidates, str(device), w=w
    )
    _, similarities = official.pac_score.RefPACScore(model, references, candidate_features, str(device), lengths)
    similarities = np.clip(np.asarray(similarities), 0, None)
    total = scores + similarities
    ref_scores = np.where(total > 0, 2 * scores * similarities / np.where(total > 0, total, 1), 0)
    return torch.from_numpy(np.asarray(scores, dtype=np.float64)), torch.from_numpy(ref_scores)


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


def text_flops(config, lengths: torch.Tensor, pooled_last: bool = False) -> float:
    """FLOPs of the text encoder on captions of these real lengths (padding excluded) plus the projection."""
    text = config.text_config
    width, lengths = text.hidden_size, lengths.double()
    macs = (text.num_hidden_layers - 1) * layer_macs(lengths, width, text.intermediate_size, False).sum()
    macs += layer_macs(lengths, width, text.intermediate_size, pooled_last).sum()
    macs += len(lengths) * width * config.projection_dim
    return 2.0 * float(macs)


def profile_stages(model, items, device: torch.device, peak: float) -> list[tuple[str, float, int, str, float]]:
    """Each stage of `PACSModel.score` timed on its own over the workload's distinct images and texts:
    (stage, seconds, count, unit, GFLOP/s or 0)."""
    size = model.config.backbone_config.vision_config.image_size
    paths = list(dict.fromkeys(path for path, _, _ in items))
    texts = list(dict.fromkeys([caption for _, caption, _ in items] + [r for _, _, refs in items for r in refs]))
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


def peak_rss_mib() -> float:
    """Peak resident memory of THIS process image in MiB (`VmHWM`). `ru_maxrss` is no measure for a subprocess:
    Linux carries the parent's peak over `vfork` + `exec` (a probe started by a 3.6 GiB benchmark reported 3.6 GiB
    whatever it did)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_rss_probe(num_items: int):
    """Score `num_items` items (200 distinct images, 5 distinct references each) with the tiny model; print the
    peak RSS (MiB)."""
    with tempfile.TemporaryDirectory() as directory:
        model = make_tiny_model(variant="pac_s_pp").eval()
        workload = make_workload(Path(directory), 200, 1, 5)
        rng = random.Random(1)
        items = [
            (
                workload[i % 200][0],
                " ".join(rng.choices(WORDS, k=10)),
                [" ".join(rng.choices(WORDS, k=12)) for _ in range(5)],
            )
            for i in range(num_items)
        ]
        baseline = peak_rss_mib()
        model.score([i[0] for i in items], [i[1] for i in items], [i[2] for i in items], progress=False)
        peak = peak_rss_mib()
    print(json.dumps({"items": num_items, "peak_rss_mib": peak, "before_mib": baseline}))


def measure_peak_rss(num_items: int) -> dict:
    command = [sys.executable, __file__, "--rss-probe", str(num_items)]
    completed = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(completed.stdout.strip().splitlines()[-1])


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
        help="precision of OUR engine (the baselines stay fp32)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        help="torch intra-op threads (default: torch's, one per core); 1 helps on a loaded machine",
    )
    parser.add_argument("--official-dir", type=Path, help="a checkout of aimagelab/pacscore: time it as the baseline")
    parser.add_argument("--no-reference-style", action="store_true", help="skip the reference-style pipeline")
    parser.add_argument(
        "--memory-items", type=int, default=0, help="also compare the peak RSS of scoring N and 10 N items"
    )
    parser.add_argument("--rss-probe", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_probe:
        return peak_rss_probe(args.rss_probe)
    for name in ("images", "candidates", "references", "repeats"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name} must be at least 1")
    if args.threads is not None:
        if args.threads < 1:
            raise SystemExit("--threads must be at least 1")
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = resolve_device(args.device)

    official = None
    if args.official_dir:
        from modeling_pacs.convert import convert_state_dict

        official = load_official_code(args.official_dir)
        print("building a PAC-S++ ViT-B/32 checkpoint in the official layout (random weights and LoRA)")
        state_dict = official_checkpoint(official)
        official_model = build_official_model(official, state_dict, device)
        reference_model = convert_state_dict(state_dict, "pac_s_pp_vit_b32", lora_mode="official").model
        reference_model = reference_model.eval().to(device)
    else:
        print("building ViT-B/32-sized random model with a random LoRA adapter (real weights are not downloadable)")
        reference_model = make_tiny_model(variant="pac_s_pp", clip_config=vit_b32_clip_config()).eval().to(device)
    ours = copy.deepcopy(reference_model)
    ours.clip = ours.peft_model.merge_and_unload()
    ours._peft_model = None
    ours.config.adapter_path = None
    if args.dtype != "fp32":
        ours = ours.to(DTYPES[args.dtype])

    with tempfile.TemporaryDirectory() as directory:
        items = make_workload(Path(directory), args.images, args.candidates, args.references)
        images = [path for path, _, _ in items]
        candidates = [caption for _, caption, _ in items]
        references = [refs for _, _, refs in items]
        print(
            f"workload: {args.images} images x {args.candidates} candidates x {args.references} references "
            f"= {len(items)} items, device={device}, ours in {args.dtype}, threads={torch.get_num_threads()}"
        )
        timings, results = {}, {}
        pipelines = [("pacs-pp engine", lambda: ours.score(images, candidates, references, progress=False))]
        if ours.fast_encoders() is not None:
            pipelines.append(("engine, transformers' fwd", lambda: transformers_forward_scores(ours, items)))
        if not args.no_reference_style:
            pipelines.append(("reference-style pipeline", lambda: reference_style_scores(reference_model, items)))
        if official is not None:
            w = ours.config.w
            pipelines.append(
                ("official pacscore code", lambda: official_scores(official, official_model, items, device, w))
            )
        for name, function in pipelines:
            timings[name], results[name] = best_time(function, args.repeats)
        peak = matmul_peak_gflops(device, ours.dtype)
        stages = profile_stages(ours, items, device, peak)

    output = results["pacs-pp engine"]
    for name, seconds in timings.items():
        print(f"{name:28s} {seconds:8.2f} s  ({len(items) / seconds:7.1f} items/s)")
    for name in timings:
        if name == "pacs-pp engine":
            continue
        scores, ref_scores = results[name]
        difference = max(
            (output.scores.double() - scores.double()).abs().max().item(),
            (output.ref_scores.double() - ref_scores.double()).abs().max().item(),
        )
        ratio = timings[name] / timings["pacs-pp engine"]
        print(f"ours vs {name}: {ratio:.2f}x faster, max |score difference| {difference:.2e} (PAC-S++, RefPAC-S++)")
    print(f"\nper-stage profile of our engine ({args.dtype} matmul peak of this machine: {peak:.1f} GFLOP/s)")
    print(f"{'stage':36s} {'seconds':>8s} {'throughput':>18s} {'GFLOP/s':>8s} {'of peak':>8s}")
    for stage, seconds, count, unit, flops in stages:
        share = f"{flops / peak:7.0%}" if flops else ""
        gflops = f"{flops:8.1f}" if flops else ""
        print(f"{stage:36s} {seconds:8.2f} {count / seconds:10.1f} {unit + '/s':7s} {gflops:>8s} {share:>8s}")
    serial = sum(row[1] for row in stages)
    print(f"{'sum of stages (serial)':36s} {serial:8.2f}   vs end to end {timings['pacs-pp engine']:.2f} s")
    if args.memory_items:
        small, large = measure_peak_rss(args.memory_items), measure_peak_rss(10 * args.memory_items)
        print(
            f"peak RSS: {small['peak_rss_mib']:.0f} MiB for {small['items']} items, "
            f"{large['peak_rss_mib']:.0f} MiB for {large['items']} items -> "
            f"{large['peak_rss_mib'] / small['peak_rss_mib']:.2f}x"
        )


if __name__ == "__main__":
    main()
