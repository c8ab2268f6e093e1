"""The `evaluate` module: `pacs_pp.py` (also at `metric/pacs_pp/`, copied by `evaluate` into its cache, so it imports
the package by absolute paths only), its video helpers and `pacs-pp register-metric`."""
