"""Milliseconds per sample of Polos and RefPAC-S++ in one run, on the same workload and machine.

Default weights are random, at the released sizes (the real checkpoints cannot be downloaded here; the arithmetic
is the same): CLIP ViT-B/32 for both metrics (RefPAC-S++ with a random LoRA adapter merged, as at inference), and
for Polos a RoBERTa-base-sized sentence encoder with the 13-layer ScalarMix and the 6144 -> 2304 -> 1152 -> 1 head.
Pass `--polos-model DIR` / `--pacs-model DIR` to time converted or trained models instead.

Both metrics encode each distinct image and text once. Polos is timed in both modes: `per_item` (default) and
`official` (chunks of `--official-batch-size`). Polos's authors report 6.91 ms vs 4.45 ms per sample (RTX 3090).

    python benchmarks/benchmark_polos.py --images 20 --candidates 2 --references 5
"""

import argparse
import tempfile
from pathlib import Path

import torch
from benchmarking_utils import WORDS, best_time, make_workload, positive_int, vit_b32_clip_config

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


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=positive_int, default=20)
    parser.add_argument("--candidates", type=positive_int, default=2, help="candidates per image")
    parser.add_argument("--references", type=positive_int, default=5, help="references per image")
    parser.add_argument("--repeats", type=positive_int, default=1, help="timed runs of each metric (best is kept)")
    parser.add_argument("--official-batch-size", type=positive_int, default=32)
    parser.add_argument("--polos-model", help="a Polos directory or alias (default: random, released geometry)")
    parser.add_argument("--pacs-model", help="a PAC-S++ directory or alias (default: random ViT-B/32 + LoRA)")
    parser.add_argument("--device", default="auto", help="'auto' (CUDA when present), 'cpu', 'cuda'")
    add_example(parser, "python benchmarks/benchmark_polos.py --images 20 --candidates 2 --references 5")
    args = parser.parse_args()

    device = resolve_device(args.device)
    polos = load_model(args.polos_model, device=str(device)) if args.polos_model else random_polos().to(device)
    pacs = load_model(args.pacs_model, device=str(device)) if args.pacs_model else random_ref_pac_s_pp().to(device)
    weights = "given models" if args.polos_model and args.pacs_model else "random weights at the released sizes"
    with tempfile.TemporaryDirectory() as directory:
        items = make_workload(Path(directory), args.images, args.candidates, args.references)
        images = [path for path, _, _ in items]
        candidates = [caption for _, caption, _ in items]
        references = [refs for _, _, refs in items]
        print(
            f"workload: {args.images} images x {args.candidates} candidates x {args.references} references = "
            f"{len(items)} samples; device={device}, threads={torch.get_num_threads()}, {weights}"
        )
        pacs.score(images[:2], candidates[:2], references[:2], progress=False)  # warm-up
        polos.score(images[:2], candidates[:2], references[:2], progress=False)
        runs = {
            "RefPAC-S++": lambda: pacs.score(images, candidates, references, progress=False),
            "Polos (per_item)": lambda: polos.score(images, candidates, references, progress=False),
            f"Polos (official, B={args.official_batch_size})": lambda: polos.score(
                images, candidates, references, mode="official", batch_size=args.official_batch_size, progress=False
            ),
        }
        seconds = {name: best_time(run, args.repeats)[0] for name, run in runs.items()}
    for name, value in seconds.items():
        print(f"{name:28s} {1000 * value / len(items):8.2f} ms/sample  ({value:.2f} s)")
    print(f"Polos (per_item) / RefPAC-S++: {seconds['Polos (per_item)'] / seconds['RefPAC-S++']:.2f}x")


if __name__ == "__main__":
    main()
