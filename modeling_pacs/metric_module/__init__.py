"""The `evaluate` module: the metric class `PACSPlusPlus` (`pacs_pp.py`, with its video helpers in `video.py`), the
script `evaluate.load` reads (`script/pacs_pp.py`, which imports the class from here: the one path it relies on) and
`pacs-pp register-metric` (`registration.py`)."""

from .pacs_pp import PACSPlusPlus
from .registration import check_registration

__all__ = ["PACSPlusPlus", "check_registration"]
