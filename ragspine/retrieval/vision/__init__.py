"""Visual retrieval at the spec's path (``vision.colpali``); the service's page index lives in
``ragspine.retrieval.visual``."""
