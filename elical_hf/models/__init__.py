"""The confidence model: `ForConfidenceMixin` and its per-architecture classes (`modeling.py`),
`AutoModelForConfidence` / `PeftModelForConfidence` (`auto.py`), the feature layer, the shared-prefix KV cache and
attention, the LM head the gate decodes with, provenance, saved folders and their decision rule, the model card,
Hub ids and the embedded default model (docs/architecture.md).
"""
