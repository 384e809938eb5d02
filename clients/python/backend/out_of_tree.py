"""A PEP 517 build backend: setuptools' own, run on a copy of the package
in a temporary directory, so that building or installing the package
(pip install ./clients/python) writes nothing into the checkout.
setuptools writes build/ and src/*.egg-info beside the sources it builds,
and pip builds a local directory in place."""

import functools
import os
import shutil
import tempfile

from setuptools import build_meta as _setuptools

# What the copy leaves out: what a build, a venv or a test run made.
_IGNORE = shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__", "*.pyc", ".venv")


def _in_a_copy(hook):
    """hook, run with a copy of the package as the working directory. The
    directories pip passes (where the wheel or the metadata goes) are made
    absolute first, as the working directory moves."""

    @functools.wraps(hook)
    def run(*args, **kwargs):
        args = [os.path.abspath(a) if isinstance(a, str) else a for a in args]
        kwargs = {k: os.path.abspath(v) if isinstance(v, str) else v for k, v in kwargs.items()}
        here = os.getcwd()
        with tempfile.TemporaryDirectory(prefix="rein-client-build-") as tmp:
            copy = os.path.join(tmp, "rein-client")
            shutil.copytree(here, copy, ignore=_IGNORE)
            os.chdir(copy)
            try:
                return hook(*args, **kwargs)
            finally:
                os.chdir(here)

    return run


get_requires_for_build_wheel = _in_a_copy(_setuptools.get_requires_for_build_wheel)
prepare_metadata_for_build_wheel = _in_a_copy(_setuptools.prepare_metadata_for_build_wheel)
build_wheel = _in_a_copy(_setuptools.build_wheel)
get_requires_for_build_sdist = _in_a_copy(_setuptools.get_requires_for_build_sdist)
build_sdist = _in_a_copy(_setuptools.build_sdist)
# An editable install (pip install -e) runs from the checkout itself, so it
# is built there, as setuptools builds it.
get_requires_for_build_editable = _setuptools.get_requires_for_build_editable
prepare_metadata_for_build_editable = _setuptools.prepare_metadata_for_build_editable
build_editable = _setuptools.build_editable
