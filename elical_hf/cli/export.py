"""`elical-hf export`: write a confidence model as a one-label sequence classifier that serving engines load (vLLM's
pooling runner: `vllm serve OUT --runner pooling`, `POST /classify`), LoRA merged and the head as `score`."""

from __future__ import annotations

from dataclasses import dataclass, field

from .parser import ElicalArgumentParser


@dataclass(kw_only=True)
class ExportArguments:
    """Options of `elical-hf export` (also settable from `--config file.yaml`)."""

    model: str = field(metadata={"positional": True, "help": "A saved confidence model (folder or Hub id)."})
    output_dir: str = field(metadata={"help": "The export folder (new or empty), written whole or not at all."})
    overwrite_output_dir: bool = field(default=False, metadata={"help": "Replace a non-empty --output_dir."})


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(ExportArguments, prog="elical-hf export", description=__doc__)


def main(argv: list[str] | None = None) -> int:
    from elical_hf.export import export_confidence_model

    (options,) = make_parser().parse_with_config(argv)
    folder = export_confidence_model(options.model, options.output_dir, overwrite=options.overwrite_output_dir)
    print(f"Exported {options.model} to {folder}: serve it with `vllm serve {folder} --runner pooling --dtype float32` "
          f"and score prompts rendered by elical_hf.export.export_prompt_ids (see {folder}/README.md).")
    return 0
