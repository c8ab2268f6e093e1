#!/usr/bin/env python3
"""Convert a Long-CLIP checkpoint (longclip-B.pt, longclip-L.pt) into a Hub-ready CLIP-S directory that reads 248
tokens. Same as `pacs-pp convert-longclip`; run with --help. The command is generated from the registry
(`modeling_pacs/cli/convert.py`).
"""

import sys

from modeling_pacs.cli.convert import converter_main

if __name__ == "__main__":
    sys.exit(converter_main("convert-longclip")())
