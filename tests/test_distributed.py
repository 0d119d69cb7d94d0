"""Multi-process training with accelerate: 2 CPU processes (DDP over gloo) on a tiny model.

The commands are the GPU recipe's (`examples/configs/qwen2.5-7b-instruct.yaml`: `accelerate launch --multi_gpu
--num_processes N -m elical_hf.cli train --config ...`) with overrides for a tiny model on the CPU. Every launch runs
in its own process group under a timeout, and collectives time out too (`--ddp_timeout`), so a stuck run fails the
test instead of hanging it. One thread per process: the two processes fit a 2-core machine.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from elical_hf.cli import main as cli_main
from tests.test_trainer import make_rows


REPO = Path(__file__).resolve().parents[1]
GPU_CONFIG = REPO / "examples" / "configs" / "qwen2.5-7b-instruct.yaml"
LAUNCH_TIMEOUT = 420  # seconds for one 2-process launch (about 30 s on an idle 2-core machine)
ACCELERATE = shutil.which("accelerate", path=os.path.dirname(sys.executable))

pytestmark = pytest.mark.skipif(ACCELERATE is None, reason="the accelerate launcher is not installed")

# Loaded at start-up by every launched process (it is first on PYTHONPATH): records, per rank, each file opened for
# writing or moved into place under $ELICAL_WATCH_DIR, so the test can tell which process wrote what.
WRITE_PROBE = textwrap.dedent(
    """
    import builtins, os
    _watch, _rank = os.environ.get("ELICAL_WATCH_DIR"), os.environ.get("RANK", "single")
    if _watch:
        _open, _replace = builtins.open, os.replace

        def _note(path):
            path = os.path.abspath(os.fspath(path))
            if path.startswith(_watch):
                with _open(os.path.join(os.environ["ELICAL_PROBE_LOG"], f"rank-{_rank}.log"), "a") as log:
                    log.write(os.path.relpath(path, _watch) + "\\n")

        def open(file, mode="r", *args, **kwargs):
            if isinstance(file, (str, bytes, os.PathLike)) and any(c in mode for c in "wax+"):
                _note(file)
            return _open(file, mode, *args, **kwargs)

        def replace(src, dst, **kwargs):
            _note(dst)
            return _replace(src, dst, **kwargs)

        builtins.open, os.replace = open, replace
    """
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def launcher(tmp_path):
    """`launch(args, watch)`: run `accelerate launch --multi_gpu --num_processes 2 <args>` to completion; returns the
    files each rank wrote under `watch` (`{"0": [...], "1": [...]}`)."""
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "sitecustomize.py").write_text(WRITE_PROBE)

    def launch(args: list[str], watch: Path) -> dict[str, list[str]]:
        logs = tmp_path / f"writes-{watch.name}"
        logs.mkdir()
        env = {**os.environ, "PYTHONPATH": f"{probe}{os.pathsep}{REPO}", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
               "ELICAL_WATCH_DIR": str(watch), "ELICAL_PROBE_LOG": str(logs), "TOKENIZERS_PARALLELISM": "false"}
        command = [ACCELERATE, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                   "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port()), *args]
        process = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, start_new_session=True)
        try:
            output = process.communicate(timeout=LAUNCH_TIMEOUT)[0]
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the launcher and both workers
            output = process.communicate()[0]
            pytest.fail(f"2-process launch did not finish in {LAUNCH_TIMEOUT} s:\n{output[-4000:]}")
        assert process.returncode == 0, output[-6000:]
        return {log.stem.removeprefix("rank-"): log.read_text().split() for log in logs.iterdir()}

    return launch


@pytest.fixture
def rows_file(tmp_path) -> str:
    """22 rows: 20 train + 2 dev in stage 1; 13 labels: 12 train + 1 dev in stage 2. The train sizes are multiples of
    the global batch of 4: an uneven last batch would be padded with repeated rows on the second process
    (accelerate's `even_batches`), a gradient that one process with the whole batch does not compute."""
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in make_rows(22)))
    return str(path)


def adapter(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "adapter_model.safetensors")


def tiny_overrides(tiny_llama: str, rows: str) -> list[str]:
    return ["--use_cpu", "true", "--model_name_or_path", tiny_llama, "--elicitation_data", rows,
            "--calibration_data", rows, "--num_labels", "13", "--bf16", "false", "--dtype", "float32",
            "--gradient_accumulation_steps", "1", "--num_train_epochs", "1", "--learning_rate", "1e-2",
            "--disable_tqdm", "true", "--report_to", "none", "--ddp_timeout", "120"]


def test_gpu_recipe_command_on_two_processes_matches_one(tiny_llama, rows_file, tmp_path, launcher):
    """The recipe's `accelerate launch ... elical-hf train --config qwen2.5-7b-instruct.yaml` on 2 processes x batch
    2 gives the weights of 1 process x batch 4 (same global batch, same data order), and only rank 0 writes."""
    two, one = tmp_path / "two", tmp_path / "one"
    overrides = tiny_overrides(tiny_llama, rows_file)
    writes = launcher(["-m", "elical_hf.cli", "train", "--config", str(GPU_CONFIG), *overrides,
                       "--per_device_train_batch_size", "2", "--output_dir", str(two)], two)
    assert cli_main(["train", "--config", str(GPU_CONFIG), *overrides, "--per_device_train_batch_size", "4",
                     "--output_dir", str(one)]) == 0

    written = set(writes.get("0", []))
    for stage in ("elicitation", "elical", "cal-only"):
        assert {f"{stage}/confidence_config.json", f"{stage}/README.md"} <= written
        assert any(p.startswith(f"{stage}/checkpoints/checkpoint-") and p.endswith("trainer_state.json")
                   for p in written), stage  # checkpoints were written (and removed after the final save)
        assert not (two / stage / "checkpoints").exists()
        history = [json.loads((root / stage / "confidence_config.json").read_text())["training_history"][-1]
                   for root in (two, one)]
        assert history[0]["effective_batch_size"] == history[1]["effective_batch_size"] == 4
        assert history[0]["global_steps"] == history[1]["global_steps"] > 1
        ours, reference = adapter(two / stage), adapter(one / stage)
        assert ours.keys() == reference.keys()
        for name, value in reference.items():  # all-reduce sums in another order: float32 rounding only
            torch.testing.assert_close(ours[name], value, atol=1e-5, rtol=1e-4, msg=f"{stage}: {name}")
    assert writes.get("1", []) == []  # the other process wrote nothing under the output folder


def test_example_script_resumes_on_two_processes(tiny_llama, rows_file, tmp_path, launcher):
    """examples/train_elical.py on 2 processes: resuming from a mid-run checkpoint ends with the uninterrupted run's
    weights, and checkpoints are complete confidence models written by rank 0 only."""
    script = str(REPO / "examples" / "train_elical.py")
    common = ["--model_name_or_path", tiny_llama, "--train_file", rows_file, "--use_cpu", "true",
              "--per_device_train_batch_size", "2", "--max_steps", "6", "--save_strategy", "steps", "--save_steps", "3",
              "--learning_rate", "1e-2", "--warmup_steps", "0", "--seed", "0", "--report_to", "none",
              "--disable_tqdm", "true", "--ddp_timeout", "120"]
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    writes = launcher([script, *common, "--output_dir", str(full)], full)
    checkpoint = full / "checkpoint-3"
    assert (checkpoint / "confidence_config.json").is_file() and (checkpoint / "README.md").is_file()
    assert "checkpoint-3/confidence_config.json" in writes["0"] and writes.get("1", []) == []
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    assert state["global_step"] == 3

    launcher([script, *common, "--output_dir", str(resumed), "--resume_from_checkpoint", str(checkpoint)], resumed)
    assert json.loads((resumed / "checkpoint-6" / "trainer_state.json").read_text())["global_step"] == 6
    halfway, final, again = adapter(checkpoint), adapter(full), adapter(resumed)
    assert any(not torch.equal(halfway[name], value) for name, value in final.items()), "no training after step 3"
    for name, value in final.items():
        torch.testing.assert_close(again[name], value, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("name, kind", [("accelerate-fsdp", "fsdp"), ("accelerate-deepspeed-zero2", "deepspeed")])
def test_shipped_accelerate_configs_pass_accelerates_own_validation(name, kind):
    """The FSDP and DeepSpeed ZeRO-2 configs (not launched here: no GPU, no DeepSpeed) are what `accelerate launch
    --config_file` reads: every key is one of its options, and the launch arguments come out as documented."""
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    path = str(REPO / "examples" / "configs" / f"{name}.yaml")
    config = load_config_from_file(path)  # a typo in a top-level key fails here
    parser = launch_command_parser()
    options = {action.dest for action in parser._actions}
    section = config.fsdp_config if kind == "fsdp" else config.deepspeed_config
    assert section and set(section) <= options, sorted(set(section) - options)
    args, _, _ = _validate_launch_command(parser.parse_args(["--config_file", path, "-m", "elical_hf.cli", "train"]))
    assert args.num_processes == 4 and args.mixed_precision == "bf16"
    if kind == "fsdp":
        assert args.use_fsdp and args.fsdp_use_orig_params and args.fsdp_state_dict_type == "FULL_STATE_DICT"
    else:
        assert args.use_deepspeed and int(args.zero_stage) == 2


def test_a_finished_command_destroys_its_process_group(tmp_path, monkeypatch):
    """A command that succeeds under a process group leaves none for interpreter exit, where a live gloo group can
    abort a process that finished its work (SIGABRT: the launch fails); a failed command leaves the group alone."""
    import types

    import torch.distributed as dist

    from elical_hf import cli

    def fake(name: str, body) -> None:
        monkeypatch.setitem(sys.modules, f"fake_{name}", types.SimpleNamespace(main=body))
        monkeypatch.setitem(cli.COMMANDS, name, (f"fake_{name}", "a test command"))

    def fails(argv):
        raise ValueError("bad input")

    fake("ok", lambda argv: 0)
    fake("bad", fails)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        assert cli_main(["bad"]) == cli.USER_ERROR_EXIT and dist.is_initialized()
        assert cli_main(["ok"]) == 0 and not dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_ending_the_process_group_frees_what_still_uses_it_first(tmp_path, monkeypatch):
    """A Trainer's DDP wrapper kept alive by a reference cycle is freed *before* the group is destroyed: a DDP
    `Reducer` freed after its gloo group was destroyed deadlocks in the group's destructor (seen under `accelerate
    launch`: rank 0 hung at exit after all its work was done)."""
    import gc
    import weakref

    import torch.distributed as dist

    from elical_hf.utils.distributed import end_process_group

    class Holder:  # stands for the Trainer: its callbacks and accelerator make reference cycles
        pass

    destroy = dist.destroy_process_group
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    gc.disable()  # the cycle must survive until end_process_group runs
    try:
        holder = Holder()
        holder.model, holder.me = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1)), holder
        alive = weakref.ref(holder.model)
        del holder
        seen = []
        monkeypatch.setattr(dist, "destroy_process_group", lambda *a, **k: seen.append(alive()) or destroy(*a, **k))
        end_process_group()
        assert seen == [None] and not dist.is_initialized()
    finally:
        gc.enable()
        if dist.is_initialized():
            destroy()
