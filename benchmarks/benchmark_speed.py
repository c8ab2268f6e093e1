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

    python benchmarks/benchmark_speed.py --images 200 --candidates 3 --references 5
    python benchmarks/benchmark_speed.py --images 60 --official-dir ../pacscore
"""

import argparse
import contextlib
import copy
import importlib
import importlib.util
import json
import random
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import numpy as np
import torch
from benchmarking_utils import (
    WORDS,
    announced_workload,
    best_time,
    make_workload,
    matmul_peak_gflops,
    peak_rss_mib,
    profile_stages,
    vit_b32_clip_config,
    workload_columns,
)
from PIL import Image

import modeling_pacs
from modeling_pacs.cli.arguments import add_device_arguments, add_example
from modeling_pacs.loading import DTYPES, resolve_device
from modeling_pacs.models.inputs import (
    load_and_preprocess,
    prepare_caption,
)
from modeling_pacs.models.scoring import harmonic_mean, max_reference_similarity, reference_free_score
from modeling_pacs.testing.modules import temporary_modules
from modeling_pacs.testing.pacs import make_tiny_model


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
    """Import the official `models` package from its checkout (registered by its path: `sys.path` is not touched),
    with torchvision.transforms re-derived and `pkg_resources.packaging` provided (new setuptools no longer ships
    pkg_resources)."""
    import packaging.version

    torchvision = types.ModuleType("torchvision")
    torchvision.transforms = torchvision_transforms_stub()
    pkg_resources = types.ModuleType("pkg_resources")
    pkg_resources.packaging = packaging
    stubs = {"torchvision": torchvision, "torchvision.transforms": torchvision.transforms}
    stubs["pkg_resources"] = pkg_resources
    with temporary_modules(stubs):
        # The official code imports `models.custom_loralib` absolutely: its `models` package must be the checkout's.
        spec = importlib.util.spec_from_file_location(
            "models", official_dir / "models" / "__init__.py", submodule_search_locations=[str(official_dir / "models")]
        )
        package = importlib.util.module_from_spec(spec)
        sys.modules["models"] = package
        spec.loader.exec_module(package)
        yield


def load_official_code(official_dir: Path) -> types.SimpleNamespace:
    """The official PAC-S++ model code, its tokenizer and its scoring functions, imported from `official_dir`."""
    official_dir = Path(official_dir).resolve()
    score_file = official_dir / "evaluation" / "pac_score" / "pac_score.py"
    if not score_file.is_file():
        raise SystemExit(f"--official-dir '{official_dir}' is not a checkout of aimagelab/pacscore (no {score_file})")
    with official_import_path(official_dir):
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
    images, candidates, references = workload_columns(items)
    transform = official.clip_lora._transform(224)
    _, scores, candidate_features, lengths = official.pac_score.PACScore(
        model, transform, images, candidates, str(device), w=w
    )
    _, similarities = official.pac_score.RefPACScore(model, references, candidate_features, str(device), lengths)
    similarities = np.clip(np.asarray(similarities), 0, None)
    total = scores + similarities
    ref_scores = np.where(total > 0, 2 * scores * similarities / np.where(total > 0, total, 1), 0)
    return torch.from_numpy(np.asarray(scores, dtype=np.float64)), torch.from_numpy(ref_scores)


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


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--candidates", type=int, default=3)
    parser.add_argument("--references", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=1, help="timed runs of each pipeline (best is kept)")
    add_device_arguments(parser, dtype_help="precision of OUR engine (the baselines stay fp32)")
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
    add_example(parser, "python benchmarks/benchmark_speed.py --images 60 --official-dir ../pacscore")
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
        from modeling_pacs.pacs.convert import convert_state_dict

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
        details = f"device={device}, ours in {args.dtype}, threads={torch.get_num_threads()}"
        items, images, candidates, references = announced_workload(Path(directory), args, details)
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
