"""``kvstack bench --sweep``: the same workload at a ladder of loads (concurrencies or request rates),
a bracketing search for the knee after it, and each layout's capacity under an SLO."""
