#!/usr/bin/env python
"""Convert a Long-CLIP checkpoint (longclip-B.pt / longclip-L.pt) into a Hub-ready CLIP-S directory reading 248 tokens.

Same as `pacs-pp convert-longclip`; run with --help for the released files and examples. The code is
`modeling_pacs/convert_longclip.py`.
"""

import sys

from modeling_pacs.convert_longclip import main

if __name__ == "__main__":
    sys.exit(main())
