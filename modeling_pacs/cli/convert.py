"""The converters' command lines: `pacs-pp convert` (official PAC-S / PAC-S++ checkpoints), `pacs-pp convert-polos`
(the released Polos checkpoint), `pacs-pp convert-pearl` (checkpoints of Pearl's training code),
`pacs-pp convert-longclip` (Long-CLIP, a CLIP that reads 248 tokens) and `pacs-pp convert-beit3` (Pearl's BEiT-3
encoder), with their plumbing once.

Each converter is a library function that raises `ValueError` / `FileNotFoundError` / `FileExistsError` naming the bad
input; here one `run_converter` turns those into one `pacs-pp COMMAND: error: ...` line and exit status 2
(`cli/errors.py`). A new converter is a `Converter` entry in `CONVERTERS` (its parser and its call), and `pacs-pp`
lists it.
"""

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..pacs.convert import LORA_MODES, OPENAI_HEAD_DIM
from ..variants import OFFICIAL_VARIANTS
from .arguments import add_example
from .errors import USAGE_STATUS, report_error, reports_errors


@dataclass(frozen=True)
class Converter:
    """A `pacs-pp` conversion subcommand: its help line, description, examples, arguments and the call."""

    help: str
    description: str
    epilog: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    convert: Callable[[argparse.Namespace], None]
    example: str  # one command line, the last line of --help


def run_converter(
    convert: Callable[[argparse.Namespace], None], args: argparse.Namespace, prog: str | None = None
) -> int:
    """Run a parsed conversion; an error about the input prints one clear line and returns 2."""
    try:
        convert(args)
    except (ValueError, FileNotFoundError, FileExistsError) as error:  # CheckpointError, ModelDirectoryError, ...
        return report_error(error, prog, USAGE_STATUS)
    return 0


def add_output_arguments(parser: argparse.ArgumentParser, head_dim: bool = True):
    """`--output`, `--overwrite` (and `--head-dim`), the same for every converter."""
    parser.add_argument("--output", required=True, type=Path, help="directory to write (empty unless --overwrite)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing model directory")
    if head_dim:
        parser.add_argument(
            "--head-dim",
            type=int,
            default=OPENAI_HEAD_DIM,
            help=f"attention head size used to derive head counts (default {OPENAI_HEAD_DIM}, as every released CLIP)",
        )


# ---------------------------------------------------------------------------------------------------- PAC-S / PAC-S++
def official_files_table() -> str:
    rows = [
        f"  {variant.checkpoint_file:<26}--variant {name:<27}{variant.display_name}"
        for name, variant in OFFICIAL_VARIANTS.items()
    ]
    return "The official files and their variants:\n\n" + "\n".join(rows)


PACS_EPILOG = (
    official_files_table()
    + """

Examples:

  pacs-pp convert --checkpoint PAC++_clip_ViT-B-32.pth --variant pac_s_pp_vit_b32 \\
      --output pac-s-pp-clip-vit-b32
  pacs-pp convert --checkpoint PAC++_clip_ViT-B-32.pth --variant pac_s_pp_vit_b32 \\
      --output pac-s-pp-full --lora-mode full
  pacs-pp convert --checkpoint clip_ViT-B-32.pth --variant pac_s_vit_b32 \\
      --output pac-s-clip-vit-b32 --push-to-hub my-user/pac-s-clip-vit-b32 --dry-run
"""
)


def add_pacs_arguments(parser: argparse.ArgumentParser):
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


def convert_pacs(args: argparse.Namespace):
    from ..hub import push_model_directory
    from ..pacs.convert import convert_checkpoint

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


# ---------------------------------------------------------------------------------------------------- Polos
POLOS_EPILOG = """\
The released checkpoint is reprod/reprod.ckpt of https://polos-polaris.s3.ap-northeast-1.amazonaws.com/reprod.zip,
with hparams.yaml beside it. It is read with torch.load(weights_only=True); nothing in it is executed.

Examples:

  pacs-pp convert-polos --checkpoint reprod/reprod.ckpt --output polos-vit-b32
  pacs-pp convert-polos --checkpoint reprod/reprod.ckpt --text-encoder ./sup-simcse-roberta-base --output polos
"""


def add_polos_arguments(parser: argparse.ArgumentParser):
    parser.add_argument("--checkpoint", required=True, help="reprod.ckpt (loaded with weights_only=True)")
    parser.add_argument("--hparams", help="hparams.yaml (default: the one beside the checkpoint)")
    parser.add_argument(
        "--text-encoder",
        help="Hub id or directory with the RoBERTa config and tokenizer (default: the hparams' pretrained_model)",
    )
    add_output_arguments(parser)


def convert_polos(args: argparse.Namespace):
    from ..polos.convert import convert_polos_checkpoint

    convert_polos_checkpoint(
        args.checkpoint,
        args.output,
        hparams=args.hparams,
        text_encoder=args.text_encoder,
        head_dim=args.head_dim,
        overwrite=args.overwrite,
    )


# ---------------------------------------------------------------------------------------------------- BEiT-3
BEIT3_EPILOG = """\
Both files come from https://github.com/microsoft/unilm/tree/master/beit3 (checkpoint links in its README). The
checkpoint is read with weights_only=True; every key must be used and every shape must match.

Example:

  pacs-pp convert-beit3 --checkpoint beit3_base_itc_patch16_224.pth --sentencepiece beit3.spm \\
      --output beit3-base-itc-patch16-224
"""


def add_beit3_arguments(parser: argparse.ArgumentParser):
    parser.add_argument("--checkpoint", required=True, type=Path, help="beit3_base_itc_patch16_224.pth")
    parser.add_argument("--sentencepiece", required=True, type=Path, help="beit3.spm")
    add_output_arguments(parser, head_dim=False)
    parser.add_argument("--num-heads", type=int, default=12, help="attention heads (base: 12, large: 16)")


def convert_beit3(args: argparse.Namespace):
    from ..output_paths import check_output_directory
    from ..pearl.convert_beit3 import convert_beit3_checkpoint

    if args.num_heads <= 0:
        raise ValueError(f"--num-heads must be > 0, got {args.num_heads}")
    for path in (args.checkpoint, args.sentencepiece):
        if not path.is_file():
            raise FileNotFoundError(f"{path} does not exist")
    # The project's output rules: never a place holding the inputs; --overwrite only over a model directory.
    check_output_directory(args.output, inputs=[args.checkpoint, args.sentencepiece], overwrite=args.overwrite)
    model = convert_beit3_checkpoint(args.checkpoint, args.output, args.sentencepiece, args.num_heads)
    print(f"BEiT-3 ({model.num_parameters() / 1e6:.1f} M parameters) written to {args.output}")


# ---------------------------------------------------------------------------------------------------- Pearl
PEARL_EPILOG = """\
Pearl's trainer writes experiments/lightning/<version>/epoch=N-step=M.ckpt with hparams.yaml beside it. The file is
read with torch.load(weights_only=True); nothing in it is executed.

Examples:

  pacs-pp convert-pearl --checkpoint "experiments/lightning/v1/epoch=3-step=1234.ckpt" --output pearl
  pacs-pp convert-pearl --checkpoint run/epoch=3-step=1234.ckpt --hparams run/hparams.yaml \\
      --encoder-path clip=./pac-s-pp-clip-vit-l14 --encoder-dim clip=768 --output pearl-l14
"""


def encoder_value(kind: str):
    """argparse type of `NAME=PATH` / `NAME=N` for one of Pearl's encoders."""
    from ..pearl.convert import ENCODER_NAMES

    def parse(text: str) -> tuple[str, str]:
        name, separator, value = text.partition("=")
        if not separator or name not in ENCODER_NAMES or not value:
            raise argparse.ArgumentTypeError(f"expected NAME={kind}, NAME one of {list(ENCODER_NAMES)}, got {text!r}")
        if kind == "N" and not value.isdigit():
            raise argparse.ArgumentTypeError(f"expected NAME=N with a positive integer N, got {text!r}")
        return name, value

    return parse


def add_pearl_arguments(parser: argparse.ArgumentParser):
    from ..pearl.convert import NUM_HEADS

    parser.add_argument("--checkpoint", required=True, help="epoch=N-step=M.ckpt (loaded with weights_only=True)")
    parser.add_argument(
        "--hparams", help="hparams.yaml (default: the one beside the checkpoint, else its hyper_parameters)"
    )
    add_output_arguments(parser, head_dim=False)
    parser.add_argument(
        "--encoder-path",
        action="append",
        default=[],
        type=encoder_value("PATH"),
        metavar="NAME=PATH",
        help="Hub id or directory of an encoder (clip, beit3, blip2, stella), replacing PearlConfig's default",
    )
    parser.add_argument(
        "--encoder-dim",
        action="append",
        default=[],
        type=encoder_value("N"),
        metavar="NAME=N",
        help="feature size of an encoder (defaults: clip 512, beit3 768, blip2 256, stella 768)",
    )
    parser.add_argument(
        "--num-heads",
        type=int,
        default=NUM_HEADS,
        help=f"attention heads of the transformer and cross-attention (Pearl's code: {NUM_HEADS})",
    )


def convert_pearl(args: argparse.Namespace):
    from ..pearl.convert import convert_pearl_checkpoint

    convert_pearl_checkpoint(
        args.checkpoint,
        args.output,
        hparams=args.hparams,
        overwrite=args.overwrite,
        num_heads=args.num_heads,
        encoder_paths=dict(args.encoder_path),
        encoder_dims={name: int(value) for name, value in args.encoder_dim},
    )


# ---------------------------------------------------------------------------------------------------- Long-CLIP
LONGCLIP_EPILOG = """\
The released checkpoints (Hugging Face Hub, BeichenZhang/LongCLIP-*), recognised by their geometry:

  longclip-B.pt            Long-CLIP ViT-B/16
  longclip-L.pt            Long-CLIP ViT-L/14
  longclip-B-32.pt         Long-CLIP ViT-B/32
  longclip-L@336px.pt      Long-CLIP ViT-L/14, 336 px

The directory scores CLIP-S / RefCLIP-S with 248-token captions.

Examples:

  pacs-pp convert-longclip --checkpoint longclip-B.pt --output clip-s-longclip-b16
  pacs-pp convert-longclip --checkpoint longclip-L.pt --output clip-s-longclip-l14 --weight-precision fp32
"""


def add_longclip_arguments(parser: argparse.ArgumentParser):
    from ..pacs.convert_longclip import WEIGHT_PRECISIONS

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
    from ..pacs.convert_longclip import convert_longclip_checkpoint

    convert_longclip_checkpoint(
        args.checkpoint,
        args.output,
        weight_precision=args.weight_precision,
        allow_other_geometry=args.allow_other_geometry,
        base_model_id=args.base_model_id,
        overwrite=args.overwrite,
        verify=not args.no_verify,
    )


CONVERTERS = {
    "convert": Converter(
        "convert an official PAC-S / PAC-S++ checkpoint",
        "Convert an official PAC-S / PAC-S++ checkpoint into a Hub-ready transformers directory.",
        PACS_EPILOG,
        add_pacs_arguments,
        convert_pacs,
        example="pacs-pp convert --checkpoint PAC++_clip_ViT-B-32.pth --variant pac_s_pp_vit_b32 --output pac-s-pp",
    ),
    "convert-polos": Converter(
        "convert the released Polos checkpoint",
        "Convert the released Polos Lightning checkpoint into a Hub-ready PolosModel directory.",
        POLOS_EPILOG,
        add_polos_arguments,
        convert_polos,
        example="pacs-pp convert-polos --checkpoint reprod/reprod.ckpt --output polos-vit-b32",
    ),
    "convert-beit3": Converter(
        "convert unilm's BEiT-3 retrieval checkpoint for Pearl",
        "Convert unilm's BEiT-3 base retrieval checkpoint into a transformers directory for Pearl's BEiT-3 encoder.",
        BEIT3_EPILOG,
        add_beit3_arguments,
        convert_beit3,
        example="pacs-pp convert-beit3 --checkpoint beit3_base_itc.pth --sentencepiece beit3.spm --output beit3",
    ),
    "convert-pearl": Converter(
        "convert a checkpoint written by Pearl's training code",
        "Convert a Pearl checkpoint written by Pearl's training code into a PearlModel directory.",
        PEARL_EPILOG,
        add_pearl_arguments,
        convert_pearl,
        example='pacs-pp convert-pearl --checkpoint "run/epoch=3-step=1234.ckpt" --output pearl',
    ),
    "convert-longclip": Converter(
        "convert a Long-CLIP checkpoint (CLIP-S that reads 248 tokens)",
        "Convert a Long-CLIP checkpoint into a Hub-ready CLIP-S directory that reads 248 tokens.",
        LONGCLIP_EPILOG,
        add_longclip_arguments,
        convert_longclip,
        example="pacs-pp convert-longclip --checkpoint longclip-B.pt --output clip-s-longclip-b16",
    ),
}


def build_parser(command: str, parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The parser of a conversion command (`parser`: a `pacs-pp` subparser to fill)."""
    converter = CONVERTERS[command]
    parser = parser or argparse.ArgumentParser(prog=f"pacs-pp {command}")
    parser.description, parser.epilog = converter.description, converter.epilog
    add_example(parser, converter.example)
    converter.add_arguments(parser)
    return parser


def run(command: str, args: argparse.Namespace) -> int:
    return run_converter(CONVERTERS[command].convert, args, f"pacs-pp {command}")


def converter_main(command: str) -> Callable[[list[str] | None], int]:
    """The `main(argv)` of a conversion script (`scripts/convert_*_checkpoint.py`)."""

    @reports_errors(f"pacs-pp {command}")
    def main(argv: list[str] | None = None) -> int:
        return run(command, build_parser(command).parse_args(argv))

    return main


main = converter_main("convert")
polos_main = converter_main("convert-polos")
beit3_main = converter_main("convert-beit3")
pearl_main = converter_main("convert-pearl")
longclip_main = converter_main("convert-longclip")

__all__ = [
    "CONVERTERS",
    "Converter",
    "beit3_main",
    "build_parser",
    "longclip_main",
    "main",
    "pearl_main",
    "polos_main",
    "run",
    "run_converter",
]
