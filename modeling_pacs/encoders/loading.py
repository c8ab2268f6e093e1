"""Build Pearl's encoders from the `encoder_specs` of a `PearlConfig`."""

from pathlib import Path

from ..logs import quiet_library_loading
from .base import EMPTY_TEXT
from .beit3 import BEiT3RetrievalEncoder
from .blip2 import BLIP2Encoder
from .clip import PACSEncoder
from .stella import StellaEncoder


def resolve_path(path: str, base_directory: str | Path | None) -> str:
    """A spec path relative to the Pearl model directory if it exists there, else the path or Hub id as given."""
    if base_directory is not None and (Path(base_directory) / path).exists():
        return str(Path(base_directory) / path)
    return path


def load_encoder(name: str, spec: dict, base_directory: str | Path | None = None, device: str | None = None):
    """Build the encoder that `spec` (`{"type", "path", ...}`, from `PearlConfig.encoder_specs`) describes, without
    the libraries' loading chatter (`logs.quiet_library_loading`)."""
    with quiet_library_loading():
        return _load_encoder(name, spec, base_directory, device)


def _load_encoder(name: str, spec: dict, base_directory: str | Path | None, device: str | None):
    kind = spec.get("type")
    path = resolve_path(spec["path"], base_directory)
    if kind == "pacs":
        return PACSEncoder.from_pretrained(path, name=name, device=device)
    if kind == "blip2":
        return BLIP2Encoder.from_pretrained(
            path, name=name, device=device, empty_text=spec.get("empty_text", EMPTY_TEXT)
        )
    if kind == "stella":
        return StellaEncoder.from_pretrained(
            path,
            name=name,
            device=device,
            projection_subfolder=spec.get("projection_subfolder", "2_Dense_768"),
            empty_text=spec.get("empty_text", EMPTY_TEXT),
        )
    if kind == "beit3":
        return BEiT3RetrievalEncoder.from_pretrained(
            path, name=name, device=device, empty_text=spec.get("empty_text", EMPTY_TEXT)
        )
    raise ValueError(f"encoder '{name}' has unknown type {kind!r}: expected 'pacs', 'blip2', 'stella' or 'beit3'")


__all__ = ["load_encoder", "resolve_path"]
