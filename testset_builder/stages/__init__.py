"""Stages: functions from records (and settings) to records. The CLI and the store sit at the edges."""
