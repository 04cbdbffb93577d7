"""The ``dpcrisis`` command: serve, worker, federation-coordinator, federation-key, migrate,
check."""

import argparse
import logging
import math
import signal
import sys
from types import FrameType


def _configure_logging() -> None:
    from app.core.logs import configure_logging
    from app.core.settings import settings

    configure_logging(settings.log_format)  # LOG_FORMAT=auto (default) | json | text


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from app.core.migrations import upgrade_head
    from app.core.settings import settings
    from app.main import create_app

    upgrade_head()
    app = create_app(embedded_worker=not args.no_worker)
    # log_config=None: uvicorn's records (access lines included) go through our handler.
    # X-Forwarded-* only from the proxies the deployment declares (none by default): uvicorn
    # would otherwise trust them from 127.0.0.1, where any local process can spoof them.
    proxies = settings.dpcrisis_forwarded_allow_ips
    uvicorn.run(app, host=args.host, port=args.port, log_level="info", log_config=None,
                proxy_headers=bool(proxies), forwarded_allow_ips=proxies or None,
                timeout_graceful_shutdown=math.ceil(settings.shutdown_grace_seconds))
    return 0


def _worker(args: argparse.Namespace) -> int:
    from app.core.migrations import upgrade_head
    from app.observability.job_metrics import serve_worker_metrics
    from worker.runner import Worker

    upgrade_head()
    if args.metrics_port is not None:  # the job histograms this process feeds
        serve_worker_metrics(args.metrics_port, args.metrics_host)
    worker = Worker(listen=True)  # LISTEN/NOTIFY on PostgreSQL, polling otherwise

    def _stop(signum: int, _frame: FrameType | None) -> None:
        logging.getLogger("dpcrisis.worker").info("signal %s: finishing current job", signum)
        worker.stop_requested.set()
        from app.jobs.notify import wake_workers

        wake_workers()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    worker.run_forever()
    return 0


def _coordinate(args: argparse.Namespace) -> int:
    """Run a federation this service coordinates: Flower's server until its last round."""
    import json

    from app.core.database import get_database
    from app.core.migrations import upgrade_head

    try:
        from worker.federated_coordinator import serve as serve_federation
    except ImportError as missing:  # flwr is the federated extra
        print(f"the coordinator needs Flower ({missing}): pip install -e '.[federated]'",
              file=sys.stderr)
        return 2

    upgrade_head()
    report = serve_federation(get_database(), args.federation)
    print(json.dumps({"rounds": len(report["rounds"]),
                      "evaluated_sites": report["evaluated_sites"],
                      "federation_epsilon": report["federation_epsilon"]}))
    return 0 if report["evaluation"] is not None else 1


def _federation_key(args: argparse.Namespace) -> int:
    """Write a clinic's new signing key (PEM, owner-only) and print the public key its
    federation declares (``sites[].public_key``); an existing file is never overwritten."""
    import os

    from app.federation.signing import new_key

    private, public = new_key()
    try:
        handle = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        print(f"{args.out} exists: a site's key is made once (remove it to replace it)",
              file=sys.stderr)
        return 2
    with os.fdopen(handle, "wb") as out:
        out.write(private)
    print(public)
    return 0


def _check(_args: argparse.Namespace) -> int:
    """Container health check: exit 0 when the database answers at the newest migration."""
    from app.core.migrations import at_head

    ok = at_head()
    print("ready" if ok else "not ready: database unreachable or not migrated")
    return 0 if ok else 1


def _migrate(_args: argparse.Namespace) -> int:
    from app.core.migrations import upgrade_head

    upgrade_head()
    print("database is at the newest migration")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dpcrisis", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="migrate, then run the API (and an embedded worker)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--no-worker", action="store_true", help="do not embed a worker")
    serve.set_defaults(func=_serve)
    worker = sub.add_parser("worker", help="run a worker process")
    worker.add_argument("--metrics-port", type=int, default=None,
                        help="serve this worker's job histograms (Prometheus, no key) here")
    worker.add_argument("--metrics-host", default="127.0.0.1",
                        help="address of --metrics-port (default: this machine only)")
    worker.set_defaults(func=_worker)
    coordinate = sub.add_parser("federation-coordinator",
                                help="run a federation this service coordinates (Flower)")
    coordinate.add_argument("--federation", type=int, required=True,
                            help="its id here (POST /v1/federations, role coordinator)")
    coordinate.set_defaults(func=_coordinate)
    site_key = sub.add_parser("federation-key",
                              help="make a clinic's federation signing key; print its public key")
    site_key.add_argument("--out", required=True,
                          help="where to write the private key (FEDERATION_SITE_KEY)")
    site_key.set_defaults(func=_federation_key)
    sub.add_parser("migrate", help="apply database migrations").set_defaults(func=_migrate)
    from app.auth.cli import add_parser as add_keys_parser

    add_keys_parser(sub)  # dpcrisis keys create | list | revoke
    sub.add_parser(
        "check", help="exit 0 if the database answers at the newest migration (health check)"
    ).set_defaults(func=_check)
    return parser


def main(argv: list[str] | None = None) -> int:
    _configure_logging()
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
