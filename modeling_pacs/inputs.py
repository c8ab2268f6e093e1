"""Removed path, kept only to explain itself: `evaluate` modules registered by an early pacs-pp (copies of the whole
metric script) import it. Registrations now import the metric from `modeling_pacs.metric_module`."""

raise ImportError(
    "modeling_pacs.inputs was removed (use modeling_pacs.models.inputs). An evaluate module importing it "
    "was registered by an early pacs-pp: re-run `pacs-pp register-metric`",
    name=__name__,
)
