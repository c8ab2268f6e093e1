"""Throughput of synthetic-positive generation: BLIP captions/s and Stable Diffusion images/s.

Two workloads:
- `tiny` (default, any machine): the tiny random BLIP and Stable Diffusion pipeline of `modeling_pacs.testing.synthetic`
  (widths 32, 2 layers, 32x32 images) through the same `BlipCaptioner` / `StableDiffusionGenerator` as
  `generate_synthetic.py`. It measures the pipeline's overhead, not a real model's cost.
- `sd15-unet` (needs a GPU): a randomly initialised UNet with Stable Diffusion v1.5's configuration (860M parameters),
  at fp16, denoising 64x64 latents (512x512 images) for `--steps` steps at each `--batch-sizes` (classifier-free
  guidance doubles the UNet batch, as in the pipeline). The text encoder and VAE decoder are not included (about 5%
  of SD's time at 50 steps). It prints images/s per batch size and the projected wall time for `--num-captions`
  captions on `--num-gpus` GPUs.

    python benchmarks/benchmark_synthetic.py --items 24
    python benchmarks/benchmark_synthetic.py --workload sd15-unet --batch-sizes 1 4 8 16 --steps 50
"""

import argparse
import tempfile
from pathlib import Path

import numpy as np
import PIL.Image
import torch
from benchmarking_utils import best_time, positive_int

from modeling_pacs.cli.arguments import add_example
from modeling_pacs.cli.errors import reports_errors
from modeling_pacs.extras import require
from modeling_pacs.synthetic.generation import BlipCaptioner, GenerationSettings, StableDiffusionGenerator
from modeling_pacs.testing.synthetic import make_tiny_blip, make_tiny_stable_diffusion

# COCO's ~600k human captions (Karpathy train + restval + val: 118,287 images with about 5 captions each).
COCO_CAPTIONS = 600_000
# Stable Diffusion v1.5's UNet (unet/config.json on the Hub).
SD15_UNET_CONFIG = {
    "sample_size": 64,
    "in_channels": 4,
    "out_channels": 4,
    "down_block_types": ["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
    "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"],
    "block_out_channels": [320, 640, 1280, 1280],
    "layers_per_block": 2,
    "cross_attention_dim": 768,
    "attention_head_dim": 8,
}


def tiny_benchmark(args: argparse.Namespace):
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        settings = GenerationSettings(
            captioner=str(make_tiny_blip(folder / "blip")),
            generator=str(make_tiny_stable_diffusion(folder / "sd")),
            steps=args.steps,
            height=32,
            width=32,
        )
        captioner = BlipCaptioner(settings, "cpu")
        generator = StableDiffusionGenerator(settings, "cpu")
        rng = np.random.default_rng(0)
        images = [PIL.Image.fromarray(rng.integers(0, 256, (375, 500, 3), dtype=np.uint8)) for _ in range(args.items)]
        captions = [f"a dog number {index} runs on the grass near a red bus" for index in range(args.items)]

        def caption_all():
            for start in range(0, args.items, args.batch_size):
                captioner(images[start : start + args.batch_size])

        def generate_all():
            for start in range(0, args.items, args.batch_size):
                batch = captions[start : start + args.batch_size]
                generator(batch, list(range(start, start + len(batch))))

        caption_seconds = best_time(caption_all, args.repeats, warmup=True)[0]
        image_seconds = best_time(generate_all, args.repeats, warmup=True)[0]
    print(f"torch threads: {torch.get_num_threads()}; {args.items} items, batch {args.batch_size}")
    print(f"tiny BLIP captioning (beam 3, max 20 tokens): {args.items / caption_seconds:.1f} images/s")
    print(
        f"tiny SD generation ({args.steps} steps, 32x32, safety checker on): {args.items / image_seconds:.1f} images/s"
    )


def sd15_unet_benchmark(args: argparse.Namespace):
    UNet2DConditionModel = require("diffusers", "generate", "The Stable Diffusion UNet benchmark").UNet2DConditionModel

    if not torch.cuda.is_available():
        raise SystemExit("--workload sd15-unet needs a CUDA GPU (860M parameters at fp16); use --workload tiny here")
    torch.manual_seed(0)
    unet = UNet2DConditionModel(**SD15_UNET_CONFIG).to("cuda", torch.float16).eval()
    parameters = sum(parameter.numel() for parameter in unet.parameters())
    print(f"SD v1.5-sized UNet: {parameters / 1e6:.0f}M parameters, fp16, {args.steps} steps")
    best = None
    for batch_size in args.batch_sizes:
        latents = torch.randn(2 * batch_size, 4, 64, 64, device="cuda", dtype=torch.float16)  # CFG: 2x batch
        text = torch.randn(2 * batch_size, 77, 768, device="cuda", dtype=torch.float16)

        @torch.no_grad()
        def denoise(latents=latents, text=text):
            for step in range(args.steps):
                unet(latents, 999 - step * (1000 // args.steps), encoder_hidden_states=text)
            torch.cuda.synchronize()

        try:
            seconds = best_time(denoise, args.repeats, warmup=True)[0]
        except torch.cuda.OutOfMemoryError:
            print(f"batch {batch_size}: out of memory")
            torch.cuda.empty_cache()
            break
        rate = batch_size / seconds
        print(f"batch {batch_size}: {rate:.2f} images/s ({seconds:.2f} s per batch)")
        best = max(best or 0.0, rate)
    if best:
        hours = args.num_captions / (best * args.num_gpus) / 3600
        print(
            f"projection: {args.num_captions:,} captions on {args.num_gpus} such GPUs at {best:.2f} images/s each: "
            f"{hours:.1f} h (UNet only; add ~5% for text encoder, VAE and safety checker)"
        )


@reports_errors("benchmark_synthetic")
def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1])
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--workload", choices=["tiny", "sd15-unet"], default="tiny")
    parser.add_argument("--items", type=positive_int, default=24, help="tiny: images captioned and generated")
    parser.add_argument("--batch-size", type=positive_int, default=8, help="tiny: items per call")
    parser.add_argument("--batch-sizes", type=positive_int, nargs="+", default=[1, 4, 8, 16], help="sd15-unet")
    parser.add_argument("--steps", type=positive_int, default=None, help="denoising steps (tiny: 2, sd15-unet: 50)")
    parser.add_argument("--repeats", type=positive_int, default=2, help="timed repeats after a warm-up (best kept)")
    parser.add_argument("--num-captions", type=positive_int, default=COCO_CAPTIONS, help="for the projection")
    parser.add_argument("--num-gpus", type=positive_int, default=8, help="for the projection")
    add_example(
        parser, "python benchmarks/benchmark_synthetic.py --workload sd15-unet --batch-sizes 1 4 8 16 --steps 50"
    )
    args = parser.parse_args(argv)
    if args.steps is None:
        args.steps = 2 if args.workload == "tiny" else 50
    if args.workload == "tiny":
        tiny_benchmark(args)
    else:
        sd15_unet_benchmark(args)


if __name__ == "__main__":
    main()
