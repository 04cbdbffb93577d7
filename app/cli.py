"""The ``dpcrisis`` command: serve, worker, migrate."""

import argparse
import logging
import signal
import sys
from types import FrameType


def _configure_logging() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from app.core.migrations import upgrade_head
    from app.main import create_app

    upgrade_head()
    app = create_app(embedded_worker=not args.no_worker)
    uvicorn.run(app, host=args.host, port=args.port, log_level="info")
    return 0


def _worker(_args: argparse.Namespace) -> int:
    from app.core.migrations import upgrade_head
    from worker.runner import Worker

    upgrade_head()
    worker = Worker()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        logging.getLogger("dpcrisis.worker").info("signal %s: finishing current job", signum)
        worker.stop_requested.set()
        from app.jobs.notify import wake_workers

        wake_workers()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    worker.run_forever()
    return 0


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
    sub.add_parser("worker", help="run a worker process").set_defaults(func=_worker)
    sub.add_parser("migrate", help="apply database migrations").set_defaults(func=_migrate)
    return parser


def main(argv: list[str] | None = None) -> int:
    _configure_logging()
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
