#!/usr/bin/env python3
"""Convert unilm's BEiT-3 base retrieval checkpoint into a transformers directory for Pearl's BEiT-3 encoder. Same as
`pacs-pp convert-beit3`; run with --help. The command is generated from the registry
(`modeling_pacs/cli/convert.py`).
"""

import sys

from modeling_pacs.cli.convert import converter_main

if __name__ == "__main__":
    sys.exit(converter_main("convert-beit3")())
