#!/usr/bin/env python3
"""Take the documentation's screenshot of the Space (docs/images/space.png) with Chromium, on the tiny model.

The code is `modeling_pacs/cli/space_screenshot.py`; run with --help for the options and the example.
"""

import sys

from modeling_pacs.cli.space_screenshot import main

if __name__ == "__main__":
    sys.exit(main())
