"""The package version, read from the VERSION file next to this module.

VERSION is the single place the version is written: pyproject.toml reads it at build time
(``[tool.setuptools.dynamic]``) and this module at import time, so an in-place build, an
editable install and a wheel all report the same string.
"""
import os

_VERSION_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "VERSION")

with open(_VERSION_FILE, encoding="utf-8") as _f:
    __version__ = _f.read().strip()

del _f
