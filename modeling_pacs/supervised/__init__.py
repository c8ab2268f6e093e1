"""What the supervised caption metrics trained on human judgements (Polos, Pearl) share: `data` (one reader for the
Spica / Polaris / Nebula layouts, row errors naming file, row and column), `correlations` (the validation metrics)
and `training` (early stopping on a validation correlation, checked training arguments, a `Trainer` base whose
evaluation returns predictions and targets). A new supervised metric trains with these pieces.

Not remote code: it may import scipy and datasets. Polos uses it in `modeling_pacs/polos/training.py`, Pearl in
`modeling_pacs/pearl/training.py`; each keeps its recipe (metric names, early-stopping policy, hyper-parameters) as
arguments of these pieces.

Example:

```python
>>> from modeling_pacs.supervised import correlation_metrics
>>> correlation_metrics([0.1, 0.4, 0.3], [0.0, 0.5, 0.2], {"kendall": "kendall_c"})
{'kendall': 1.0}
>>> correlation_metrics([0.1, 0.4, 0.3], [0.0, 0.5, 0.2], {"kendall_b": "kendall_b"}, scale=100)
{'kendall_b': 100.0}
```
"""

from .correlations import CORRELATIONS, correlation, correlation_metrics
from .data import RowError, check_references, check_target, row_error
from .training import (
    SupervisedMetricTrainer,
    check_training_settings,
    early_stopping_callback,
    supervised_training_arguments,
)

__all__ = [
    "CORRELATIONS",
    "RowError",
    "SupervisedMetricTrainer",
    "check_references",
    "check_target",
    "check_training_settings",
    "correlation",
    "correlation_metrics",
    "early_stopping_callback",
    "row_error",
    "supervised_training_arguments",
]
