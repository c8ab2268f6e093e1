"""Tiny random models built in code, for tests, `pacs-pp make-tiny` and the `tiny` aliases of `load_model`.

Never used on a production path: only `loading.load_model` (for a `tiny*` alias), the `make-tiny` command and the
captioner script's `--tiny` smoke runs reach in here, and a layout test keeps it so. One module per system
(`pacs`, `polos`, `pearl`, `synthetic`, ...); a new metric's tiny builder goes here too.
"""
