"""`kvstack tune`: the connector and the knobs that serve a trace fastest, proved on the engine.

The ranking is pure (no file, clock or network): the candidate space is data (``knobs``: every
connector that runs on the platform and the knobs the installed code has, ``space``: candidates at
sizes read off the trace's capacity curve); the ranking is planning's simulation (``simulate``: the
engine pool once, each candidate's offload levels at its chunk and sizes, with its connector's
readmission) plus a served-TTFT calibration measured on the engine (``rank``, ``ranking``; the
calibration given, or measured first on the engine: ``calibration``).

The proof replays the trace on the engine (``prove``: none and the best-ranked candidates, each on
a fresh engine, within a ``budget``; ``measure``: bench --trace's replay and bench
--check-correctness's judgement), states each figure's noise (``noise``) and picks the measured
winner (``verdict``, pure); ``command`` runs a whole tune (``options``: its inputs checked;
``engines``: what it serves) and keeps its files (``files``, ``results``, ``report``, ``plots``).
It prints nothing: it reports through ``progress``'s View; rendering/tune.py and
rendering/tune_progress.py are its terminal output.
"""
