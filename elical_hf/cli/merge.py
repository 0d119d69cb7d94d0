"""`elical-hf merge`: combine the folders of the N workers of one `elical-hf sample --num_workers N` run (or of one
`elical-hf judge --num_workers N` run: the kind is read from the first folder's manifest).

Checks that the workers' manifests agree (same model and backend, same settings but `batch_size`, same question
list, N workers each given once, every one finished) and that their shards hold exactly the questions assigned to
them (no overlaps, no gaps), then writes the folder in the layout one worker would have written: the same ids and
question fields in the original question order, with the same shard layout, so `load_honestybench`, `elical-hf
judge` and a rerun of `elical-hf sample` read it like any other. The answers are those one worker gives, in practice
text for text; the log-probabilities may differ by float rounding (about 1e-5), because each worker batched other
questions together (other padding, shared prefix and order of float reductions).

Judged folders are checked the same way (same judge settings but `batch_size`, same records, N workers each given
once, every one finished, no overlaps or gaps) and merged into the folder one `elical-hf judge` worker writes, the
judges' counts added up.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .parser import ElicalArgumentParser


@dataclass
class MergeArguments:
    """Options of `elical-hf merge` (also settable from `--config file.yaml`)."""

    inputs: list[str] = field(metadata={"help": "The --output_dir (sample) or --output folder (judge) of every worker "
                                        "(any order)."})
    output_dir: str = field(metadata={"help": "New folder for the merged manifest.json and shards/ (must be empty)."})


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(MergeArguments, prog="elical-hf merge", description=__doc__)


def main(argv: list[str] | None = None) -> int:
    from elical_hf.utils.files import check_output_extension, refuse_output_over_inputs
    from elical_hf.signals.judge_runner import merge_judged
    from elical_hf.signals.records import JUDGED_MANIFEST_FORMAT
    from elical_hf.signals.runner import merge_samples
    from elical_hf.signals.shards import manifest_format

    (options,) = make_parser().parse_with_config(argv)
    refuse_output_over_inputs(options.output_dir, {"--inputs": options.inputs}, "--output_dir")
    check_output_extension(options.output_dir, None, "--output_dir")
    judged = bool(options.inputs) and manifest_format(options.inputs[0]) == JUDGED_MANIFEST_FORMAT
    records = (merge_judged if judged else merge_samples)(options.inputs, options.output_dir)
    out = options.output_dir
    print(f"Merged {len(records)} records from {len(options.inputs)} workers into {out}/shards/ "
          f"(manifest: {os.path.join(out, 'manifest.json')}).")
    return 0
