"""The one compiled part of the package: the BM25 query kernel (everything else is in pyproject.toml).

Optional: without a C compiler the install goes on without it, and InvertedIndex answers through its
NumPy path (the same results, bit for bit; slower per query).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "ragspine.retrieval.channels._bm25_kernel",
            sources=["ragspine/retrieval/channels/_bm25_kernel.c"],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ]
)
