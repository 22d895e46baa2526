"""The examples' package has a thin face: a static ``__all__``, every name of it there."""

import pipelined_training
from repo_scripts import EXAMPLES
from source_imports import literal_all


def test_the_face_exports_what_its_all_names():
    names = literal_all(EXAMPLES / "pipelined_training" / "__init__.py")
    assert names == pipelined_training.__all__ and len(names) == len(set(names))
    assert all(getattr(pipelined_training, name) is not None for name in names)
