"""Convert unilm's BEiT-3 base retrieval checkpoint into a transformers directory for Pearl's BEiT-3 encoder.

    python scripts/convert_beit3_checkpoint.py --checkpoint beit3_base_itc_patch16_224.pth \
        --sentencepiece beit3.spm --output beit3-base-itc-patch16-224

Both files come from https://github.com/microsoft/unilm/tree/master/beit3 (checkpoint links in its README). The
checkpoint is read with `weights_only=True`; every key must be used and every shape must match.
"""

import argparse
import sys
from pathlib import Path

from modeling_pacs.encoders.beit3 import convert_beit3_checkpoint
from modeling_pacs.output_paths import check_output_directory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--sentencepiece", type=Path, required=True, help="beit3.spm")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--num-heads", type=int, default=12, help="attention heads (base: 12, large: 16)")
    parser.add_argument("--overwrite", action="store_true", help="allow a non-empty --output")
    args = parser.parse_args(argv)
    if args.num_heads <= 0:
        parser.error("--num-heads must be > 0")
    for path in (args.checkpoint, args.sentencepiece):
        if not path.is_file():
            parser.error(f"{path} does not exist")
    try:  # the project's output rules: never a place holding the inputs; --overwrite only over a model directory
        check_output_directory(args.output, inputs=[args.checkpoint, args.sentencepiece], overwrite=args.overwrite)
    except ValueError as error:
        parser.error(str(error))
    try:
        model = convert_beit3_checkpoint(args.checkpoint, args.output, args.sentencepiece, args.num_heads)
    except ValueError as error:
        parser.error(str(error))
    print(f"BEiT-3 ({model.num_parameters() / 1e6:.1f} M parameters) written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
