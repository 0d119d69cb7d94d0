"""`elical-hf export`: write a confidence model as a one-label sequence classifier that serving engines load (vLLM's
pooling runner: `vllm serve OUT --runner pooling`, `POST /classify`), LoRA merged and the head as `score`."""

from __future__ import annotations

from dataclasses import dataclass, field

from elical_hf.steps.arguments import OverwriteArguments

from .parser import ElicalArgumentParser


@dataclass(kw_only=True)
class ExportArguments(OverwriteArguments):
    """Options of `elical-hf export` (also settable from `--config file.yaml`)."""

    model: str = field(metadata={"positional": True, "help": "A saved confidence model (folder or Hub id)."})
    output_dir: str = field(metadata={"help": "The export folder (new or empty), written whole or not at all."})
    form: str = field(default="merged", metadata={
        "help": "merged: one classifier, LoRA merged (vllm serve OUT --runner pooling); lora: the LoRA and head as a "
                "classification adapter (--enable-lora --lora-modules NAME=OUT), served on base: the base model as a "
                "classifier with a zero head, written once for all the adapters of one base.",
        "choices": ["merged", "lora", "base"]})


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(ExportArguments, prog="elical-hf export", description=__doc__)


def main(argv: list[str] | None = None) -> int:
    from elical_hf.publishing.export import export_confidence_model

    (options,) = make_parser().parse_with_config(argv)
    folder = export_confidence_model(options.model, options.output_dir, form=options.form,
                                     overwrite=options.overwrite_output_dir)
    print(f"Exported {options.model} ({options.form}) to {folder}: how to serve it and how to render its prompts "
          f"(elical_hf.publishing.export.export_prompt_ids) are in {folder}/README.md.")
    return 0
