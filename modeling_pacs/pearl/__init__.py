"""Pearl outside the remote code: the scorer with its frozen encoders, feature extraction and caching, HadamardNet
pretraining, training, and the converters (Pearl's Lightning checkpoints, unilm's BEiT-3).

The head (`PearlModel`, `PearlConfig`) is remote code in `models/`; its encoders are in `encoders/`.
"""
