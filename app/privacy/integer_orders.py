"""RDP of DP-SGD at the grid's integer orders in closed form: cheap upper bounds that bracket
the noise searches and size their domains (``app.privacy.accounting.integer_order_epsilon``)."""

import math

import numpy as np
from scipy.special import gammaln

from app.privacy.orders import RDP_ORDERS

INTEGER_ORDERS = np.array([a for a in RDP_ORDERS if float(a).is_integer()], dtype=float)


_BINOM_I = np.arange(int(INTEGER_ORDERS.max()) + 1, dtype=float)
# log C(a, i) for every integer order a and i <= a (-inf beyond): the same for every call.
_LOG_BINOM = np.where(
    _BINOM_I <= INTEGER_ORDERS[:, None],
    gammaln(INTEGER_ORDERS[:, None] + 1)
    - gammaln(_BINOM_I + 1)
    - gammaln(np.maximum(INTEGER_ORDERS[:, None] - _BINOM_I, 0) + 1),
    -np.inf,
)


def integer_order_rdp(noise_multiplier: float, sample_rate: float, steps: int) -> np.ndarray:
    """RDP at the grid's integer orders in closed form, vectorised (cheap enough to call in loops).

    log A_a = logsumexp_i [log C(a, i) + i log q + (a - i) log(1 - q) + (i^2 - i) / (2 s^2)]
    (Mironov et al. 2019, the formula Opacus and dp-accounting use for integer orders). Only
    ever an upper bound on the full grid's epsilon: used to bracket searches and size domains.
    """
    q, sigma = sample_rate, noise_multiplier
    if q >= 1.0:
        return steps * INTEGER_ORDERS / (2 * sigma**2)
    i, a = _BINOM_I, INTEGER_ORDERS[:, None]
    terms = _LOG_BINOM + i * math.log(q) + (a - i) * math.log1p(-q) + (i * i - i) / (2 * sigma**2)
    top = terms.max(axis=1)
    log_a = top + np.log(np.exp(terms - top[:, None]).sum(axis=1))  # logsumexp, less overhead
    return steps * log_a / (INTEGER_ORDERS - 1)
