"""FLEUR and RefFLEUR (Lee et al., ACL 2024), an LLM-as-a-judge metric on LLaVA-1.5: the registry entry, the loader
and the converter of LLaVA checkpoints in the original repository's layout (docs/spec/fleur.md)."""
