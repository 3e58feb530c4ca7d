"""gRPC services of RAGSpine: the front tier, the model worker and the plumbing they share.

Shipped inside the distribution as ``ragspine_services``; importing it needs the ``service`` extra.
"""
