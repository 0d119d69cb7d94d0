"""Ending a `torch.distributed` run cleanly (under `accelerate launch`)."""

from __future__ import annotations

import gc


def end_process_group() -> None:
    """Destroys the `torch.distributed` group a finished run worked in, after freeing what still uses it.

    A gloo group left for interpreter shutdown can abort a process that has done all its work (SIGABRT, "terminate
    called without an active exception"), and a DDP `Reducer` (the Trainer's wrapped model) freed *after* its group
    was destroyed deadlocks in the group's destructor. So: collect the garbage first (the Trainer, its DDP wrapper and
    their reference cycles go while the group is alive), then destroy the group. Call it only after success, once the
    run's objects are out of scope: destroying a group while another rank is still in a collective would hang.
    """
    import torch.distributed

    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return
    gc.collect()
    torch.distributed.destroy_process_group()
