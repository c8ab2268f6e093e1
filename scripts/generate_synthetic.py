#!/usr/bin/env python3
"""Generate PAC-S++'s synthetic positives: a BLIP caption per real image, a Stable Diffusion image per human caption.

The code is `modeling_pacs/cli/generate_synthetic.py`; run with --help for the options and examples.
"""

from modeling_pacs.cli.generate_synthetic import main

if __name__ == "__main__":
    main()
