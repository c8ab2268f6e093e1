"""PAC-S++ (PAC-S, CLIP-S and their reference-based versions) as an `evaluate` metric.

This is the script `evaluate.load` reads: `metric/pacs_pp/pacs_pp.py` links to it, and `pacs-pp register-metric`
writes it into evaluate's module cache. It takes the metric from the installed pacs-pp package
(`modeling_pacs.metric_module.PACSPlusPlus`, documented there), so upgrading pacs-pp upgrades the metric.
"""

# What this file expects of the package; a pacs-pp that expects another format refuses this file.
REGISTRATION_FORMAT = 1

try:
    from modeling_pacs.metric_module import PACSPlusPlus, check_registration
except ImportError as error:
    if not (error.name or "").startswith("modeling_pacs"):  # a dependency of pacs-pp is missing: say that
        raise
    raise ImportError(
        f"the evaluate module {__file__} cannot import the metric from pacs-pp ({error}): it was registered by "
        "another pacs-pp version; re-run `pacs-pp register-metric` with the pacs-pp of this environment"
    ) from error

check_registration(REGISTRATION_FORMAT, __file__)

__all__ = ["PACSPlusPlus"]
