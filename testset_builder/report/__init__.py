"""The HTML report of a release (:mod:`.build`), with its plots (:mod:`.plots`)."""

from .build import Report, build_report, render

__all__ = ["Report", "build_report", "render"]
