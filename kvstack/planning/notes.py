"""The reasons, warnings and errors a plan collects while it is made."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Notes:
    reasons: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def warn(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)
