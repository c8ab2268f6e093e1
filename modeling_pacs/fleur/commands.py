"""The command line of FLEUR's converter, `pacs-pp convert-fleur`: its arguments and call (the `ConverterCommand` of
`fleur/spec.py` names them; `pacs-pp` builds the subcommand)."""

import argparse

from ..cli.arguments import add_output_arguments

CONVERT_EPILOG = """\
--llava takes LLaVA-1.5 in the original repository's layout (liuhaotian/llava-v1.5-13b: config.json with
mm_vision_tower, pytorch_model-*.bin read with torch.load(weights_only=True), tokenizer.model), whose vision tower
(openai/clip-vit-large-patch14-336) is read from --vision-tower or from the config's mm_vision_tower; or a LLaVA in
transformers' layout (llava-hf/llava-1.5-13b-hf), taken as is. The keys are mapped as transformers'
convert_llava_weights_to_hf.py maps them, and the saved directory is loaded back and compared.

Variants:

  pacs-pp convert-fleur --llava llava-v1.5-13b --vision-tower clip-vit-large-patch14-336 --output-dir fleur-13b
  pacs-pp convert-fleur --llava llava-hf/llava-1.5-13b-hf --output-dir fleur-13b
"""


def add_convert_arguments(parser: argparse.ArgumentParser):
    parser.add_argument(
        "--llava", required=True, help="LLaVA-1.5 directory (original or transformers layout) or Hub id"
    )
    parser.add_argument("--vision-tower", help="CLIP vision tower directory (default: the config's mm_vision_tower)")
    add_output_arguments(parser, head_dim=False)


def convert(args: argparse.Namespace):
    from .convert import convert_llava

    convert_llava(args.llava, args.output_dir, vision_tower=args.vision_tower, overwrite=args.overwrite)
