"""The front tier: stores, indexes, filters, routing, both RESTRICTED exits and provenance."""
