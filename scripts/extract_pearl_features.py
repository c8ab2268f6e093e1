#!/usr/bin/env python3
"""Run Pearl's frozen encoders once over a dataset and cache the features (sharded, resumable).

The code is `modeling_pacs/cli/extract_pearl_features.py`; run with --help for the options and examples.
"""

import sys

from modeling_pacs.cli.extract_pearl_features import main

if __name__ == "__main__":
    sys.exit(main())
