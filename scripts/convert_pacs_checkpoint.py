#!/usr/bin/env python
"""Convert an official PAC-S / PAC-S++ checkpoint into a Hub-ready transformers directory (and optionally publish it).

The official files (SPEC §4) and their variants:

  clip_ViT-B-32.pth         --variant pac_s_vit_b32            PAC-S, OpenAI CLIP ViT-B/32
  openClip_ViT-L-14.pth     --variant pac_s_openclip_vit_l14   PAC-S, OpenCLIP ViT-L-14 laion2b_s32b_b82k (GELU)
  PAC++_clip_ViT-B-32.pth   --variant pac_s_pp_vit_b32         PAC-S++, OpenAI CLIP ViT-B/32 + LoRA
  PAC++_clip_ViT-L-14.pth   --variant pac_s_pp_vit_l14         PAC-S++, OpenAI CLIP ViT-L/14 + LoRA

Examples:

  python scripts/convert_pacs_checkpoint.py --checkpoint PAC++_clip_ViT-B-32.pth --variant pac_s_pp_vit_b32 \\
      --output pac-s-pp-clip-vit-b32
  python scripts/convert_pacs_checkpoint.py --checkpoint PAC++_clip_ViT-B-32.pth --variant pac_s_pp_vit_b32 \\
      --output pac-s-pp-full --lora-mode full
  python scripts/convert_pacs_checkpoint.py --checkpoint clip_ViT-B-32.pth --variant pac_s_vit_b32 \\
      --output pac-s-clip-vit-b32 --push-to-hub my-user/pac-s-clip-vit-b32 --dry-run
"""

import argparse
import sys

from modeling_pacs.convert import LORA_MODES, OFFICIAL_VARIANTS, OPENAI_HEAD_DIM, CheckpointError, convert_checkpoint
from modeling_pacs.hub import ModelDirectoryError, push_model_directory


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n", 2)[2],
        formatter_class=argparse.RawTextHelpFormatter,
    )
    parser.add_argument("--checkpoint", required=True, help="the official .pth file (loaded with weights_only=True)")
    parser.add_argument("--variant", required=True, choices=list(OFFICIAL_VARIANTS))
    parser.add_argument("--output", required=True, help="directory to write (must not exist unless --overwrite)")
    parser.add_argument(
        "--lora-mode",
        choices=LORA_MODES,
        default="official",
        help="PAC-S++: 'official' reproduces the released inference exactly (MLP LoRA deltas skipped, as the "
        "official code does); 'full' applies every delta. Default: official",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output directory")
    parser.add_argument("--push-to-hub", metavar="REPO_ID", help="upload the directory to this Hub model repository")
    parser.add_argument("--dry-run", action="store_true", help="with --push-to-hub: validate and list, upload nothing")
    parser.add_argument("--private", action="store_true", help="with --push-to-hub: create a private repository")
    parser.add_argument(
        "--allow-other-geometry",
        action="store_true",
        help="accept a geometry other than the variant's released backbone (custom or test checkpoints)",
    )
    parser.add_argument(
        "--head-dim",
        type=int,
        default=OPENAI_HEAD_DIM,
        help=f"attention head size used to derive head counts (default {OPENAI_HEAD_DIM}, as every released CLIP)",
    )
    parser.add_argument("--no-verify", action="store_true", help="skip reloading the output to check its features")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        convert_checkpoint(
            args.checkpoint,
            args.variant,
            args.output,
            lora_mode=args.lora_mode,
            head_dim=args.head_dim,
            allow_other_geometry=args.allow_other_geometry,
            overwrite=args.overwrite,
            verify=not args.no_verify,
        )
        if args.push_to_hub:
            push_model_directory(args.output, args.push_to_hub, dry_run=args.dry_run, private=args.private)
    except (CheckpointError, ModelDirectoryError, FileNotFoundError, FileExistsError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
