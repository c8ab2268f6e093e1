"""The n-gram caption metrics of the COCO caption evaluation (BLEU-1..4, METEOR, ROUGE-L, CIDEr-D, SPICE), as
registry entries: they have no model to load and score through `pycocoevalcap`'s scorers (the `captioning` extra;
METEOR, SPICE and the PTB tokenizer also need Java)."""
