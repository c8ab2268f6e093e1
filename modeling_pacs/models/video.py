"""Video inputs for the video metric (docs/spec/pacs.md#video): validation, frame sampling and seeking decoders.

A video is a file (mp4, webm, mkv, avi, mov, read with PyAV, the `video` extra), a folder of frame images (sorted by
name), a list of images, a `(T, H, W, C)` NumPy array, a `(T, H, W, C)` or `(T, C, H, W)` torch tensor (the two
layouts of `torchvision.io.read_video`), or precomputed frame embeddings (a `(T, D)` tensor). Every frame follows
the image rules of `inputs.load_image` (docs/concepts/image-inputs.md); errors name it as `video 2, frame 5`. Only the
sampled frames are decoded: a video file is demuxed once (no decoding) to learn its frame timestamps and keyframes,
then each kept frame is reached by seeking to the keyframe before it.
"""

import bisect
import hashlib
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Union

import numpy as np
import PIL.Image
import torch

from .inputs import (
    CHANNELS,
    ImageInput,
    ImageInputError,
    describe_image,
    image_key,
    load_image,
    pixels_to_uint8,
    tensor_to_numpy,
)
from .media import VIDEO_EXTENSIONS  # noqa: F401 (re-exported: the engine's name for it)

VideoInput = Union[str, os.PathLike, Sequence[ImageInput], np.ndarray, torch.Tensor]


def describe_video(video: Any) -> str:
    """A short description of a video input for error messages."""
    if isinstance(video, (str, os.PathLike)):
        return f"'{os.fspath(video)}'"
    if isinstance(video, (np.ndarray, torch.Tensor)):
        return f"{type(video).__name__} of shape {tuple(video.shape)}"
    return f"{type(video).__name__} of {len(video)} images"


def check_num_frames(num_frames: int | None) -> int | None:
    """`None` (every frame) or a positive integer."""
    if num_frames is None:
        return None
    if isinstance(num_frames, bool) or not isinstance(num_frames, (int, np.integer)) or num_frames <= 0:
        raise ValueError(f"num_frames must be a positive integer or None (every frame), got {num_frames!r}")
    return int(num_frames)


def sample_frame_indices(num_available: int, num_frames: int | None) -> list[int]:
    """Every frame, or EMScore's `np.linspace(0, n - 1, K).astype(int)` (repeats frames when `n < K`)."""
    if num_frames is None:
        return list(range(num_available))
    return np.linspace(0, num_available - 1, num_frames).astype(int).tolist()


def is_frame_embeddings(video: Any) -> bool:
    """A `(T, D)` float tensor or array holds precomputed frame embeddings."""
    return isinstance(video, (np.ndarray, torch.Tensor)) and video.ndim == 2


def video_key(video: VideoInput) -> Any:
    """A key under which identical videos collide, so each distinct video is decoded and encoded once per call."""
    if isinstance(video, (str, os.PathLike)):
        return ("path", os.path.abspath(os.fspath(video)))
    if isinstance(video, (np.ndarray, torch.Tensor)):
        try:
            array = tensor_to_numpy(video, "video") if isinstance(video, torch.Tensor) else video
        except ImageInputError:  # `check_video` reports it
            return ("object", id(video))
        digest = hashlib.blake2b(np.ascontiguousarray(array).tobytes(), digest_size=16).digest()
        return ("array", array.shape, str(array.dtype), digest)
    return ("frames", tuple(image_key(image) for image in video))


def check_video(video: Any, index: int) -> None:
    """Reject what cannot be a video before any work starts, naming the item."""
    if isinstance(video, (str, os.PathLike)):
        path = Path(video)
        if not path.exists():
            raise FileNotFoundError(f"video {index} ('{path}') does not exist")
        return
    if isinstance(video, (np.ndarray, torch.Tensor)):
        if video.ndim == 2:  # frame embeddings
            if video.shape[0] == 0:
                raise ValueError(f"video {index} ({describe_video(video)}) has no frames")
            return
        frames = video_frames(video, index)  # the image rules on every frame, sampled or not
        description = f"a frame of {describe_image(video)}"
        for frame_index, frame in enumerate(frames):
            pixels_to_uint8(frame, f"video {index}, frame {frame_index}", description)
        return
    if isinstance(video, (bytes, bytearray, dict, PIL.Image.Image)) or not isinstance(video, Sequence):
        frames = ""
        if isinstance(video, PIL.Image.Image):  # a list of frames passed as the videos
            frames = " (the frames of one video are one list: wrap that list in a list)"
        raise TypeError(
            f"video {index} has unsupported type {type(video).__name__}: pass a video file path, a folder of "
            f"frames, a list of images, a (T, H, W, C) uint8 array or (T, D) frame embeddings{frames}"
        )
    if len(video) == 0:
        raise ValueError(f"video {index} is an empty list of frames: pass at least one image")


def folder_frames(folder: Path, index: int) -> list[Path]:
    """The image files of a frame folder, sorted by name."""
    extensions = {extension.lower() for extension in PIL.Image.registered_extensions()}
    frames = sorted(path for path in folder.iterdir() if path.is_file() and path.suffix.lower() in extensions)
    if not frames:
        raise ValueError(
            f"video {index} ('{folder}') is a folder with no image files: put its frames there as images "
            "(sorted by name), or pass the video file"
        )
    return frames


def iter_video_frames(video: VideoInput, index: int, num_frames: int | None) -> Iterator[PIL.Image.Image]:
    """The sampled frames of one video (not embeddings) as RGB PIL images, decoded lazily, in temporal order."""
    if isinstance(video, (str, os.PathLike)) and Path(video).is_dir():
        paths = folder_frames(Path(video), index)
        for frame_index in sample_frame_indices(len(paths), num_frames):
            yield load_frame(paths[frame_index], index, f"'{paths[frame_index].name}'")
        return
    if isinstance(video, (str, os.PathLike)):
        with VideoFile(video, index) as reader:
            yield from reader.read(sample_frame_indices(reader.frame_count, num_frames))
        return
    if isinstance(video, (np.ndarray, torch.Tensor)):
        video = video_frames(video, index)  # (T, H, W, C): each frame is an HxWxC array
    for frame_index in sample_frame_indices(len(video), num_frames):
        yield load_frame(video[frame_index], index, frame_index)


def load_frame(frame: ImageInput, index: int, frame_name: int | str) -> PIL.Image.Image:
    """One frame through the image rules of `inputs.load_image`; errors name the video and the frame."""
    return load_image(frame, index, name=f"video {index}, frame {frame_name}")


def video_frames(video: np.ndarray | torch.Tensor, index: int) -> np.ndarray:
    """A video array's frames as a `(T, H, W, C)` NumPy array. NumPy arrays are `(T, H, W, C)`; torch tensors
    `(T, H, W, C)` or `(T, C, H, W)` (`torchvision.io.read_video`'s two layouts); a shape both layouts explain, or
    neither, is refused naming the readings, never guessed."""
    description = describe_image(video)
    layouts = "(T, H, W, C) or (T, C, H, W)" if isinstance(video, torch.Tensor) else "(T, H, W, C)"
    if video.ndim != 4:
        raise ImageInputError(
            f"video {index} is {description}: pass {layouts} frames with C in {CHANNELS}, or (T, D) frame embeddings"
        )
    if 0 in video.shape:
        raise ImageInputError(f"video {index} is {description}: it has no frames or empty frames (a dimension of 0)")
    channels_last, channels_first = video.shape[3] in CHANNELS, video.shape[1] in CHANNELS
    if isinstance(video, torch.Tensor):
        if channels_last and channels_first:
            raise ImageInputError(
                f"video {index} is {description}: read as (T, H, W, C) its frames are {video.shape[1]}x"
                f"{video.shape[2]} with {video.shape[3]} channels, read as (T, C, H, W) {video.shape[2]}x"
                f"{video.shape[3]} with {video.shape[1]} channels; pass frames larger than 4 pixels, or a list of "
                "frames"
            )
        array = tensor_to_numpy(video, f"video {index}")
        if channels_first:
            return array.transpose(0, 2, 3, 1)
    else:
        array = video
    if not channels_last:
        hint = ""
        if channels_first:
            hint = "; (T, C, H, W) would fit, but is not NumPy's layout: convert it with array.transpose(0, 2, 3, 1)"
        raise ImageInputError(
            f"video {index} is {description}: read as (T, H, W, C) its frames have {video.shape[3]} channels{hint}. "
            f"Pass {layouts} frames with C in {CHANNELS}, or (T, D) frame embeddings"
        )
    return array


def import_av():
    """PyAV, imported only when a video file is read (the `video` extra)."""
    try:
        import av
    except ImportError as error:
        if (error.name or "av").split(".")[0] != "av":
            raise
        # The text of modeling_pacs.extras.missing_extra_message, which the remote code cannot import.
        raise ImportError("Reading video files needs av: pip install 'pacs-pp[video]'") from None
    return av


class VideoFile:
    """A video file read with PyAV, decoding only the frames asked for.

    Opening demuxes the whole file once without decoding, to learn each frame's presentation timestamp and which
    packets are keyframes; `read` then seeks to the keyframe before each wanted frame (or keeps decoding when the
    next wanted frame is in the same group of pictures); on the way, frames that no other frame references are
    skipped by the decoder. `decoded_frames` counts every frame the decoder produced.

    Example:

    ```python
    >>> from modeling_pacs.models.video import VideoFile
    >>> with VideoFile("clip.mp4") as video:
    ...     frames = list(video.read([0, 50, 99]))
    >>> video.frame_count, video.decoded_frames
    ```
    """

    def __init__(self, path: str | os.PathLike, index: int = 0):
        self.path = Path(path)
        self.index = index
        self.decoded_frames = 0
        self.target = None  # timestamp of the frame being sought
        self.container = None
        if not self.path.is_file():
            raise FileNotFoundError(f"video {index} ('{self.path}') does not exist or is not a file")
        self.av = import_av()
        with self.errors_name_the_file():
            self.container = self.av.open(os.fspath(self.path))
            if not self.container.streams.video:
                self.close()
                raise ValueError(f"video {index} ('{self.path}') has no video stream: pass a file with video frames")
            self.stream = self.container.streams.video[0]
            if self.stream.codec_context is None:
                self.close()
                raise ValueError(
                    f"video {index} ('{self.path}') uses a video codec this FFmpeg build cannot decode: re-encode it "
                    "(e.g. to H.264 mp4) or pass its frames as images"
                )
            self.frame_timestamps, self.keyframe_timestamps = self.scan()
        if not self.frame_timestamps:
            self.close()
            raise ValueError(f"video {index} ('{self.path}') has zero frames: pass a video with at least one frame")

    @property
    def frame_count(self) -> int:
        return len(self.frame_timestamps)

    @contextmanager
    def errors_name_the_file(self):
        """PyAV's errors inside this block become errors naming the file."""
        try:
            yield
        except self.av.FFmpegError as error:
            self.close()
            raise ValueError(
                f"video {self.index} ('{self.path}') could not be decoded (corrupt file, or an unsupported "
                f"container or codec): {error}"
            ) from error

    def scan(self) -> tuple[list[int] | None, list[int]]:
        """Presentation timestamps of all frames (sorted) and of the keyframes, from packets alone.

        Streams without timestamps (rare raw streams) give `None` timestamps and one placeholder per packet: they
        are read in decode order, without seeking.
        """
        timestamps, keyframes = [], []
        for packet in self.container.demux(self.stream):
            if packet.size == 0:
                continue
            timestamps.append(packet.pts)
            if packet.is_keyframe and packet.pts is not None:
                keyframes.append(packet.pts)
        if any(timestamp is None for timestamp in timestamps):
            return [None] * len(timestamps), []
        if timestamps and not keyframes:
            keyframes.append(min(timestamps))
        return sorted(timestamps), sorted(keyframes)

    def read(self, indices: Sequence[int]) -> Iterator[PIL.Image.Image]:
        """The frames at `indices` (non-decreasing, repeats allowed) as RGB PIL images."""
        with self.errors_name_the_file():
            if self.frame_timestamps[0] is None:
                yield from self.read_in_decode_order(indices)
                return
            frames = None
            position = None  # timestamp of the last decoded frame
            last_index, last_frame = None, None
            for frame_index in indices:
                if frame_index != last_index:
                    target = self.target = self.frame_timestamps[frame_index]
                    keyframe_position = max(bisect.bisect_right(self.keyframe_timestamps, target) - 1, 0)
                    keyframe = self.keyframe_timestamps[keyframe_position]
                    if frames is None or position >= target or keyframe > position:
                        self.container.seek(keyframe, stream=self.stream, backward=True, any_frame=False)
                        frames = self.decode_toward_target()
                    frame = self.next_frame_at(frames, target)
                    position = frame.pts
                    last_index, last_frame = frame_index, frame.to_image().convert("RGB")
                yield last_frame

    def decode_toward_target(self) -> Iterator:
        """Decoded frames from the current position; before `self.target`, frames that no other frame references
        (e.g. most B-frames) are skipped by the decoder, since nothing after them needs them."""
        context = self.stream.codec_context
        for packet in self.container.demux(self.stream):
            before_target = packet.pts is not None and packet.pts < self.target
            context.skip_frame = "NONREF" if before_target else "DEFAULT"
            yield from packet.decode()

    def read_in_decode_order(self, indices: Sequence[int]) -> Iterator[PIL.Image.Image]:
        """Decode from the start, keeping the frames at `indices` (streams without timestamps)."""
        wanted = list(indices)
        cursor = 0
        for position, frame in enumerate(self.container.decode(self.stream)):
            self.decoded_frames += 1
            if wanted[cursor] == position:
                image = frame.to_image().convert("RGB")
                while cursor < len(wanted) and wanted[cursor] == position:
                    yield image
                    cursor += 1
                if cursor == len(wanted):
                    return
        raise ValueError(f"video {self.index} ('{self.path}') ended before its frame {wanted[cursor]}")

    def next_frame_at(self, frames, target: int):
        for frame in frames:
            self.decoded_frames += 1
            if frame.pts is not None and frame.pts >= target:
                return frame
        raise ValueError(f"video {self.index} ('{self.path}') ended before its frame at timestamp {target}")

    def close(self):
        if self.container is not None:
            self.container.close()
            self.container = None

    def __enter__(self) -> "VideoFile":
        return self

    def __exit__(self, *exc_info):
        self.close()


__all__ = [
    "VIDEO_EXTENSIONS",
    "VideoFile",
    "VideoInput",
    "check_num_frames",
    "check_video",
    "describe_video",
    "is_frame_embeddings",
    "iter_video_frames",
    "sample_frame_indices",
    "video_key",
]
