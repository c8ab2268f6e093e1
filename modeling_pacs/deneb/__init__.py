"""DENEB (Matsuda et al., ACCV 2024) beside its remote code: its registry entry (`spec.py`), loader (`loading.py`),
the converter of the authors' Lightning checkpoints (`convert.py`, `commands.py`)."""
