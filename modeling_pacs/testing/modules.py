"""Loading other projects' reference code (the official PAC-S++ code, OpenAI CLIP, open_clip, Long-CLIP) for parity
tests and benchmarks, where it imports packages this environment lacks (torchvision, pkg_resources)."""

import contextlib
import sys
import types
from collections.abc import Iterator


@contextlib.contextmanager
def temporary_modules(modules: dict[str, types.ModuleType]) -> Iterator[None]:
    """Put placeholder `modules` into `sys.modules` while the block runs, then restore what was there (so nothing
    else, e.g. transformers' availability checks, ever sees a placeholder)."""
    saved = {name: sys.modules.get(name) for name in modules}
    sys.modules.update(modules)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


__all__ = ["temporary_modules"]
