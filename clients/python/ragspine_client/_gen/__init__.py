"""Generated ragspine.v1 stubs (copied; see sync_stubs.py)."""
