"""Deployment export: the same Plan as Helm values, a Compose project, a systemd unit, a KServe
LLMInferenceService, llm-d values or an LMCache-operator engine.

Exporters are registered by name; each is pure (Plan + ExportOptions -> Bundle).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from kvstack.errors import InputError
from kvstack.export.bundle import Bundle, ExportFile, ExportOptions
from kvstack.planning.schema import Plan

Exporter = Callable[[Plan, ExportOptions], Bundle]
# format -> (module, function): imported on use, so `kvstack --help` never loads an exporter.
_EXPORTERS: dict[str, tuple[str, str]] = {
    "helm": ("kvstack.export.helm", "render_helm"),
    "compose": ("kvstack.export.compose", "render_compose"),
    "systemd": ("kvstack.export.systemd", "render_systemd"),
    "kserve": ("kvstack.export.kserve", "render_kserve"),
    "llm-d": ("kvstack.export.llm_d", "render_llm_d"),
    "lmcache-operator": ("kvstack.export.lmcache_operator", "render_lmcache_operator"),
}
FORMATS: tuple[str, ...] = tuple(_EXPORTERS)

__all__ = ["FORMATS", "Bundle", "ExportFile", "ExportOptions", "export_plan", "exporter"]


def exporter(fmt: str) -> Exporter:
    if fmt not in _EXPORTERS:
        raise InputError(f"unknown export format {fmt!r}", hint=f"use one of: {', '.join(FORMATS)}")
    module, name = _EXPORTERS[fmt]
    found: Exporter = getattr(importlib.import_module(module), name)
    return found


def export_plan(fmt: str, plan: Plan, options: ExportOptions) -> Bundle:
    return exporter(fmt)(plan, options)
