"""Pretrain Pearl's HadamardNet to multiply (docs/spec/pearl.md#a2) and write the shipped initialisation.

python scripts/pretrain_pearl_hadamard.py        # rebuilds modeling_pacs/assets/pearl_hadamard_init.safetensors
python scripts/pretrain_pearl_hadamard.py --steps 50 --output /tmp/h.safetensors
"""

import argparse
import sys
from pathlib import Path

import torch

from modeling_pacs.cli.arguments import add_example, add_verbose_argument
from modeling_pacs.cli.errors import reports_errors
from modeling_pacs.logs import setup_command_logging
from modeling_pacs.pearl.hadamard_init import (
    ACCEPTED_MSE,
    HADAMARD_INIT_PATH,
    HadamardRecipe,
    pretrain_hadamard,
    save_hadamard_init,
)


@reports_errors("pretrain_hadamard")
def main(argv: list[str] | None = None) -> int:
    defaults = HadamardRecipe()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path, default=HADAMARD_INIT_PATH)
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--rows", type=int, default=defaults.rows, help="vectors per batch")
    parser.add_argument("--columns", type=int, default=defaults.columns, help="coordinates per vector")
    parser.add_argument("--low", type=float, default=defaults.low)
    parser.add_argument("--high", type=float, default=defaults.high)
    parser.add_argument("--learning-rate", type=float, default=defaults.learning_rate)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--channels", type=int, nargs="+", default=list(defaults.channels))
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (> 0)")
    add_example(parser, "python scripts/pretrain_pearl_hadamard.py --steps 50 --output /tmp/h.safetensors")
    add_verbose_argument(parser)
    args = parser.parse_args(argv)
    setup_command_logging(args.verbose)
    if args.threads <= 0:
        parser.error("--threads must be > 0")
    torch.set_num_threads(args.threads)
    recipe = HadamardRecipe(
        channels=tuple(args.channels),
        low=args.low,
        high=args.high,
        rows=args.rows,
        columns=args.columns,
        steps=args.steps,
        learning_rate=args.learning_rate,
        seed=args.seed,
    )
    try:
        net, report = pretrain_hadamard(recipe)
    except ValueError as error:
        parser.error(str(error))
    print(f"held-out MSE {report['held_out_mse']:.2e} (accepted if <= {ACCEPTED_MSE:.0e}), {report['seconds']} s")
    if report["held_out_mse"] > ACCEPTED_MSE:
        print("not accepted: nothing written (raise --steps)", file=sys.stderr)
        return 1
    save_hadamard_init(net, recipe, report, args.output)
    print(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
