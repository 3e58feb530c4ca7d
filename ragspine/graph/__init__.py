"""Graph utilities: typed relation graphs over the controlled dimensions (roll-ups, peer comparison,
derivation tracing), the relation-extractor slot and the opt-in narrative graph pipeline."""
