"""Installs ``popdist_emu_popdist.pth`` beside the packages, for regular and editable installs.

The .pth registers a meta-path finder that answers ``import popdist`` outside ``poprun-emu``
only when no other ``popdist`` (e.g. the Poplar SDK's) is installed (``launch/_popdist_finder``).
setup.cfg holds the rest of the metadata.
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH = "popdist_emu_popdist.pth"


class BuildWithPth(build_py):
    """Regular installs: the .pth goes to the top of the wheel (site-packages)."""

    def run(self):
        super().run()
        self.copy_file(PTH, os.path.join(self.build_lib, PTH))

    def get_outputs(self, include_bytecode=1):
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH)]


class EditableWithPth(editable_wheel):
    """Editable installs (``pip install -e .``): the .pth is added to the editable wheel."""

    def _select_strategy(self, *args, **kwargs):
        strategy = super()._select_strategy(*args, **kwargs)
        write = strategy.__call__

        class WithPth(type(strategy)):
            def __call__(self, wheel, files, mapping):
                write(wheel, files, mapping)
                with open(PTH) as f:
                    wheel.writestr(PTH, f.read())

        strategy.__class__ = WithPth
        return strategy


setup(cmdclass={"build_py": BuildWithPth, "editable_wheel": EditableWithPth})
