"""Evaluation: per-dataset tables with paired differences and reports (`tables.py`), plots, the diagnosis (will
elicitation help?), drift of served confidences, which questions to label and the pre-generation probes
(docs/architecture.md).
"""
