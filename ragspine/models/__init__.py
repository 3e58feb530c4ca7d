"""In-process model runtimes behind the retrieval seams (torch, onnxruntime; CPU default, CUDA when present).

Nothing here is imported by the default retrieval path: each backend loads its runtime lazily, and a missing
runtime raises ``ImportError`` naming the ``ragspine[models]`` extra.
"""
