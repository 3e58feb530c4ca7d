"""``ragspine serve front|worker|all``: run the gRPC services (and the front's HTTP face with --http-port).

``all`` is laptop mode: one process, CPU, SQLite under ``--data-dir``, models in-process (no worker).
Settings come from ``RAGSPINE_*`` variables; flags given here win.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("serve", help="run the front tier, the model worker, or both in one process")
    parser.add_argument("role", choices=("front", "worker", "all"), help="all = laptop mode (one process)")
    parser.add_argument("--host", default=None, help="address to bind (RAGSPINE_HOST, default 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=None, help="port (front 50051, worker 50052; 0 = any free)"
    )
    parser.add_argument("--data-dir", default=None, help="folder holding the libraries (RAGSPINE_DATA_DIR)")
    parser.add_argument("--worker-address", default=None, help="host:port of the model worker (front only)")
    parser.add_argument("--metrics-port", type=int, default=None, help="Prometheus port (0 = off)")
    parser.add_argument(
        "--http-port",
        type=int,
        default=None,
        help="HTTP port: Dify /retrieval, REST /v1/..., /openapi.json (RAGSPINE_HTTP_PORT; 0 = off)",
    )
    parser.add_argument(
        "--metrics-host",
        default=None,
        help="address the Prometheus endpoint binds (RAGSPINE_METRICS_HOST; default: the --host address)",
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from ragspine.settings import Settings
    from ragspine_services.common.logs import configure_json_logging

    configure_json_logging(args.log_level if args.log_level != "WARNING" else "INFO")
    port_field = "worker_port" if args.role == "worker" else "front_port"
    settings = Settings.from_env(
        host=args.host,
        data_dir=args.data_dir,
        worker_address=args.worker_address,
        metrics_port=args.metrics_port,
        http_port=args.http_port,
        metrics_host=args.metrics_host,
        **{port_field: args.port},
    )
    if args.role == "worker":
        from ragspine_services.worker.server import serve_worker

        serve_worker(settings, grace_s=settings.shutdown_grace_s)
    else:
        from ragspine_services.front.server import serve_front

        serve_front(settings, in_process=True if args.role == "all" else None)
    return 0
