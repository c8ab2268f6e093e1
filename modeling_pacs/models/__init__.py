"""The remote code, and only it: exactly the files `save_pretrained` copies into a model directory.

`configuration_*.py` and `modeling_*.py` of PAC-S++ (and PAC-S, CLIP-S), Polos, Pearl, DENEB and the captioner, and
what they import: `inputs` (input checks, image and text pipelines), `scoring` (PAC-S++'s formulas as pure tensor
functions, and the helpers every metric shares), `scoring_polos`, `scoring_pearl` and `scoring_deneb` (each of those
metrics' own formulas), `sentence_mix` (the ScalarMix and MLP head of the COMET-lineage metrics), `artifacts` (checks
of a directory's files before loading), `backbones` (CLIP / SigLIP), `video` + `video_scoring`, `fast_clip` (packed
CPU encoders) and `embedding_cache`. A saved directory holds these files flat, so they import each other with
single-dot imports only, and nothing outside the standard library, torch, transformers, peft, numpy and PIL. A new
metric's configuration, model and formulas (`scoring_<metric>.py`) go here;
everything else of the package (loading by alias, converters, training, CLI) lives outside.

This `__init__` imports nothing, so `import modeling_pacs.models.inputs` stays light.
"""
