"""The type of a JSON object where it enters or leaves kvstack.

``JsonObject`` annotates a document parsed from, or written to, JSON or YAML: a ``--json``
document, a probe's job and result, an HTTP body, a results.json, an export's manifest. It is used
only at those edges; data passed between kvstack's own functions has a typed structure instead.
"""

from __future__ import annotations

from typing import Any, TypeAlias

JsonObject: TypeAlias = dict[str, Any]
