"""The command lines of Pearl's converters, `pacs-pp convert-pearl` and `pacs-pp convert-beit3`: their
arguments and calls (the `ConverterCommand`s of `pearl/spec.py` name them; `pacs-pp` builds the subcommands)."""

import argparse
from pathlib import Path

from ..cli.arguments import add_output_arguments
from .spec import ENCODER_NAMES, NUM_HEADS

BEIT3_EPILOG = """\
Both files come from https://github.com/microsoft/unilm/tree/master/beit3 (checkpoint links in its README). The
checkpoint is read with weights_only=True; every key must be used and every shape must match.
"""


def add_beit3_arguments(parser: argparse.ArgumentParser):
    parser.add_argument("--checkpoint", required=True, type=Path, help="beit3_base_itc_patch16_224.pth")
    parser.add_argument("--sentencepiece", required=True, type=Path, help="beit3.spm")
    add_output_arguments(parser, head_dim=False)
    parser.add_argument("--num-heads", type=int, default=12, help="attention heads (base: 12, large: 16)")


def convert_beit3(args: argparse.Namespace):
    from ..input_paths import check_input_file
    from ..output_paths import check_output_directory
    from .convert_beit3 import BEIT3_CHECKPOINT_FILE, convert_beit3_checkpoint

    if args.num_heads <= 0:
        raise ValueError(f"--num-heads must be > 0, got {args.num_heads}")
    check_input_file(args.checkpoint, "--checkpoint", BEIT3_CHECKPOINT_FILE, missing=FileNotFoundError)
    check_input_file(args.sentencepiece, "--sentencepiece", "the beit3.spm file itself", missing=FileNotFoundError)
    # The project's output rules: never a place holding the inputs; --overwrite only over a model directory.
    check_output_directory(args.output_dir, inputs=[args.checkpoint, args.sentencepiece], overwrite=args.overwrite)
    model = convert_beit3_checkpoint(args.checkpoint, args.output_dir, args.sentencepiece, args.num_heads)
    print(f"BEiT-3 ({model.num_parameters() / 1e6:.1f} M parameters) written to {args.output_dir}")


CONVERT_EPILOG = """\
Pearl's trainer writes experiments/lightning/<version>/epoch=N-step=M.ckpt with hparams.yaml beside it. The file is
read with torch.load(weights_only=True); nothing in it is executed.

Variants:

  pacs-pp convert-pearl --checkpoint run/epoch=3-step=1234.ckpt --hparams run/hparams.yaml \\
      --encoder-path clip=./pac-s-pp-clip-vit-l14 --encoder-dim clip=768 --output-dir pearl-l14
"""


def encoder_value(kind: str):
    """argparse type of `NAME=PATH` / `NAME=N` for one of Pearl's encoders."""

    def parse(text: str) -> tuple[str, str]:
        name, separator, value = text.partition("=")
        if not separator or name not in ENCODER_NAMES or not value:
            raise argparse.ArgumentTypeError(f"expected NAME={kind}, NAME one of {list(ENCODER_NAMES)}, got {text!r}")
        if kind == "N" and not value.isdigit():
            raise argparse.ArgumentTypeError(f"expected NAME=N with a positive integer N, got {text!r}")
        return name, value

    return parse


def add_convert_arguments(parser: argparse.ArgumentParser):
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


def convert(args: argparse.Namespace):
    from .convert import convert_pearl_checkpoint

    convert_pearl_checkpoint(
        args.checkpoint,
        args.output_dir,
        hparams=args.hparams,
        overwrite=args.overwrite,
        num_heads=args.num_heads,
        encoder_paths=dict(args.encoder_path),
        encoder_dims={name: int(value) for name, value in args.encoder_dim},
    )
