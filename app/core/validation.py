"""The error budget: an answer lists at most ``MAX_LISTED_ERRORS`` errors, and validation
stops looking soon after it has found that many.

Without a budget a small body buys a huge answer: 4,000 patients with 100 unknown keys each
(4 MB) would make 424,000 errors, seconds of work and a 422 thirty times the body's size.
Two rules bound the work, and ``app.core.errors`` bounds the answer:

- a request object with more than ``MAX_LISTED_ERRORS`` unknown keys gets errors for the first
  ones and one summary error counting the rest, and its known keys go unchecked
  (``unknown_keys_checked``, on every ``RequestModel``): no error is built per key beyond the
  budget;
- a long list (a risk batch) is validated in slices, and validation stops after the slice in
  which the budget was reached, with a summary error saying it stopped (``stop_early``).

A summary error has the type ``MORE_ERRORS`` and says, in its context, how many errors it
stands for (``omitted``) and whether the count is the whole count (``complete``); the problem
document shows ``error_count`` and, when it is a lower bound, ``complete: false``.
"""

from collections.abc import Callable, Collection, Mapping, Sequence
from functools import partial
from typing import Any

from pydantic import ValidationError, ValidatorFunctionWrapHandler, WrapValidator
from pydantic_core import InitErrorDetails, PydanticCustomError

MAX_LISTED_ERRORS = 100
"""Errors listed in one answer; the rest are counted (``error_count``)."""
MORE_ERRORS = "more_errors"
"""The type of a summary error: it stands for ``ctx['omitted']`` errors not built."""
SLICE = 16
"""Items validated at a time: at most this many items' errors are built past the budget."""


def summary(*, omitted: int, complete: bool, message: str, loc: tuple[str | int, ...] = ()
            ) -> InitErrorDetails:
    """One error standing for ``omitted`` unlisted ones (``complete``: the count is whole)."""
    ctx = {"omitted": omitted, "complete": complete}
    return InitErrorDetails(type=PydanticCustomError(MORE_ERRORS, message, ctx), loc=loc,
                            input=None)


def _extra(key: str, value: Any) -> InitErrorDetails:
    return InitErrorDetails(type="extra_forbidden", loc=(key,), input=value)


def unknown_keys_checked(value: Any, known: Collection[str], title: str) -> Any:
    """``value`` unchanged, unless it is a mapping with more unknown keys than the budget:
    then a ValidationError with the first ``MAX_LISTED_ERRORS`` of them and a summary.

    Only a mapping with more keys than ``known`` plus the budget can break it, so valid
    bodies pay one ``len``. Below the budget pydantic reports unknown keys itself.
    """
    if not isinstance(value, Mapping) or len(value) <= len(known) + MAX_LISTED_ERRORS:
        return value
    unknown = [key for key in value if key not in known]
    if len(unknown) <= MAX_LISTED_ERRORS:
        return value
    errors = [_extra(key, value[key]) for key in unknown[:MAX_LISTED_ERRORS]]
    rest = len(unknown) - MAX_LISTED_ERRORS
    # The known keys are not checked: the count is a lower bound.
    errors.append(summary(omitted=rest, complete=False,
                          message=f"{rest} more unknown keys, not listed"))
    raise ValidationError.from_exception_data(title, errors)


def _shifted(errors: Sequence[Any], offset: int) -> list[InitErrorDetails]:
    """A slice's errors as errors of the whole list (the slice began at ``offset``)."""
    shifted = []
    for error in errors:
        loc = tuple(error["loc"])
        if loc and isinstance(loc[0], int):
            loc = (loc[0] + offset, *loc[1:])
        ctx = {k: v for k, v in (error.get("ctx") or {}).items() if k != "error"}
        shifted.append(InitErrorDetails(type=PydanticCustomError(error["type"], error["msg"], ctx),
                                        loc=loc, input=error.get("input")))
    return shifted


def _slices(value: list[Any], handler: ValidatorFunctionWrapHandler) -> list[Any]:
    validated: list[Any] = []
    errors: list[InitErrorDetails] = []
    found = 0
    for start in range(0, len(value), SLICE):
        try:
            validated.extend(handler(value[start:start + SLICE]))
        except ValidationError as exc:
            raised = exc.errors()
            found += count_errors(raised)[0]
            errors += _shifted(raised, start)
        unchecked = len(value) - start - SLICE
        if found >= MAX_LISTED_ERRORS and unchecked > 0:
            errors.append(summary(
                omitted=0, complete=False,
                message=f"validation stopped after {found} errors; the last {unchecked} items "
                "were not checked"))
            break
    if errors:
        raise ValidationError.from_exception_data("list", errors)
    return validated


def _stop_early(value: Any, handler: ValidatorFunctionWrapHandler, *, max_length: int) -> Any:
    # A list too long (or not a list) fails at once, before any item is validated.
    if not isinstance(value, list) or len(value) <= SLICE or len(value) > max_length:
        return handler(value)
    return _slices(value, handler)


def stop_early(max_length: int) -> WrapValidator:
    """Validate a list (``max_length`` items at most) in slices, stopping once
    ``MAX_LISTED_ERRORS`` errors are found: ``Annotated[list[X], stop_early(n)]``."""
    return WrapValidator(partial(_stop_early, max_length=max_length))


def count_errors(errors: Sequence[Mapping[str, Any]]) -> tuple[int, bool]:
    """How many errors ``errors`` stand for, and whether that is all of them."""
    count, complete = 0, True
    for error in errors:
        if error["type"] == MORE_ERRORS:
            ctx = error.get("ctx") or {}
            count += int(ctx.get("omitted", 0))
            complete = complete and bool(ctx.get("complete", True))
        else:
            count += 1
    return count, complete


def listed(errors: Sequence[Any], build: Callable[[Any], dict[str, Any]]
           ) -> tuple[list[dict[str, Any]], int, bool]:
    """The first ``MAX_LISTED_ERRORS`` errors (summaries left out) built by ``build``, their
    count and whether the count is whole."""
    count, complete = count_errors(errors)
    shown = [build(e) for e in _first(errors)]
    return shown, count, complete


def _first(errors: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    kept = []
    for error in errors:
        if error["type"] != MORE_ERRORS:
            kept.append(error)
            if len(kept) == MAX_LISTED_ERRORS:
                break
    return kept
