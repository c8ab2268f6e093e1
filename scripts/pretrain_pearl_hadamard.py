#!/usr/bin/env python3
"""Pretrain Pearl's HadamardNet to multiply (docs/spec/pearl.md#a2) and write the shipped initialisation.

The code is `modeling_pacs.cli.pretrain_pearl_hadamard.py`; run with --help for the options and examples.
"""

import sys

from modeling_pacs.cli.pretrain_pearl_hadamard import main

if __name__ == "__main__":
    sys.exit(main())
