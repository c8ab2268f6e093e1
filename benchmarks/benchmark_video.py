"""Video metric throughput: seeking to sampled frames vs decoding everything, and end-to-end `score_videos`.

1. Frame sampling on a generated 60 s, 25 fps H.264 video (1,500 frames, B-frames), encoded twice: with a keyframe
   every 2 s (`--gop 50`, as streaming encoders do) and every 10 s (x264's default maximum, 250). "Seek" reads 10
   frames with `modeling_pacs.models.video.VideoFile` (one demux pass over the packets, then a seek to the keyframe
   before each wanted frame); "decode all" decodes every frame and converts it to RGB, as EMScore's `encode_video`
   does with OpenCV, then keeps the same 10. Both return identical frames.
   Between a keyframe and a wanted frame, only frames that others reference (I/P, reference B) must be decoded, so
   the gain of seeking depends on the keyframe spacing.
2. End to end: `PACSModel.score_videos(..., num_frames=10)` on generated clips (one caption and two references
   each), with the tiny model and with ViT-B/32-sized random weights (CLIP-S geometry: a merged PAC-S++ has the same
   arithmetic). Videos/s includes decoding, preprocessing, both encoders and the metric.

    python benchmarks/benchmark_video.py --videos 8 --clip-seconds 10
"""

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from benchmarking_utils import positive_int, vit_b32_clip_config

from modeling_pacs.cli.arguments import add_example
from modeling_pacs.extras import MissingExtraError, require
from modeling_pacs.jobs import write_text_atomically
from modeling_pacs.models.video import VideoFile, sample_frame_indices
from modeling_pacs.testing.pacs import make_tiny_model

try:
    av = require("av", "video", "The video benchmark")
except MissingExtraError as error:
    raise SystemExit(f"error: {error}") from None

CAPTIONS = ["a man rides a bike down a hill", "two dogs play in the snow", "a chef cooks pasta in a kitchen"]


def write_test_video(
    path: Path, seconds: int, fps: int = 25, size: tuple[int, int] = (320, 240), seed: int = 0, gop: int = 50
):
    """A moving pattern with some noise, H.264 (x264 defaults but a keyframe at most every `gop` frames)."""
    rng = np.random.default_rng(seed)
    width, height = size
    x = np.arange(width)[None, :, None]
    y = np.arange(height)[:, None, None]
    base = rng.integers(0, 64, (height, width, 3), dtype=np.uint8)
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"g": str(gop)}
        for index in range(seconds * fps):
            pattern = ((x + 3 * index) % 256 + (y * 2 + index) % 128 + np.array([0, 60, 120])) % 256
            frame = (pattern * 0.75 + base).astype(np.uint8)
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        container.mux(stream.encode())
    return path


def best_of(repeats: int, function):
    """The fastest of `repeats` runs (seconds) and the last result."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return min(times), result


def decode_all_then_pick(path: Path, indices: list[int]) -> tuple[list[np.ndarray], int]:
    wanted = set(indices)
    kept = {}
    count = 0
    with av.open(str(path)) as container:
        for position, frame in enumerate(container.decode(video=0)):
            count += 1
            image = frame.to_ndarray(format="rgb24")
            if position in wanted:
                kept[position] = image
    return [kept[index] for index in indices], count


def seek_and_pick(path: Path, num_frames: int) -> tuple[list[np.ndarray], int, int]:
    with VideoFile(path) as video:
        indices = sample_frame_indices(video.frame_count, num_frames)
        frames = [np.asarray(image) for image in video.read(indices)]
    return frames, video.decoded_frames, video.frame_count


def benchmark_sampling(folder: Path, num_frames: int, repeats: int, gop: int) -> dict:
    path = write_test_video(folder / f"long_gop{gop}.mp4", seconds=60, gop=gop)
    seek_time, (seek_frames, decoded, frame_count) = best_of(repeats, lambda: seek_and_pick(path, num_frames))
    indices = sample_frame_indices(frame_count, num_frames)
    all_time, (all_frames, all_count) = best_of(repeats, lambda: decode_all_then_pick(path, indices))
    identical = all(np.array_equal(a, b) for a, b in zip(seek_frames, all_frames, strict=True))
    return {
        "gop": gop,
        "video_frames": frame_count,
        "sampled_frames": num_frames,
        "seek_seconds": seek_time,
        "seek_decoded_frames": decoded,
        "decode_all_seconds": all_time,
        "decode_all_decoded_frames": all_count,
        "speedup": all_time / seek_time,
        "seek_sampled_frames_per_second": num_frames / seek_time,
        "decode_all_frames_per_second": all_count / all_time,
        "identical_frames": identical,
    }


def benchmark_scoring(model, paths: list[Path], num_frames: int, repeats: int) -> dict:
    captions = [CAPTIONS[index % len(CAPTIONS)] for index in range(len(paths))]
    references = [[CAPTIONS[(index + 1) % 3], CAPTIONS[(index + 2) % 3]] for index in range(len(paths))]

    def run():
        return model.score_videos(paths, captions, references=references, num_frames=num_frames, progress=False)

    seconds, output = best_of(repeats, run)
    return {
        "videos": len(paths),
        "seconds": seconds,
        "videos_per_second": len(paths) / seconds,
        "frames_per_second": len(paths) * num_frames / seconds,
        "mean_score": output.mean_score,
    }


def print_sampling(sampling: dict, num_frames: int):
    print(
        f"60 s 25 fps H.264 ({sampling['video_frames']} frames, keyframe every {sampling['gop']} frames at most), "
        f"{num_frames} sampled frames:\n"
        f"  seek:       {sampling['seek_seconds']:.3f} s ({sampling['seek_decoded_frames']} frames decoded, "
        f"{sampling['seek_sampled_frames_per_second']:.1f} sampled frames/s)\n"
        f"  decode all: {sampling['decode_all_seconds']:.3f} s ({sampling['decode_all_decoded_frames']} frames "
        f"decoded, {sampling['decode_all_frames_per_second']:.0f} frames/s)\n"
        f"  decode all / seek time: {sampling['speedup']:.2f}; identical frames: {sampling['identical_frames']}"
    )


def main(argv: list[str] | None = None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--videos", type=positive_int, default=8, help="clips scored end to end")
    parser.add_argument("--clip-seconds", type=positive_int, default=10, help="length of each scored clip")
    parser.add_argument("--num-frames", type=positive_int, default=10, help="frames sampled per video")
    parser.add_argument("--repeats", type=positive_int, default=2, help="timed runs of each measurement (best kept)")
    parser.add_argument(
        "--gop", type=positive_int, nargs="+", default=[50, 250], help="keyframe intervals of the 60 s video"
    )
    parser.add_argument("--threads", type=positive_int, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--skip-vit-b32", action="store_true", help="only the tiny model end to end")
    parser.add_argument("--output", type=Path, help="also write the figures as JSON")
    add_example(parser, "python benchmarks/benchmark_video.py --videos 8 --clip-seconds 10")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    results = {"torch_threads": torch.get_num_threads()}
    with tempfile.TemporaryDirectory() as directory:
        folder = Path(directory)
        results["sampling"] = []
        for gop in args.gop:
            sampling = benchmark_sampling(folder, args.num_frames, args.repeats, gop)
            results["sampling"].append(sampling)
            print_sampling(sampling, args.num_frames)
        paths = [
            write_test_video(folder / f"clip_{index}.mp4", args.clip_seconds, seed=index + 1)
            for index in range(args.videos)
        ]
        models = {"tiny": make_tiny_model(variant="clip_s")}
        if not args.skip_vit_b32:
            models["vit_b32_random"] = make_tiny_model(variant="clip_s", clip_config=vit_b32_clip_config())
        results["scoring"] = {}
        for name, model in models.items():
            model.eval()
            scoring = benchmark_scoring(model, paths, args.num_frames, args.repeats)
            results["scoring"][name] = scoring
            print(
                f"score_videos, {name}: {scoring['videos']} clips of {args.clip_seconds} s, "
                f"num_frames={args.num_frames}, 1 caption + 2 references each: {scoring['seconds']:.2f} s, "
                f"{scoring['videos_per_second']:.2f} videos/s ({scoring['frames_per_second']:.1f} frames/s)"
            )
    if args.output:
        write_text_atomically(args.output, [json.dumps(results, indent=2) + "\n"])
        print(f"figures written to {args.output}")
    return results


if __name__ == "__main__":
    main()
