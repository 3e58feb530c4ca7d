"""What the retrieval stack, the structured channel and the security gate share: the domain profile
(controlled vocabularies), the glossary built from it, and the sensitivity policy."""
