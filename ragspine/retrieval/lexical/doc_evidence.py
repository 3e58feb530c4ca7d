"""Moved (see the import below); this path stays importable and is the same module object."""

import sys

from ragspine.retrieval.channels import doc_evidence as _moved
from ragspine.retrieval.channels.doc_evidence import *  # noqa: F403

sys.modules[__name__] = _moved
