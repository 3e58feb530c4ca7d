"""Text primitives every channel and stage shares: the CJK-aware tokenizer and query language detection."""
