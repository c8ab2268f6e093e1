#!/usr/bin/env python3
"""Score a large caption corpus with PAC-S++ (or CLIP-S / PAC-S): sharded, streaming, resumable.

The code is `modeling_pacs/cli/score_corpus.py`; run with --help for the options and examples.
"""

from modeling_pacs.cli.score_corpus import main

if __name__ == "__main__":
    main()
