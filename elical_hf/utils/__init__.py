"""Plumbing: atomic file and folder writes, the files users hand us, the one way a model, tokenizer or config is
loaded (`load_pretrained`, `load_model`), the lazy package map, ending a process group, the optional extras and
freed heap given back to the OS. Nothing here imports another floor of the package (docs/architecture.md).
"""
