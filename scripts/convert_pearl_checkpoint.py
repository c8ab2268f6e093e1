#!/usr/bin/env python
"""Convert a Pearl checkpoint written by Pearl's own training code (epoch=N-step=M.ckpt) into a PearlModel directory.

Same as `pacs-pp convert-pearl`; run with --help for the options and examples. The code is
`modeling_pacs/pearl/convert.py`.
"""

import sys

from modeling_pacs.pearl.convert import main

if __name__ == "__main__":
    sys.exit(main())
