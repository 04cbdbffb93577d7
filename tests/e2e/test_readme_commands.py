"""Every command of the README's walk-through, pasted in order into bash against a real
`dpcrisis serve`: none may answer an HTTP error.

The code blocks are read from the README itself (from "## Walk-through" to the next top-level
section), then from the docs pages that continue it (docs/ehr.md, docs/schemas.md), so the
walk-through cannot drift from what the service does. Between blocks the test
waits for queued jobs to finish, as a reader would before the next step.
"""

import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bench.processes import CLI, api_client, served, service_env

README = Path(__file__).resolve().parents[2] / "README.md"
STATUS = "__HTTP_STATUS__"
# Every curl prints its status after its body; -s keeps its progress meter quiet.
PRELUDE = f'curl() {{ command curl -w "\\n{STATUS} %{{http_code}}\\n" "$@"; }}\n'


# Pages whose commands continue the walk-through (on its service, with its key and models).
CONTINUED_IN = [README.parent / "docs" / "ehr.md", README.parent / "docs" / "schemas.md"]


def walkthrough_blocks() -> list[str]:
    text = README.read_text()
    section = text[text.index("## Walk-through"):]
    section = section[:section.index("\n## ", 5)]
    blocks = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    for page in CONTINUED_IN:
        blocks += re.findall(r"```bash\n(.*?)```", page.read_text(), flags=re.S)
    # A block that sends a file no earlier block wrote (say, the reader's own export) shows the
    # form of a call; it is not run.
    written: set[str] = set()
    runnable = []
    for block in blocks:
        written |= set(re.findall(r"> *([\w.-]+)", block))
        sent = set(re.findall(r"--data-binary @([\w.-]+)", block))
        if sent <= written:
            runnable.append(block)
    return runnable


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    with served(tmp_path) as base:
        yield base


def _wait_for_jobs(http: httpx.Client) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        jobs = http.get("/v1/jobs").json()["items"]
        if all(j["status"] not in ("queued", "running") for j in jobs):
            return
        time.sleep(0.2)
    raise AssertionError("jobs still running after 120 s")


def _run(block: str, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(["bash", "-c", PRELUDE + block], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{block}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.slow
def test_every_walkthrough_command_succeeds_in_order(server: str, tmp_path: Path) -> None:
    blocks = walkthrough_blocks()
    assert len(blocks) >= 8 and "KEY=$(" in blocks[0]
    work = tmp_path / "reader"
    work.mkdir()
    (work / ".venv").symlink_to(Path(CLI).parent.parent)  # the README's .venv/bin/dpcrisis
    env = {**service_env(tmp_path)}
    port = server.rsplit(":", 1)[1]
    key = ""
    for block in blocks:
        block = block.replace("localhost:8000", f"127.0.0.1:{port}")
        if key:
            _wait_for_jobs(api_client(server, key=key))
        output = _run(block + ('\necho "KEY=$KEY"' if "KEY=$(" in block else ""), work,
                      {**env, "KEY": key})
        if "KEY=$(" in block:
            key = output.strip().splitlines()[-1].removeprefix("KEY=")
            assert key.startswith("dpk_"), output
        codes = [int(code) for code in re.findall(rf"{STATUS} (\d+)", output)]
        assert codes.count(0) == 0 and len(codes) == block.count("curl "), (block, output)
        assert all(code < 400 for code in codes), f"{block}\n{output[-3000:]}"
