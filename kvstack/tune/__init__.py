"""`kvstack tune`: the connector and the knobs that serve a trace fastest.

The candidate space is data (``knobs``: every connector that runs on the platform and the knobs the
installed code has, ``space``: candidates at sizes read off the trace's capacity curve); the
ranking is planning's simulation (``simulate``: the engine pool once, each candidate's offload
levels at its chunk and sizes, with its connector's readmission) plus a served-TTFT calibration
measured on the engine (``rank``). Pure: no file, clock or network here.
"""
