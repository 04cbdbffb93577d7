"""The fixed, public grid of Rényi orders: a filter must not pick its orders after seeing the
data."""

RDP_ORDERS: tuple[float, ...] = tuple(
    [1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64)) + [128, 256, 512, 1024]
)
