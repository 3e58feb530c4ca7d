"""HTTP face of the front tier: the Dify External Knowledge API, REST/JSON for every ``ragspine.v1``
RetrievalService RPC and an OpenAPI 3.1 document, served from the same process as gRPC.

Every route calls the same ``RetrievalServicer`` methods the gRPC server does (same validation, same
RESTRICTED exits, same error table), authenticated by the same ``Authenticator``.
"""

from ragspine_services.front.http.app import build_app
from ragspine_services.front.http.server import HttpServer, start_http

__all__ = ["HttpServer", "build_app", "start_http"]
