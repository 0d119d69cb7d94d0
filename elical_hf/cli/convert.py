"""`elical-hf convert-official`: turn a released checkpoint of the paper into a confidence model folder."""

from __future__ import annotations

import argparse
import sys


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="elical-hf convert-official", description=__doc__)
    parser.add_argument("src", help="Release folder or Hub id (lora_epoch_best/ + vector_head_epoch_best.pt), e.g. "
                        "Shiyunee/Honest-Qwen2.5-7B-Instruct.")
    parser.add_argument("dst", help="Output folder (new or empty).")
    parser.add_argument("--base_model", default=None, help="Base model (Hub id or folder); defaults to the release's.")
    parser.add_argument("--subfolder", default=None, help="Folder of the release inside SRC when it holds several.")
    parser.add_argument("--revision", default=None, help="Hub revision of SRC.")
    parser.add_argument("--token", default=None, help="Hub token.")
    parser.add_argument("--prompt_template", default=None,
                        help="Prompt with a {question} field (default: the paper's QA prompt).")
    parser.add_argument("--no_chat_template", action="store_true", help="Do not wrap the prompt in the chat template.")
    parser.add_argument("--system_prompt", default=None, help="System message (default: the chat template's own).")
    parser.add_argument(
        "--no_reference_special_tokens", dest="reference_special_tokens", action="store_false",
        help="Tokenize as elical-hf does, not as the reference code. The reference adds the tokenizer's special tokens "
        "on top of the chat-templated prompt: with a tokenizer that adds a BOS (Llama 3) its inputs start with two "
        "BOS tokens; Qwen2.5's adds none. By default the converted model reproduces this (its saved chat template "
        "starts with the extra token), so it gives the release's confidences; with this flag it keeps one BOS, and "
        "its confidences differ from the release's for such tokenizers.",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    from elical_hf.configuration import ConfidenceConfig
    from elical_hf.convert import convert_official

    options = make_parser().parse_args(argv)
    settings = {"use_chat_template": not options.no_chat_template, "system_prompt": options.system_prompt}
    if options.prompt_template is not None:
        settings["prompt_template"] = options.prompt_template
    try:
        folder = convert_official(
            options.src, options.dst, options.base_model, ConfidenceConfig(**settings),
            subfolder=options.subfolder, revision=options.revision, token=options.token,
            reference_special_tokens=options.reference_special_tokens,
        )
    except (ValueError, OSError) as error:
        print(f"elical-hf convert-official: error: {error}", file=sys.stderr)
        return 1
    print(folder)
    return 0
