"""Captioning with PAC-S++ as a reward: a CLIP-feature captioner, SCST training, reward functions, grammar measures.

Not remote code (except `configuration_captioner.py` / `modeling_captioner.py`, which import only torch and
transformers so a saved captioner loads with `trust_remote_code=True`).
"""
