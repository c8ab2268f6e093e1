#!/usr/bin/env python3
"""Train Polos on Polaris (docs/spec/polos.md#training) and write a Hub-ready PolosModel directory.

The code is `modeling_pacs/cli/train_polos.py`; run with --help for the options and examples.
"""

import sys

from modeling_pacs.cli.train_polos import main

if __name__ == "__main__":
    sys.exit(main())
