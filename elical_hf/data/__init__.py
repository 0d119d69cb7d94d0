"""Data: the questions (the bundled real QA subsets and the rule that splits them, `questions.py`), a question into
token ids (`encoding.py`) and the training tables with their collator (`training_table.py`) (docs/architecture.md).
"""
