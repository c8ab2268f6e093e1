#!/usr/bin/env python3
"""Convert an official PAC-S / PAC-S++ checkpoint into a Hub-ready transformers directory (and optionally publish it).
Same as `pacs-pp convert`; run with --help for the variants and examples. The code is
`modeling_pacs/cli/convert.py`.
"""

import sys

from modeling_pacs.cli.convert import main

if __name__ == "__main__":
    sys.exit(main())
