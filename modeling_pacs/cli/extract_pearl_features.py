"""Run Pearl's frozen encoders once over a dataset and cache the features (sharded, resumable).

    python scripts/extract_pearl_features.py --data data/ --images data/images --model PEARL_DIR --cache f/
    python scripts/extract_pearl_features.py --data data/ --layout nebula --images imgs/ --model PEARL_DIR --cache f/

PEARL_DIR is a Pearl model directory (its config names the encoders) or "tiny:DIR" to build a random tiny one there.
Interrupted runs resume: whole shards already written are kept.
"""

import argparse
import json
import sys
from pathlib import Path

import torch
from safetensors import safe_open

from modeling_pacs.encoders import load_encoder
from modeling_pacs.logs import setup_command_logging
from modeling_pacs.models.modeling_pearl import PearlModel
from modeling_pacs.pearl.features import FeatureCache, extract_features
from modeling_pacs.pearl.hadamard_init import HADAMARD_INIT_PATH, fraction_outside
from modeling_pacs.supervised.data import LAYOUTS, read_rows, split_paths

from .arguments import add_example, add_verbose_argument
from .errors import reports_errors


@reports_errors("extract_pearl_features")
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="folder with <layout>_{train,val,test}.csv")
    parser.add_argument("--layout", choices=sorted(LAYOUTS), default="spica")
    parser.add_argument("--images", type=Path, required=True, help="folder the image column's file names live in")
    parser.add_argument("--model", required=True, help="Pearl model directory whose encoder_specs name the encoders")
    parser.add_argument("--cache", type=Path, required=True, help="feature cache folder (created; resumed if present)")
    parser.add_argument("--shard-size", type=int, default=1024, help="keys per shard (> 0)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--no-progress", action="store_true")
    add_example(
        parser,
        "python scripts/extract_pearl_features.py --data data/ --images data/images --model PEARL_DIR --cache f/",
    )
    add_verbose_argument(parser)
    args = parser.parse_args(argv)
    setup_command_logging(args.verbose)
    if args.shard_size <= 0:
        parser.error("--shard-size must be > 0")
    paths = split_paths(args.data, args.layout)
    if not paths:
        parser.error(f"no {args.layout}_{{train,val,test}}.csv in {args.data}")
    rows = [row for path in paths.values() for row in read_rows(path, args.layout)]
    config = PearlModel.config_class.from_pretrained(args.model)
    encoders = {
        name: load_encoder(name, config.encoder_specs[name], args.model, args.device) for name in config.encoder_names
    }
    texts = [row["candidate"] for row in rows] + [ref for row in rows for ref in row["references"][: config.max_refs]]
    counts = extract_features(
        encoders,
        [row["image"] for row in rows],
        texts,
        args.cache,
        resolve_image=lambda key: str(args.images / key),
        shard_size=args.shard_size,
        progress=not args.no_progress,
    )
    print(f"{len(rows)} rows: {counts['computed']} shards computed, {counts['skipped']} already cached in {args.cache}")
    # docs/spec/pearl.md#a2: the HadamardNets were pretrained on U(low, high); report how much real data falls outside.
    with safe_open(HADAMARD_INIT_PATH, "pt") as handle:
        recipe = json.loads(handle.metadata()["recipe"])
    cache = FeatureCache(args.cache)
    for name in config.encoder_names:
        tensors = [cache.text_features[name].flatten()]
        if name in cache.image_features:
            tensors.append(cache.image_features[name].flatten())
        share = fraction_outside(torch.cat(tensors), recipe["low"], recipe["high"])
        flag = "  (above 0.1 %: consider pretrain_pearl_hadamard.py with a wider range)" if share > 1e-3 else ""
        print(f"{name}: {100 * share:.3f} % of feature values outside [{recipe['low']}, {recipe['high']}]{flag}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
