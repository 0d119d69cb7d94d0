"""`elical-hf convert-official`: turn a released checkpoint of the paper into a confidence model folder."""

from __future__ import annotations

from dataclasses import dataclass, field

from elical_hf.signals.settings import SamplingSettings
from elical_hf.steps.arguments import only

from .parser import ElicalArgumentParser, HubArguments, warn_token_on_command_line


@dataclass(kw_only=True)
class ConvertArguments(HubArguments, only(SamplingSettings, "prompt_template", "system_prompt")):
    """Options of `elical-hf convert-official` (also from `--config file.yaml`); the prompt options are `sample`'s."""

    src: str = field(metadata={"positional": True, "help": "Release folder or Hub id (lora_epoch_best/ + "
                               "vector_head_epoch_best.pt), e.g. Shiyunee/Honest-Qwen2.5-7B-Instruct."})
    dst: str = field(metadata={"positional": True, "help": "Output folder (new or empty)."})
    base_model: str | None = field(default=None, metadata={"help": "Base model (Hub id or folder); defaults to the release's."})
    subfolder: str | None = field(default=None, metadata={"help": "Folder of the release inside SRC when it holds several."})
    revision: str | None = field(default=None, metadata={"help": "Hub revision of SRC."})
    answer_tail: bool = field(
        default=False,
        metadata={"help": "Append the reference prompt table's tail '\\nAnswer: ' to the question prompt. Off by "
                  "default: the reference's released prompt builder never appends it (the released heads were "
                  "trained on text from an unreleased tool, so this cannot be settled from the code). Saved in "
                  "confidence_config.json (prompt_tail)."},
    )
    no_chat_template: bool = field(default=False, metadata={"help": "Do not wrap the prompt in the chat template."})
    reference_special_tokens: bool = field(
        default=True,
        metadata={"help": "Tokenize as the reference code (default); --no_reference_special_tokens tokenizes as "
                  "elical-hf does. The reference adds the tokenizer's special tokens on top of the chat-templated "
                  "prompt: with a tokenizer that adds a BOS (Llama 3) its inputs start with two BOS tokens; Qwen2.5's "
                  "adds none. By default the converted model reproduces this (its saved chat template starts with the "
                  "extra token), so it gives the release's confidences; with --no_reference_special_tokens it keeps "
                  "one BOS, and its confidences differ from the release's for such tokenizers."},
    )


def make_parser() -> ElicalArgumentParser:
    return ElicalArgumentParser(ConvertArguments, prog="elical-hf convert-official", description=__doc__)


def main(argv: list[str] | None = None) -> int:
    from elical_hf.settings.configuration import ConfidenceConfig
    from elical_hf.publishing.convert import convert_official
    from elical_hf.utils.files import check_output_extension, refuse_output_over_inputs
    from elical_hf.settings.prompts import REFERENCE_PROMPT_TAIL

    (options,) = make_parser().parse_with_config(argv)
    warn_token_on_command_line(argv)
    refuse_output_over_inputs(options.dst, {"SRC": options.src, "--base_model": options.base_model}, "DST")
    check_output_extension(options.dst, None, "DST")
    settings = {"use_chat_template": not options.no_chat_template, "system_prompt": options.system_prompt,
                "prompt_template": options.prompt_template}
    if options.answer_tail:
        settings["prompt_tail"] = REFERENCE_PROMPT_TAIL
    folder = convert_official(
        options.src, options.dst, options.base_model, ConfidenceConfig(**settings),
        subfolder=options.subfolder, revision=options.revision, token=options.token,
        reference_special_tokens=options.reference_special_tokens,
    )
    print(folder)
    return 0
