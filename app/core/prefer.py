"""The ``Prefer`` request header (RFC 7240): how long a client will wait for an answer.

``Prefer: wait=N`` asks the server to answer within about N seconds; an asynchronous
operation that ends in time answers as its synchronous form would, else ``202``.
``Preference-Applied: wait=N`` says the wait was honoured (capped by the server).
"""

import re

_WAIT = re.compile(r"(?:^|[,;\s])wait\s*=\s*\"?(\d{1,9})\"?\s*(?=$|[,;])", re.IGNORECASE)


def wait_seconds(header: str | None, *, cap: float) -> float | None:
    """The ``wait`` preference in seconds, at most ``cap``; None when not asked (or
    malformed: a preference the server does not understand is ignored, RFC 7240 2)."""
    if not header:
        return None
    found = _WAIT.search(header)
    return None if found is None else min(float(found.group(1)), cap)


def applied(seconds: float) -> dict[str, str]:
    """The ``Preference-Applied`` header for a wait of ``seconds``."""
    return {"Preference-Applied": f"wait={int(seconds)}"}
