#!/usr/bin/env python3
"""Train PAC-S++ (LoRA, lambda_v=0.1, lambda_t=0.001) or PAC-S (projections, 0.05 / 0.1) with positive-augmented
contrastive learning (docs/spec/pacs.md#training), and write a Hub-ready model directory.

The code is `modeling_pacs/cli/train_pacs.py`; run with --help for the options and examples.
"""

from modeling_pacs.cli.train_pacs import main

if __name__ == "__main__":
    main()
