"""The command lines of Polos's converter, `pacs-pp convert-polos`: its arguments and call (the
`ConverterCommand` of `polos/spec.py` names them; `pacs-pp` builds the subcommand)."""

import argparse

from ..cli.arguments import add_output_arguments

CONVERT_EPILOG = """\
The released checkpoint is reprod/reprod.ckpt of https://polos-polaris.s3.ap-northeast-1.amazonaws.com/reprod.zip,
with hparams.yaml beside it. It is read with torch.load(weights_only=True); nothing in it is executed.

Variants:

  pacs-pp convert-polos --checkpoint reprod/reprod.ckpt --text-encoder ./sup-simcse-roberta-base --output-dir polos
"""


def add_convert_arguments(parser: argparse.ArgumentParser):
    parser.add_argument("--checkpoint", required=True, help="reprod.ckpt (loaded with weights_only=True)")
    parser.add_argument("--hparams", help="hparams.yaml (default: the one beside the checkpoint)")
    parser.add_argument(
        "--text-encoder",
        help="Hub id or directory with the RoBERTa config and tokenizer (default: the hparams' pretrained_model)",
    )
    add_output_arguments(parser)


def convert(args: argparse.Namespace):
    from .convert import convert_polos_checkpoint

    convert_polos_checkpoint(
        args.checkpoint,
        args.output_dir,
        hparams=args.hparams,
        text_encoder=args.text_encoder,
        head_dim=args.head_dim,
        overwrite=args.overwrite,
    )
