"""The reasons, warnings and errors a plan collects while it is made."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Notes:
    reasons: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def reason_after(self, anchor: str, key: str, text: str) -> None:
        """Give ``key``'s reason right after ``anchor``'s (at the end where there is no anchor)."""
        items = [(k, v) for k, v in self.reasons.items() if k != key]
        at = next((i + 1 for i, (k, _) in enumerate(items) if k == anchor), len(items))
        self.reasons = dict([*items[:at], (key, text), *items[at:]])

    def warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)
