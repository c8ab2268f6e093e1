#!/usr/bin/env python3
"""Convert a Long-CLIP checkpoint (longclip-B.pt, longclip-L.pt) into a Hub-ready CLIP-S directory that reads 248
tokens. Same as `pacs-pp convert-longclip`; run with --help. The code is `modeling_pacs/cli/convert.py`.
"""

import sys

from modeling_pacs.cli.convert import longclip_main

if __name__ == "__main__":
    sys.exit(longclip_main())
