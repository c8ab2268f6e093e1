#!/usr/bin/env python3
"""Train the PAC-S++ captioner (docs/spec/pacs.md#scst): `--stage xe` (cross-entropy, Eq. 16, the paper's warm-up /
constant / decay schedule) then `--stage scst` (SCST with 5 beams and a PAC-S++ / RefPAC-S++ / CLIP-S / CIDEr-D reward,
baseline = mean reward of the image's beams, Eq. 19), and write an evaluation report on the test split.

The code is `modeling_pacs/cli/train_captioner.py`; run with --help for the options and examples.
"""

import sys

from modeling_pacs.cli.train_captioner import main

if __name__ == "__main__":
    sys.exit(main())
