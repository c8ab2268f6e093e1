#!/usr/bin/env python3
"""Train Pearl on cached features (docs/spec/pearl.md#training): Spica layout by default, Nebula / Polaris with
--layout.

The code is `modeling_pacs/cli/train_pearl.py`; run with --help for the options and examples.
"""

import sys

from modeling_pacs.cli.train_pearl import main

if __name__ == "__main__":
    sys.exit(main())
