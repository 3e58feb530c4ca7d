"""The agent layer: tools an LLM agent (or any caller) uses around retrieval, such as ``query_metric``."""
