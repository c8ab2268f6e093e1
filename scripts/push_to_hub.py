#!/usr/bin/env python3
"""Validate a PAC-S / PAC-S++ model directory and upload it to the Hugging Face Hub.

The code is `modeling_pacs/cli/push_to_hub.py`; run with --help for the options and examples.
"""

import sys

from modeling_pacs.cli.push_to_hub import main

if __name__ == "__main__":
    sys.exit(main())
