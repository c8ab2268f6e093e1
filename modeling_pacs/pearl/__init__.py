"""Pearl's non-remote-code parts: HadamardNet pretraining, feature extraction and caching, data, training, scoring,
and conversion of checkpoints written by Pearl's own training code."""
