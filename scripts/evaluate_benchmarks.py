#!/usr/bin/env python3
"""Reproduce the papers' tables: human-correlation, hallucination and system-level benchmarks for any metric.

The code is `modeling_pacs/cli/evaluate_benchmarks.py`; run with --help for the options and examples.
"""

from modeling_pacs.cli.evaluate_benchmarks import main

if __name__ == "__main__":
    main()
