"""Deployment export: the same Plan as Helm values, a Compose project or a systemd unit.

Exporters are registered by name; each is pure (Plan + ExportOptions -> Bundle).
"""

from __future__ import annotations

from collections.abc import Callable

from kvstack.errors import InputError
from kvstack.export.bundle import Bundle, ExportFile, ExportOptions
from kvstack.planning.schema import Plan

Exporter = Callable[[Plan, ExportOptions], Bundle]
FORMATS: tuple[str, ...] = ("helm", "compose", "systemd", "kserve", "llm-d", "lmcache-operator")

__all__ = ["FORMATS", "Bundle", "ExportFile", "ExportOptions", "export_plan", "exporter"]


def exporter(fmt: str) -> Exporter:
    if fmt == "helm":
        from kvstack.export.helm import render_helm

        return render_helm
    if fmt == "compose":
        from kvstack.export.compose import render_compose

        return render_compose
    if fmt == "systemd":
        from kvstack.export.systemd import render_systemd

        return render_systemd
    if fmt == "kserve":
        from kvstack.export.kserve import render_kserve

        return render_kserve
    if fmt == "llm-d":
        from kvstack.export.llm_d import render_llm_d

        return render_llm_d
    if fmt == "lmcache-operator":
        from kvstack.export.lmcache_operator import render_lmcache_operator

        return render_lmcache_operator
    raise InputError(f"unknown export format {fmt!r}", hint=f"use one of: {', '.join(FORMATS)}")


def export_plan(fmt: str, plan: Plan, options: ExportOptions) -> Bundle:
    return exporter(fmt)(plan, options)
