"""Package discovery: every ``ragspine*`` package plus ``services/`` shipped as ``ragspine.services``.

Everything else is configured in pyproject.toml; only the prefixed folder mapping needs code.
"""

from setuptools import find_packages, setup

_SERVICES = ["ragspine.services", *("ragspine.services." + p for p in find_packages("services"))]

setup(packages=[*find_packages(include=["ragspine", "ragspine.*"]), *_SERVICES])
