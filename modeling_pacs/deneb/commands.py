"""The command line of DENEB's converter, `pacs-pp convert-deneb`: its arguments and call (the `ConverterCommand` of
`deneb/spec.py` names them; `pacs-pp` builds the subcommand)."""

import argparse

from ..cli.arguments import add_output_arguments

CONVERT_EPILOG = """\
The checkpoint is the .ckpt DENEB's trainer writes (deneb/cli.py train), with hparams.yaml beside it. The authors
release no weights. It is read with torch.load(weights_only=True); nothing in it is executed. The RoBERTa config and
tokenizer come from --text-encoder (a local copy of princeton-nlp/sup-simcse-roberta-base), else from the hparams'
pretrained_model.

Variants:

  pacs-pp convert-deneb --checkpoint lightning_logs/version_0/checkpoints/epoch=3.ckpt --output-dir deneb
"""


def add_convert_arguments(parser: argparse.ArgumentParser):
    parser.add_argument("--checkpoint", required=True, help="the trainer's .ckpt (loaded with weights_only=True)")
    parser.add_argument("--hparams", help="hparams.yaml (default: the one beside the checkpoint)")
    parser.add_argument(
        "--text-encoder",
        help="directory or Hub id with the RoBERTa config and tokenizer (default: the hparams' pretrained_model)",
    )
    add_output_arguments(parser)


def convert(args: argparse.Namespace):
    from .convert import convert_deneb_checkpoint

    convert_deneb_checkpoint(
        args.checkpoint,
        args.output_dir,
        hparams=args.hparams,
        text_encoder=args.text_encoder,
        head_dim=args.head_dim,
        overwrite=args.overwrite,
    )
