"""What the experiments behind `docs/results.md` share: the repository's folders, and the import path.

The scripts of `experiments/` are research (each writes numbers that `docs/` quotes), not usage: `examples/` holds
the usage (Trainer scripts, configs, `reproduce_paper.py`). An experiment imports this module first (`import
experiments_common`); it puts `experiments/` and `examples/` on `sys.path`, so a script can use its siblings and the
replication's `reproduce_paper.py`, run as `python experiments/<name>.py` or loaded by path in the tests.
"""

from __future__ import annotations

import os
import sys


HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
EXAMPLES = os.path.join(ROOT, "examples")
RESULTS = os.path.join(ROOT, "docs", "results")
RECORDS = os.path.join(RESULTS, "honestybench-smollm2-135m")
"""The committed replication records (a HonestyBench folder): what most experiments start from."""

for _folder in (EXAMPLES, HERE):
    if _folder not in sys.path:
        sys.path.insert(0, _folder)
