"""Routes call one flow or one service; the worker's training run is named flow steps.

A step that crosses domains (a change and its audit event, a read across two domains) lives in
``app/flows`` (docs/layout.md), so a newcomer finds it by name, not inside a route.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The audit log's own routes (list the events) are the audit domain's service, not a step.
AUDIT_DOMAIN_ROUTES = {"auth.py"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def test_no_route_records_an_audit_event_itself() -> None:
    recording = [path.name for path in sorted(ROOT.joinpath("app", "api").glob("*.py"))
                 if path.name not in AUDIT_DOMAIN_ROUTES
                 and {"app.auth.audit", "app.auth.audit.Action"} & _imports(path)]
    assert not recording, f"move the audit event into a flow (app/flows): {recording}"


def _calls(function: ast.FunctionDef) -> list[str]:
    """The calls in ``function``, in source order."""
    names = []
    calls = sorted((n for n in ast.walk(function) if isinstance(n, ast.Call)),
                   key=lambda n: (n.lineno, n.col_offset))
    for node in calls:
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            names.append(f"{func.value.id}.{func.attr}")
        elif isinstance(func, ast.Name):
            names.append(func.id)
    return names


def test_the_training_run_is_its_named_steps_in_order() -> None:
    tree = ast.parse(ROOT.joinpath("worker", "tasks.py").read_text(encoding="utf-8"))
    (run,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run_training"]
    steps = ["job_run.load", "train_step", "evaluate_step", "job_run.store", "job_run.commit"]
    calls = [c for c in _calls(run) if c in steps]
    assert calls == steps
    runner = ROOT.joinpath("worker", "runner.py").read_text(encoding="utf-8")
    assert "job_run.claim(" in runner
