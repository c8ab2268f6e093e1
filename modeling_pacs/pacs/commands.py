"""The command lines of PAC-S / PAC-S++'s converters, `pacs-pp convert` and `pacs-pp convert-longclip`: their
arguments and calls (the `ConverterCommand`s of `pacs/spec.py` name them; `pacs-pp` builds the subcommands)."""

import argparse

from ..cli.arguments import add_output_arguments
from .spec import LORA_MODES, OFFICIAL_VARIANTS, WEIGHT_PRECISIONS


def official_files_table() -> str:
    rows = [
        f"  {variant.checkpoint_file:<26}--variant {name:<27}{variant.display_name}"
        for name, variant in OFFICIAL_VARIANTS.items()
    ]
    return "The official files and their variants:\n\n" + "\n".join(rows)


CONVERT_EPILOG = (
    official_files_table()
    + """

Variants:

  pacs-pp convert --checkpoint PAC++_clip_ViT-B-32.pth --variant pac_s_pp_vit_b32 \\
      --output-dir pac-s-pp-full --lora-mode full
  pacs-pp convert --checkpoint clip_ViT-B-32.pth --variant pac_s_vit_b32 \\
      --output-dir pac-s-clip-vit-b32 --push-to-hub my-user/pac-s-clip-vit-b32 --dry-run
"""
)


def add_convert_arguments(parser: argparse.ArgumentParser):
    parser.add_argument("--checkpoint", required=True, help="the official .pth file (loaded with weights_only=True)")
    parser.add_argument("--variant", required=True, choices=list(OFFICIAL_VARIANTS))
    add_output_arguments(parser)
    parser.add_argument(
        "--lora-mode",
        choices=LORA_MODES,
        default="official",
        help="PAC-S++: 'official' reproduces the released inference exactly (MLP LoRA deltas skipped, as the "
        "official code does); 'full' applies every delta. Default: official",
    )
    parser.add_argument("--push-to-hub", metavar="REPO_ID", help="upload the directory to this Hub model repository")
    parser.add_argument("--dry-run", action="store_true", help="with --push-to-hub: validate and list, upload nothing")
    parser.add_argument("--private", action="store_true", help="with --push-to-hub: create a private repository")
    parser.add_argument(
        "--allow-other-geometry",
        action="store_true",
        help="accept a geometry other than the variant's released backbone (custom or test checkpoints)",
    )
    parser.add_argument("--no-verify", action="store_true", help="skip reloading the output to check its features")


def convert(args: argparse.Namespace):
    from ..hub import push_model_directory
    from .convert import convert_checkpoint

    convert_checkpoint(
        args.checkpoint,
        args.variant,
        args.output_dir,
        lora_mode=args.lora_mode,
        head_dim=args.head_dim,
        allow_other_geometry=args.allow_other_geometry,
        overwrite=args.overwrite,
        verify=not args.no_verify,
    )
    if args.push_to_hub:
        push_model_directory(args.output_dir, args.push_to_hub, dry_run=args.dry_run, private=args.private)


LONGCLIP_EPILOG = """\
The released checkpoints (Hugging Face Hub, BeichenZhang/LongCLIP-*), recognised by their geometry:

  longclip-B.pt            Long-CLIP ViT-B/16
  longclip-L.pt            Long-CLIP ViT-L/14
  longclip-B-32.pt         Long-CLIP ViT-B/32
  longclip-L@336px.pt      Long-CLIP ViT-L/14, 336 px

The directory scores CLIP-S / RefCLIP-S with 248-token captions.

Variants:

  pacs-pp convert-longclip --checkpoint longclip-L.pt --output-dir clip-s-longclip-l14 --weight-precision fp32
"""


def add_longclip_arguments(parser: argparse.ArgumentParser):
    parser.add_argument("--checkpoint", required=True, help="longclip-B.pt / longclip-L.pt (loaded weights_only)")
    add_output_arguments(parser, head_dim=False)
    parser.add_argument(
        "--weight-precision",
        choices=WEIGHT_PRECISIONS,
        default="official",
        help="'official': round the linear/attention/projection weights to fp16 as Long-CLIP's own longclip.load() "
        "does, so features equal its loader's; 'fp32': keep the file's fp32 weights as stored. Default: official",
    )
    parser.add_argument(
        "--allow-other-geometry",
        action="store_true",
        help="accept a geometry other than the released checkpoints' (custom or test checkpoints)",
    )
    parser.add_argument("--base-model-id", help="Hub id recorded as the backbone (default: the released repository)")
    parser.add_argument("--no-verify", action="store_true", help="skip reloading the output to check its features")


def convert_longclip(args: argparse.Namespace):
    from .convert_longclip import convert_longclip_checkpoint

    convert_longclip_checkpoint(
        args.checkpoint,
        args.output_dir,
        weight_precision=args.weight_precision,
        allow_other_geometry=args.allow_other_geometry,
        base_model_id=args.base_model_id,
        overwrite=args.overwrite,
        verify=not args.no_verify,
    )
