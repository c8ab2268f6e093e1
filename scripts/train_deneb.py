#!/usr/bin/env python3
"""Train DENEB on Nebula (docs/spec/deneb.md#training) and write a Hub-ready DenebModel directory.

The code is `modeling_pacs/cli/train_deneb.py`; run with --help for the options and examples.
"""

import sys

from modeling_pacs.cli.train_deneb import main

if __name__ == "__main__":
    sys.exit(main())
