"""The model ``--model`` names. One way in: ``kvstack.model.source.resolve_model(spec, revision)``
tries a local directory, the Hugging Face cache, the catalog and the hub, in that order.

The parts: ``geometry`` (a model's KV geometry from its config.json), ``local`` (a directory on
this machine), ``catalog`` (profiles/models.yaml), ``hub`` (the Hugging Face cache and hub),
``checkpoint`` (weight files and their size).
"""
