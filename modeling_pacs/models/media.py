"""What a media path names, by its text alone: a remote file (refused: nothing is downloaded) or a video.

Standard library only, so that the command lines check their input files without importing torch (`inputs.py` and
`video.py` use these and re-export them).
"""

# `datasets.Image` dicts and path strings that name a remote file are refused: nothing is downloaded.
URL_SCHEMES = ("http://", "https://", "ftp://", "s3://", "gs://", "hf://", "az://", "abfs://")
# Extensions `pacs-score` treats as videos (GIFs stay images; pass --video to score them as videos).
VIDEO_EXTENSIONS = (".mp4", ".webm", ".mkv", ".avi", ".mov", ".m4v", ".mpg", ".mpeg")


def is_url(text: str) -> bool:
    """Whether a path string names a remote file (`URL_SCHEMES`), which is refused rather than downloaded."""
    return text.strip().lower().startswith(URL_SCHEMES)


__all__ = ["URL_SCHEMES", "VIDEO_EXTENSIONS", "is_url"]
