"""Adapters of the GraphStore Protocol to third-party graph libraries."""
