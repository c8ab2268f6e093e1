"""What the speed and memory benchmarks share: workloads, timing, the machine's matmul peak, memory probes, and the
CLIP / SigLIP ViT-B/32 geometries that random-weight benchmarks run at (see benchmarks/README.md)."""

import os
import random
import resource
import threading
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from transformers import CLIPConfig, PreTrainedTokenizerBase, SiglipConfig

from modeling_pacs.cli.arguments import positive_float, positive_int
from modeling_pacs.models.fast_clip import PackedLinear, packed_linear_available
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
    """Measured dense matmul throughput of this machine in the engine's precision (the achievable peak): the faster of
    `torch.mm` and, on CPU in fp32, oneDNN's packed linear kernel (the one `fast_clip` runs)."""
    if device.type == "cuda":
        size, repeats = 8192, 50
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    kernels = [partial(torch.mm, a, b)]
    if device.type == "cpu" and dtype == torch.float32 and packed_linear_available():
        kernels.append(partial(PackedLinear(b, None), a))
    best = 0.0
    for kernel in kernels:
        kernel()
        synchronize(device)
        start = time.perf_counter()
        for _ in range(repeats):
            kernel()
        synchronize(device)
        best = max(best, 2 * size**3 * repeats / (time.perf_counter() - start) / 1e9)
    return best


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
    "VIT_B32_VISION",
    "WORDS",
    "PeakMemory",
    "best_time",
    "current_rss_mib",
    "make_workload",
    "matmul_peak_gflops",
    "peak_rss_mib",
    "positive_float",
    "positive_int",
    "synchronize",
    "vit_b32_clip_config",
    "vit_b32_siglip_config",
]
