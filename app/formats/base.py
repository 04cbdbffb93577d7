"""What a score output format is: a media type and how it renders the scoring answer."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from app.scoring.answer import RiskAnswer
from app.scoring.schemas import BatchView

Kind = Literal["single", "batch"]


@dataclass(frozen=True)
class Format:
    """A media type and how it renders one patient's answer and a batch's (None: not offered).

    ``order`` places it in the list the routes offer (lowest first); the first is the default.
    """

    media_type: str
    single: Callable[[RiskAnswer], bytes] | None
    batch: Callable[[RiskAnswer, BatchView], bytes] | None
    description: str
    order: int = 100

    @property
    def name(self) -> str:
        """The registry's name for it: two formats may not share a media type."""
        return self.media_type

    def offers(self, kind: Kind) -> bool:
        return (self.single if kind == "single" else self.batch) is not None
