"""Pearl's non-remote-code parts: HadamardNet pretraining, feature extraction and caching, data, training, scoring."""
