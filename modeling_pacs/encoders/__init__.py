"""Frozen feature extractors for Pearl behind one small protocol (`PearlEncoder`: `encode_image`, `encode_text`).

Not remote code. Each encoder is a real implementation loaded through transformers:

| name | class | image features | text features |
|---|---|---|---|
| clip | [`PACSEncoder`] (PAC-S++ / CLIP, prompt "A photo depicts ") | `[B, 1, 512]` raw | `[B, 512]` raw |
| blip2 | [`BLIP2Encoder`] (`Salesforce/blip2-itm-vit-g` ITM projections) | `[B, 32, 256]` L2-normalised | `[B, 256]` |
| stella | [`StellaEncoder`] (`NovaSearch/stella_en_400M_v5` + `2_Dense_768`) | none (text only) | `[B, 768]` |
| beit3 | [`BEiT3RetrievalEncoder`] (BEiT-3 base ITC; see `pearl/convert_beit3.py`) | `[B, 1, 768]` | `[B, 768]` |

Configurations without BEiT-3 (`NO_BEIT3_*` in `configuration_pearl`) are the documented fallback.
"""

from .base import PearlEncoder
from .beit3 import BEiT3ForRetrieval, BEiT3RetrievalEncoder
from .blip2 import BLIP2Encoder, blip_caption_normalise
from .clip import PACSEncoder
from .loading import load_encoder
from .stella import StellaEncoder

__all__ = [
    "BEiT3ForRetrieval",
    "BEiT3RetrievalEncoder",
    "BLIP2Encoder",
    "PACSEncoder",
    "PearlEncoder",
    "StellaEncoder",
    "blip_caption_normalise",
    "load_encoder",
]
