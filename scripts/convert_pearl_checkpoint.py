#!/usr/bin/env python3
"""Convert a Pearl checkpoint written by Pearl's own training code (PyTorch Lightning 1.2 .ckpt) into a PearlModel
directory. Same as `pacs-pp convert-pearl`; run with --help. The command is generated from the registry
(`modeling_pacs/cli/convert.py`).
"""

import sys

from modeling_pacs.cli.convert import converter_main

if __name__ == "__main__":
    sys.exit(converter_main("convert-pearl")())
