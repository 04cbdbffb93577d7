"""Who is calling: the identity routes and the audit log work with (never the key itself)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Principal:
    """An authenticated caller, or the operator at the command line / the service itself.

    Holds no secret and no ORM object, so it can outlive the session that looked the key up.
    """

    name: str
    role: str | None
    key_id: int | None = None
    request_id: str | None = None

    @classmethod
    def cli(cls) -> "Principal":
        """The operator running ``dpcrisis`` on the server (trusted with the database)."""
        return cls(name="cli", role=None)

    @classmethod
    def system(cls) -> "Principal":
        """The service acting on its own configuration (``DPCRISIS_ADMIN_KEY`` at start-up)."""
        return cls(name="system", role=None)
