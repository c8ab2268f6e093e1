#!/usr/bin/env python
"""Validate a PAC-S / PAC-S++ model directory and upload it to the Hugging Face Hub.

Examples:

  python scripts/push_to_hub.py pac-s-pp-clip-vit-b32 my-user/pac-s-pp-clip-vit-b32 --dry-run
  python scripts/push_to_hub.py pac-s-pp-clip-vit-b32 my-user/pac-s-pp-clip-vit-b32 --private
"""

import argparse
import sys

from modeling_pacs.hub import ModelDirectoryError, push_model_directory

from .arguments import add_example
from .errors import USAGE_STATUS, report_error, reports_errors


@reports_errors("push_to_hub")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="a model directory (converted or trained)")
    parser.add_argument("repo_id", help="the Hub model repository, owner/name (created if missing)")
    parser.add_argument("--dry-run", action="store_true", help="validate and list the files, upload nothing")
    parser.add_argument("--private", action="store_true", help="create the repository as private")
    add_example(parser, "python scripts/push_to_hub.py pac-s-pp-clip-vit-b32 my-user/pac-s-pp-clip-vit-b32 --dry-run")
    args = parser.parse_args(argv)
    try:
        push_model_directory(args.folder, args.repo_id, dry_run=args.dry_run, private=args.private)
    except (ModelDirectoryError, ValueError) as error:
        return report_error(error, "push_to_hub", USAGE_STATUS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
