"""docs/layout.md names every package and every flow module, so a newcomer's map stays whole.

A package is a directory with ``__init__.py`` under ``app/`` or ``worker/``; it is named when
its path with a trailing slash (``app/monitoring/``) appears on the page. A module of
``app/flows`` is named when it appears in backquotes (`` `upload` ``) in the page's flows
section. A module of ``app/datasets`` is named when its path under it, in backquotes
(`` `intake/ingest.py` ``), appears in the page's datasets section.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYOUT = ROOT / "docs" / "layout.md"
FLOWS_HEADING = "## Flows"
DATASETS_HEADING = "## Datasets"


def _packages() -> list[str]:
    found = [
        init.parent.relative_to(ROOT).as_posix() + "/"
        for top in ("app", "worker")
        for init in ROOT.joinpath(top).rglob("__init__.py")
    ]
    return sorted(found)


def _flow_modules() -> list[str]:
    return sorted(path.stem for path in ROOT.joinpath("app", "flows").glob("*.py")
                  if path.stem != "__init__")


def _dataset_modules() -> list[str]:
    top = ROOT.joinpath("app", "datasets")
    return sorted(path.relative_to(top).as_posix() for path in top.rglob("*.py")
                  if path.name != "__init__.py")


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    following = re.search(r"^## ", text[start + len(heading):], re.M)
    end = len(text) if following is None else start + len(heading) + following.start()
    return text[start:end]


def _flows_section(text: str) -> str:
    return _section(text, FLOWS_HEADING)


def _unnamed_packages(text: str, packages: list[str]) -> list[str]:
    return [package for package in packages
            if not re.search(rf"(?<![\w/]){re.escape(package)}", text)]


def _unnamed_flows(text: str, modules: list[str]) -> list[str]:
    section = _flows_section(text)
    return [module for module in modules if f"`{module}`" not in section]


def _unnamed_dataset_modules(text: str, modules: list[str]) -> list[str]:
    section = _section(text, DATASETS_HEADING)
    return [module for module in modules if f"`{module}`" not in section]


def test_the_packages_and_flows_are_found() -> None:
    assert {"app/", "app/flows/", "worker/"} <= set(_packages())
    assert {"upload", "job_run"} <= set(_flow_modules())
    assert {"models.py", "intake/ingest.py", "patients/identity.py"} <= set(_dataset_modules())


def test_every_package_is_named_in_the_layout_page() -> None:
    missing = _unnamed_packages(LAYOUT.read_text(encoding="utf-8"), _packages())
    assert not missing, f"name these packages in docs/layout.md: {missing}"


def test_every_flow_module_is_named_in_the_flows_section() -> None:
    missing = _unnamed_flows(LAYOUT.read_text(encoding="utf-8"), _flow_modules())
    assert not missing, f"name these app/flows modules in docs/layout.md: {missing}"


def test_every_dataset_module_is_named_in_the_datasets_section() -> None:
    text = LAYOUT.read_text(encoding="utf-8")
    missing = _unnamed_dataset_modules(text, _dataset_modules())
    assert not missing, f"name these app/datasets modules in docs/layout.md: {missing}"


def test_the_check_catches_an_unnamed_dataset_module() -> None:
    text = "## Datasets\n| `models.py` |\n## Flows\n`intake/spool.py`\n"
    assert _unnamed_dataset_modules(text, ["models.py", "intake/spool.py"]) == [
        "intake/spool.py"]


def test_the_check_catches_an_unnamed_package_and_flow() -> None:
    text = "app/jobs/ the jobs\napp/jobs2/ x\n## Flows\n| `upload` |\n## Next\n`sweep`\n"
    assert _unnamed_packages(text, ["app/jobs/", "app/queue/", "worker/jobs/"]) == [
        "app/queue/", "worker/jobs/"]
    assert _unnamed_flows(text, ["upload", "sweep"]) == ["sweep"]
