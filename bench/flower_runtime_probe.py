"""What a round costs on Flower's deployment runtime: a SuperLink, N SuperNodes, one run.

A probe for the port of the federation to Flower's public API (``ServerApp``, ``ClientApp``,
``SecAggPlusWorkflow``, ``secaggplus_mod``): it starts ``flower-superlink`` and
``flower-supernode`` processes on loopback (``--insecure``), submits a tiny Flower app with
``flwr run`` (FedAvg over a 3-value model, every round through SecAgg+ unless ``--plain``),
waits for the run to finish, and prints the run's time, its time per round, and for each node
the time between the starts of its ClientApp processes (Flower runs each message to a node in
a new ``flwr-clientapp`` process) and the ClientApp's own work per message. ``--heavy`` makes
each ClientApp import torch and the site's modules first, as the clinic's would.

Run: ``python -m bench.flower_runtime_probe --sites 2 --rounds 1`` in an environment with
``flwr==1.42.0`` (the project pins 1.32.1, see docs/decisions/0019): the probe needs the
``flower-superlink``, ``flower-supernode`` and ``flwr`` commands of the interpreter's
environment. Everything it starts is stopped when it ends or fails.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.processes import free_port

APP_TOML = """[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "probeapp"
version = "1.0.0"
description = "Flower runtime probe"
license = "Apache-2.0"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "dpcrisis"

[tool.flwr.app.components]
serverapp = "probeapp.server:app"
clientapp = "probeapp.client:app"

[tool.flwr.app.config]
rounds = {rounds}
sites = {sites}
secure = {secure}
mended = {mended}
"""

SERVER = """import json
import os
import time
from flwr.app import Context
from flwr.server import LegacyContext, ServerConfig
from flwr.server.strategy import FedAvg
from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow
from flwr.serverapp import Grid, ServerApp

app = ServerApp()


class Counted(FedAvg):
    rounds: list = []

    def aggregate_fit(self, server_round, results, failures):
        self.rounds.append([server_round, len(results), len(failures), time.time()])
        return super().aggregate_fit(server_round, results, failures)


@app.main()
def main(grid: Grid, context: Context) -> None:
    sites, rounds = int(context.run_config["sites"]), int(context.run_config["rounds"])
    while len(list(grid.get_node_ids())) < sites:
        time.sleep(0.2)
    quorum = max(2, sites // 2 + 1)  # the rounds go on without a killed node
    strategy = Counted(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=quorum,
                      min_available_clients=quorum)
    legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=rounds),
                           strategy=strategy)
    workflow = SecAggPlusWorkflow
    if context.run_config["mended"]:  # the installed dpcrisis: its documented mend
        from worker.secure_aggregation import MendedSecAggPlus as workflow
    fit = (workflow(num_shares=1.0, reconstruction_threshold=quorum,
                              clipping_range=16.0, max_weight=1e6, timeout=120)
           if context.run_config["secure"] else None)
    began = time.time()
    DefaultWorkflow(fit_workflow=fit)(grid, legacy)
    with open(os.path.join(os.environ["PROBE_OUT"], "server.json"), "w") as out:
        json.dump({"began": began, "ended": time.time(), "rounds": strategy.rounds}, out)
"""

CLIENT = """import atexit
import os
import time

BEGAN = time.time()
if os.environ.get("PROBE_HEAVY") == "1":
    import torch  # noqa: F401
    import worker.federated_site  # noqa: F401
IMPORTED = time.time()
atexit.register(lambda: print("PROBE-CLIENT", BEGAN, IMPORTED, time.time(), flush=True))

import numpy as np
from flwr.app import Context
from flwr.client import NumPyClient
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp


class Probe(NumPyClient):
    def get_parameters(self, config):
        return [np.zeros(3, np.float32)]

    def fit(self, parameters, config):
        return [p + 1.0 for p in parameters], 1, {}


app = ClientApp(client_fn=lambda context: Probe().to_client(), mods=[secaggplus_mod])
"""


def _write_app(root: Path, *, sites: int, rounds: int, secure: bool, mended: bool) -> Path:
    app = root / "app"
    (app / "probeapp").mkdir(parents=True)
    (app / "pyproject.toml").write_text(APP_TOML.format(
        rounds=rounds, sites=sites, secure=str(secure).lower(), mended=str(mended).lower()))
    (app / "probeapp" / "__init__.py").write_text("")
    (app / "probeapp" / "server.py").write_text(SERVER)
    (app / "probeapp" / "client.py").write_text(CLIENT)
    return app


def _spawn(command: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """The process and its process group (SuperExec and the apps it started)."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()


def _flwr(args: list[str], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    done = subprocess.run(["flwr", *args, "--format", "json"], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)
    start = done.stdout.find("{")
    if start < 0:
        raise RuntimeError(f"flwr {' '.join(args)}: {done.stdout[-500:]} {done.stderr[-500:]}")
    return dict(json.loads(done.stdout[start:]))


def _clients(log: Path) -> list[tuple[float, float, float]]:
    """(began, imported, ended) of each ClientApp process a SuperNode's log shows."""
    found = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("PROBE-CLIENT "):
            began, imported, ended = (float(v) for v in line.split()[1:4])
            found.append((began, imported, ended))
    return found


def _kill_when(log: Path, messages: int, node: subprocess.Popen[bytes]) -> bool:
    """SIGKILL ``node``'s process group once its log shows ``messages`` ClientApp runs."""
    if len(_clients(log)) < messages:
        return False
    os.killpg(node.pid, signal.SIGKILL)
    return True


def probe(root: Path, *, sites: int, rounds: int, secure: bool, heavy: bool,
          seconds: float, kill_after: int | None = None, mended: bool = False
          ) -> dict[str, Any]:
    """Run one federation on the runtime under ``root``; its figures. ``kill_after``: the last
    SuperNode is killed (SIGKILL, with its ClientApps) after that many ClientApp runs."""
    home = root / "flwr"
    home.mkdir()
    link = free_port()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "probe"\n[superlink.probe]\n'
        f'address = "127.0.0.1:{link}"\ninsecure = true\n')
    env = {**os.environ, "FLWR_HOME": str(home), "FLWR_TELEMETRY_ENABLED": "0",
           "PROBE_HEAVY": "1" if heavy else "0", "PROBE_OUT": str(root),
           "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    app = _write_app(root, sites=sites, rounds=rounds, secure=secure, mended=mended)
    started: list[subprocess.Popen[bytes]] = []
    try:
        started.append(_spawn(["flower-superlink", "--insecure", "--port", str(link),
                               "--disable-runtime-dependency-installation"],
                              root / "superlink.log", env))
        time.sleep(3)
        for i in range(sites):
            started.append(_spawn(["flower-supernode", "--insecure", "--superlink",
                                   f"127.0.0.1:{link}", "--port", str(free_port()),
                                   "--node-config", f'site="s{i}"'],
                                  root / f"supernode{i}.log", env))
        time.sleep(3)
        submitted = time.time()
        run_id = str(_flwr(["run", "."], env, app)["run-id"])
        deadline, killed_at = time.monotonic() + seconds, None
        while time.monotonic() < deadline:
            if kill_after is not None and killed_at is None and _kill_when(
                    root / f"supernode{sites - 1}.log", kill_after, started[-1]):
                killed_at = time.time()
            runs = _flwr(["ls"], env, app)["runs"]
            run = next(r for r in runs if str(r["run-id"]) == run_id)
            if str(run["status"]).startswith("finished"):
                break
            time.sleep(2)
        else:
            raise TimeoutError(f"the run did not finish in {seconds:g} s")
    finally:
        for process in reversed(started):
            _stop(process)
    nodes = [_clients(root / f"supernode{i}.log") for i in range(sites)]
    gaps = [b[0] - a[0] for node in nodes for a, b in zip(node, node[1:], strict=False)]
    server = json.loads((root / "server.json").read_text()) if (
        root / "server.json").exists() else {}
    return {
        "status": run["status"], "killed_at_s": killed_at and round(killed_at - submitted, 1),
        "rounds_results_failures_at_s": [[r, n, f, round(t - submitted, 1)]
                                         for r, n, f, t in server.get("rounds", [])],
        "sites": sites, "rounds": rounds, "secure": secure, "heavy": heavy, "mended": mended,
        "submitted_to_finished_s": round(time.time() - submitted, 1),
        "serverapp_s": round(float(run["compute-time"]["serverapp-seconds"]), 1),
        "clientapp_s": round(float(run["compute-time"]["clientapp-seconds"]), 2),
        "per_round_s": round(float(run["compute-time"]["serverapp-seconds"]) / rounds, 1),
        "messages_per_node": [len(node) for node in nodes],
        "between_message_starts_s": {
            "median": round(statistics.median(gaps), 1) if gaps else None,
            "max": round(max(gaps), 1) if gaps else None},
        "clientapp_import_s": round(statistics.median(
            i - b for node in nodes for b, i, _ in node), 2) if any(nodes) else None,
        "clientapp_lifetime_s": round(statistics.median(
            e - b for node in nodes for b, _, e in node), 2) if any(nodes) else None,
        "load_average": os.getloadavg()[0],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sites", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--plain", action="store_true", help="FedAvg without SecAgg+")
    parser.add_argument("--heavy", action="store_true",
                        help="each ClientApp imports torch and the site's modules")
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--kill-after", type=int, default=None,
                        help="SIGKILL the last SuperNode after this many ClientApp runs")
    parser.add_argument("--mended", action="store_true",
                        help="worker.secure_aggregation's MendedSecAggPlus, not Flower's own")
    args = parser.parse_args(argv)
    # a TERM (``timeout``, a CI's cancel) unwinds through ``probe``'s finally: nothing left
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with tempfile.TemporaryDirectory(prefix="flower-probe-") as folder:
        figures = probe(Path(folder), sites=args.sites, rounds=args.rounds,
                        secure=not args.plain, heavy=args.heavy, seconds=args.seconds,
                        kill_after=args.kill_after, mended=args.mended)
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
