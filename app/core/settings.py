"""Service settings, read once from the environment (nobody else reads ``os.environ``)."""

from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

REPO_ROOT = Path(__file__).resolve().parents[2]


class CdsClient(BaseModel):
    """One EHR allowed to call the CDS Hooks service with signed JWTs: its ``iss`` and its
    public keys, inline (``jwks``, a JWK Set, for offline set-ups) or at ``jwks_url``."""

    iss: str = Field(min_length=1)
    jwks: dict[str, Any] | None = None
    jwks_url: str | None = Field(default=None, pattern=r"^https?://")

    @model_validator(mode="after")
    def _one_key_source(self) -> "CdsClient":
        if (self.jwks is None) == (self.jwks_url is None):
            raise ValueError(f"CDS client {self.iss!r}: give exactly one of jwks and jwks_url")
        return self


class Settings(BaseSettings):
    """Configuration of the API and the worker.

    ``DATABASE_URL`` defaults to a SQLite file under ``./var/`` so a fresh clone runs with no
    set-up; set it to ``postgresql+psycopg://...`` for a real deployment.
    """

    model_config = SettingsConfigDict(env_prefix="", extra="ignore")

    database_url: str = Field(default="sqlite:///./var/dpcrisis.db")
    database_pool_size: int = Field(
        default=5, ge=1, description="connections each process keeps open to the database",
    )
    database_max_overflow: int = Field(
        default=10, ge=0, description="connections opened beyond the pool under load",
    )
    database_pool_timeout_seconds: float = Field(
        default=10.0, gt=0,
        description="how long a request waits for a free connection before it is refused "
        "with 503 and Retry-After (an overloaded service sheds load instead of queueing)",
    )
    artifact_dir: Path = Field(default=Path("./var/artifacts"))
    data_dir: Path = Field(
        default=Path("./var/data"),
        description="uploaded cohort tables, kept as sent and named by their SHA-256",
    )
    max_upload_bytes: int = Field(
        default=1024 * 2**20, ge=1,
        description="largest table body accepted by PUT /v1/datasets/{id}/data (a 413 beyond)",
    )
    upload_max_header_bytes: int = Field(
        default=64 * 1024, ge=1024,
        description="longest CSV header line of an upload (a 422 beyond); a schema's 223 "
        "columns of 64 characters fit in 15 KiB",
    )
    upload_max_columns: int = Field(
        default=1000, ge=1,
        description="most columns an uploaded table (CSV header or Parquet schema) may have "
        "(a 422 beyond): a schema has at most 223, and each extra one is an error anyway",
    )
    upload_max_page_bytes: int = Field(
        default=64 * 2**20, ge=2**20,
        description="largest Parquet page of an upload, uncompressed (a 422 beyond): writers "
        "use about 1 MiB",
    )
    upload_max_decoded_bytes: int = Field(
        default=256 * 2**20, ge=16 * 2**20,
        description="most bytes reading one batch of an uploaded Parquet file may hold, "
        "estimated from its page headers before any row is decoded (compressed column chunks, "
        "one page per column, the batch's values): a 422 beyond, so that no file, however "
        "small, decodes to gigabytes",
    )
    upload_min_bytes_per_second: float = Field(
        default=16 * 1024, gt=0,
        description="an upload's body must average at least this rate after its grace "
        "period (a 408 otherwise): a trickling client cannot hold its dataset's claim",
    )
    upload_grace_seconds: float = Field(
        default=15.0, ge=0, description="how long a body may take before its rate counts",
    )
    upload_max_seconds: float = Field(
        default=3600.0, gt=0,
        description="the longest a body may take in all (a 408 beyond)",
    )
    upload_claim_lease_seconds: float = Field(
        default=30.0, gt=0,
        description="a dataset's upload claim is renewed while its body arrives; one not "
        "renewed for this long belongs to a process that died: a new upload may take it over "
        "and the next start gives it back",
    )
    upload_ingest_lease_seconds: float = Field(
        default=900.0, gt=0,
        description="how long a worker may take to ingest one spooled upload; past it the "
        "upload is queued again for another worker (its ingest commits once, or not at all)",
    )
    upload_max_wait_seconds: float = Field(
        default=120.0, ge=0,
        description="the longest `Prefer: wait=N` holds an upload's request for its ingest",
    )
    shutdown_grace_seconds: float = Field(
        default=10.0, gt=0,
        description="on SIGTERM, how long `dpcrisis serve` waits for requests in flight (an "
        "upload still arriving is then cut, its claim given back) before it exits",
    )
    flower_certificates: Path | None = Field(
        default=None,
        description="a federation's coordinator: the folder of Flower's TLS files (ca.crt, "
        "server.pem, server.key); unset: plain gRPC (a private network only)",
    )
    flower_root_certificate: Path | None = Field(
        default=None,
        description="a federation's clinic: the CA certificate its worker checks the "
        "coordinator's Flower server against; unset: plain gRPC",
    )
    federation_site_key: Path | None = Field(
        default=None,
        description="a federation's clinic: its Ed25519 private key (PEM, from `dpcrisis "
        "federation-key`), with which its worker signs every answer to the coordinator; "
        "needed when the federation declares the sites' public keys",
    )
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
    dpcrisis_admin_key: SecretStr | None = Field(
        default=None,
        description="an admin API key created at start-up if no key has its hash (automated "
        "set-up); at least 24 characters, e.g. from `openssl rand -base64 32`",
    )
    api_reap_seconds: float = Field(
        default=0.0, ge=0,
        description="how often the API fails running jobs whose lease expired (a lost worker's "
        "job ends even when no other worker runs); 0: a third of WORKER_LEASE_SECONDS",
    )
    max_request_bytes: int = Field(
        default=16 * 2**20, ge=1,
        description="largest request body accepted; a larger one is a 413 (the largest real "
        "body, a 10,000-patient risk batch, is about 3 MB)",
    )
    request_min_bytes_per_second: float = Field(
        default=16 * 1024, gt=0,
        description="a request body (JSON, a form; not a table upload, which has its own "
        "pace) must average at least this rate after its grace period (a 408 otherwise): "
        "a trickling client cannot hold a connection and a worker thread",
    )
    request_grace_seconds: float = Field(
        default=5.0, ge=0, description="how long a request body may take before its rate counts",
    )
    request_max_seconds: float = Field(
        default=60.0, gt=0, description="the longest a request body may take in all (a 408 beyond)",
    )
    log_format: Literal["auto", "json", "text"] = Field(
        default="auto",
        description="json: one JSON object per line (time, level, logger, message, request_id, "
        "job_id) for log shippers; text: the classic human-readable line; auto: text when the "
        "log stream is a terminal, json otherwise (a container, a file, a pipe)",
    )
    dpcrisis_cds_clients: list[CdsClient] = Field(
        default_factory=list,
        description='EHRs whose signed JWTs CDS Hooks accepts (JSON): [{"iss": ..., "jwks": '
        '{"keys": [...]}}] or [{"iss": ..., "jwks_url": "https://..."}]; API keys keep working',
    )
    dpcrisis_cds_base_url: str | None = Field(
        default=None, pattern=r"^https?://",
        description="the service's public base URL, as EHRs call it: a JWT's aud must be "
        "<base>/cds-services[/<id>]; required when DPCRISIS_CDS_CLIENTS is set (never taken "
        "from the request's Host, which a caller chooses)",
    )
    dpcrisis_forwarded_allow_ips: str = Field(
        default="",
        description="comma-separated addresses of the reverse proxies whose X-Forwarded-For "
        "and X-Forwarded-Proto headers are trusted; empty (the default): none, the headers "
        "are ignored",
    )
    dpcrisis_cds_cors_origins: list[str] = Field(
        default_factory=lambda: ["*"],
        description='origins allowed to call /cds-services from a browser (JSON list); ["*"] '
        "(the default, as the CDS Hooks spec shows) is safe: calls carry a bearer token, "
        "never a cookie; [] turns CORS off",
    )
    dpcrisis_cds_min_band: Literal["low", "medium", "high"] = Field(
        default="medium",
        description="the lowest risk band that gets a card; a call may ask for lower with the "
        "request extension dev.dpcrisis.min-band",
    )
    dpcrisis_cds_jwt_max_lifetime_s: int = Field(
        default=300, ge=1,
        description="the longest a CDS Hooks JWT may still be valid for (exp - now), in "
        "seconds: the spec says at most 5 minutes",
    )

    @model_validator(mode="after")
    def _cds_audience_is_configured(self) -> "Settings":
        if self.dpcrisis_cds_clients and self.dpcrisis_cds_base_url is None:
            raise ValueError("DPCRISIS_CDS_BASE_URL is required when DPCRISIS_CDS_CLIENTS is "
                             "set: a JWT's audience is checked against it, never against the "
                             "request's Host header")
        return self

    @cached_property
    def alembic_dir(self) -> Path:
        return REPO_ROOT / "alembic"


settings = Settings()
