#!/usr/bin/env python3
"""Convert unilm's BEiT-3 base retrieval checkpoint into a transformers directory for Pearl's BEiT-3 encoder.

Same as `pacs-pp convert-beit3`; run with --help. The code is `modeling_pacs/cli/convert.py`.
"""

import sys

from modeling_pacs.cli.convert import beit3_main

if __name__ == "__main__":
    sys.exit(beit3_main())
