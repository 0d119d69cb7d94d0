"""Adapters to other libraries' interfaces, each behind an optional extra (imported only when used).

- [`~elical_hf.integrations.langchain`]: the gate as a LangChain `Runnable` (`pip install "elical-hf[langchain]"`).
"""
