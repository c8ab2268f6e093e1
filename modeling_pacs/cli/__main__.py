"""`python -m modeling_pacs.cli` is `pacs-pp`."""

import sys

from .main import main

sys.exit(main())
