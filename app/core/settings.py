"""Service settings, read once from the environment (nobody else reads ``os.environ``)."""

from functools import cached_property
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

REPO_ROOT = Path(__file__).resolve().parents[2]


class Settings(BaseSettings):
    """Configuration of the API and the worker.

    ``DATABASE_URL`` defaults to a SQLite file under ``./var/`` so a fresh clone runs with no
    set-up; set it to ``postgresql+psycopg://...`` for a real deployment.
    """

    model_config = SettingsConfigDict(env_prefix="", extra="ignore")

    database_url: str = Field(default="sqlite:///./var/dpcrisis.db")
    artifact_dir: Path = Field(default=Path("./var/artifacts"))
    worker_poll_seconds: float = Field(default=1.0, gt=0)
    worker_lease_seconds: float = Field(default=60.0, gt=0)
    worker_wake: bool = Field(
        default=True,
        description="a submission wakes the embedded worker; false leaves it to its poll "
        "timer (bench/time_to_model.py measures the difference)",
    )
    torch_threads: int = Field(
        default=0, ge=0, description="0: 1 for a CPU worker, torch's default otherwise"
    )
    device: str = Field(default="auto", description="auto | cpu | cuda")

    @cached_property
    def alembic_dir(self) -> Path:
        return REPO_ROOT / "alembic"


settings = Settings()
