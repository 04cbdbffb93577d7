"""Which methods a path answers, across every route that matches it.

Starlette's router answers a 405 with the methods of the first route whose path matched, so
a path served by two routes (``PUT`` and ``DELETE /v1/datasets/{id}/data``) listed one in
``Allow``. And a literal path beside a parameterised one (``POST /v1/models/rollback`` beside
``GET /v1/models/{model_id}``) sent ``GET .../rollback`` to the parameterised route, whose id
failed to parse (a 422): the path exists, the method does not, so it is a 405.

The paths and methods are read from the app's OpenAPI document (built once and cached by
FastAPI), the public list of what the service answers.
"""

import re
from functools import lru_cache

from starlette.requests import Request

_HTTP_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


@lru_cache(maxsize=8)
def _compiled(paths: tuple[tuple[str, tuple[str, ...]], ...]
              ) -> tuple[tuple[re.Pattern[str], bool, tuple[str, ...]], ...]:
    """Each documented path as a regex, whether it is literal, and its methods."""
    compiled = []
    for template, methods in paths:
        pattern = "".join(
            "[^/]+" if part.startswith("{") else re.escape(part)
            for part in re.split(r"(\{[^}]+\})", template) if part
        )
        compiled.append((re.compile(f"^{pattern}$"), "{" not in template, methods))
    return tuple(compiled)


def _routes(request: Request) -> tuple[tuple[re.Pattern[str], bool, tuple[str, ...]], ...]:
    document = request.app.openapi()
    paths = tuple(
        (template, tuple(m.upper() for m in item if m in _HTTP_METHODS))
        for template, item in document.get("paths", {}).items()
    )
    return _compiled(paths)


def allowed_methods(request: Request) -> list[str]:
    """Every method some documented route answers at the request's path (sorted)."""
    path = request.url.path
    return sorted({m for regex, _, methods in _routes(request) if regex.match(path)
                   for m in methods})


def literal_methods(request: Request) -> list[str]:
    """The methods of the documented routes without path parameters whose path is exactly the
    request's (a literal segment wins over a parameter it would fail to parse as)."""
    path = request.url.path
    return sorted({m for regex, literal, methods in _routes(request)
                   if literal and regex.match(path) for m in methods})
