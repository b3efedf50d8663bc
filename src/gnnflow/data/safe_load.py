"""Loading pickled dataset files without running code they might carry.

Datasets come from the internet, and a pickle can name any importable callable
(``os.system``, ``subprocess.Popen``) and call it while loading.  Two formats
that gnnflow must read are pickles:

* Planetoid's ``ind.<name>.*`` files (Python 2 pickles of numpy arrays, scipy
  sparse matrices and a ``defaultdict`` of adjacency lists): read with
  :func:`restricted_unpickle`, a :class:`pickle.Unpickler` whose ``find_class``
  resolves only the globals those files contain;
* OGB's ``split/<split>/split_dict.pt`` (``torch.save`` of a dict of numpy
  arrays): read with :func:`load_torch_arrays`, ``torch.load(weights_only=True)``
  allowing only numpy array reconstruction.

Files that should hold plain arrays (``.npy``, ``.npz``) are read with
``numpy.load(allow_pickle=False)`` (:func:`load_npy` here; ``.npz`` archives key by key,
:class:`gnnflow.data.npz.NpzArrays`), so a pickled object array in them is refused, never
loaded.

Anything else raises one :class:`GnnflowError` naming the file and the global.
"""

from __future__ import annotations

import codecs
import os
import pickle
import re
from pathlib import Path
from typing import Any

from gnnflow.errors import GnnflowError

# numpy >= 2 names its core ``numpy._core``; pickles written by numpy 1.x name ``numpy.core``.
NUMPY_CORE = ("numpy._core.multiarray", "numpy.core.multiarray")


def _multiarray() -> Any:
    try:
        from numpy._core import multiarray
    except ImportError:  # numpy 1.x
        from numpy.core import multiarray  # type: ignore[no-redef]
    return multiarray


def _latin1_encode(text: str, encoding: str = "latin1") -> bytes:
    """``_codecs.encode`` as Python 3 protocol-2 pickles use it for ``bytes``, latin-1 only
    (another codec name could reach codecs registered by any installed package)."""
    if codecs.lookup(encoding).name != "iso8859-1":
        raise pickle.UnpicklingError(f"_codecs.encode with encoding {encoding!r} is not allowed")
    return codecs.encode(text, "latin1")


def planetoid_globals() -> dict[tuple[str, str], Any]:
    """The globals a Planetoid file may name: numpy arrays, dtypes and scalars (numpy 1.x
    and 2.x names), scipy CSR/CSC matrices (old ``scipy.sparse.csr`` and new
    ``scipy.sparse._csr`` paths), ``defaultdict`` of ``list`` (``ind.*.graph``) and the
    helpers Python 2 pickles of new-style objects use (``copy_reg._reconstructor``,
    ``__builtin__.object``)."""
    import collections
    import copyreg

    import numpy as np
    import scipy.sparse as sp

    ma = _multiarray()
    allowed: dict[tuple[str, str], Any] = {
        ("numpy", "ndarray"): np.ndarray,
        ("numpy", "dtype"): np.dtype,
        ("collections", "defaultdict"): collections.defaultdict,
        ("_codecs", "encode"): _latin1_encode,
    }
    for mod in NUMPY_CORE:
        allowed[(mod, "_reconstruct")] = ma._reconstruct
        allowed[(mod, "scalar")] = ma.scalar
    for mod in ("scipy.sparse.csr", "scipy.sparse._csr"):
        allowed[(mod, "csr_matrix")] = sp.csr_matrix
    for mod in ("scipy.sparse.csc", "scipy.sparse._csc"):
        allowed[(mod, "csc_matrix")] = sp.csc_matrix
    for mod in ("__builtin__", "builtins"):  # Python 2 and 3 names
        for obj in (list, dict, int, object):
            allowed[(mod, obj.__name__)] = obj
    for mod in ("copy_reg", "copyreg"):
        allowed[(mod, "_reconstructor")] = copyreg._reconstructor
    return allowed


class ForbiddenGlobal(pickle.UnpicklingError):
    def __init__(self, module: str, name: str) -> None:
        super().__init__(f"{module}.{name}")
        self.qualname = f"{module}.{name}"


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, fh: Any, allowed: dict[tuple[str, str], Any], **kwargs: Any) -> None:
        super().__init__(fh, **kwargs)
        self._allowed = allowed

    def find_class(self, module: str, name: str) -> Any:
        # Called with the names as written in the file (before Python 2 -> 3 renaming).
        try:
            return self._allowed[(module, name)]
        except KeyError:
            raise ForbiddenGlobal(module, name) from None


def restricted_unpickle(path: str | os.PathLike[str], allowed: dict[tuple[str, str], Any],
                        what: str, encoding: str = "latin1") -> Any:
    """Unpickle ``path`` resolving only the globals in ``allowed``.

    ``what`` names the expected content for the error message.  A forbidden global
    raises a GnnflowError naming the file and the global before it is called.
    """
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            return _RestrictedUnpickler(fh, allowed, encoding=encoding).load()
    except ForbiddenGlobal as exc:
        raise GnnflowError(f"{path}: refused to unpickle: it names {exc.qualname}, which {what} "
                           "never holds (loading it could run code); the file is not genuine, "
                           "replace it from the original source") from None
    except (pickle.UnpicklingError, EOFError, ValueError, AttributeError, ImportError,
            IndexError, TypeError, KeyError, OSError) as exc:
        raise GnnflowError(f"{path}: cannot unpickle ({type(exc).__name__}: {exc}); "
                           f"the file is truncated or not {what}") from None


def torch_array_globals() -> list[Any]:
    """What ``torch.load(weights_only=True)`` may resolve for a dict of numpy arrays:
    ``ndarray``, ``dtype``, the integer dtype classes and ``_reconstruct`` under
    numpy's 2.x and 1.x module names."""
    import numpy as np

    ma = _multiarray()
    out: list[Any] = [np.ndarray, np.dtype]
    out += [(ma._reconstruct, f"{mod}._reconstruct") for mod in NUMPY_CORE]
    out += [(ma.scalar, f"{mod}.scalar") for mod in NUMPY_CORE]
    dtypes = getattr(np, "dtypes", None)  # numpy >= 1.25
    if dtypes is not None:
        out += [getattr(dtypes, f"{s}Int{b}DType") for s in ("", "U") for b in (8, 16, 32, 64)]
    return out


# torch words it "Unsupported global: GLOBAL os.system was not an allowed global" or
# "Trying to load unsupported GLOBAL posix.system whose module posix is blocked".
_UNSUPPORTED = re.compile(r"GLOBAL ([A-Za-z_][\w.]*[\w])")


def load_torch_arrays(path: str | os.PathLike[str], what: str) -> Any:
    """``torch.load`` of a file that should hold only (dicts/lists of) numpy arrays,
    with ``weights_only=True``: no code in the file runs."""
    import torch

    path = Path(path)
    try:
        with torch.serialization.safe_globals(torch_array_globals()):
            return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        m = _UNSUPPORTED.search(str(exc))
        if m:
            raise GnnflowError(f"{path}: refused to load: it names {m.group(1)}, which {what} "
                               "never holds (loading it could run code); the file is not genuine, "
                               "replace it from the original source") from None
        raise GnnflowError(f"{path}: refused to load ({_weights_only_reason(exc)}); the file "
                           f"is not {what}") from None
    except (RuntimeError, EOFError, ValueError, OSError, AttributeError, TypeError) as exc:
        raise GnnflowError(f"{path}: cannot load ({type(exc).__name__}: {_first_line(exc)}); "
                           f"the file is truncated or not {what}") from None


def load_npy(path: str | os.PathLike[str], what: str) -> Any:
    """The array of a ``.npy`` file, read with ``allow_pickle=False``: a pickled object array is
    refused, a missing, truncated or foreign file is one GnnflowError naming the file (``what``:
    what it should hold)."""
    import numpy as np

    path = Path(path)
    if not path.is_file():
        raise GnnflowError(f"{path}: no such file; expected {what}")
    try:
        arr = np.load(path, allow_pickle=False)
    except ValueError as exc:
        if "allow_pickle" in str(exc):
            raise GnnflowError(f"{path}: holds a pickled object array; refused (loading it could run "
                               f"code), expected {what}") from None
        raise GnnflowError(f"{path}: cannot read as a .npy array ({_first_line(exc)}); expected {what}") from None
    except (OSError, EOFError) as exc:
        raise GnnflowError(f"{path}: cannot read ({_first_line(exc)}); the file is truncated or not {what}") from None
    if not isinstance(arr, np.ndarray):  # np.load of a .npz archive
        arr.close()
        raise GnnflowError(f"{path}: is an archive of several arrays, expected one .npy array: {what}")
    return arr


def _weights_only_reason(exc: BaseException) -> str:
    """The line of torch's long weights-only message that says what was refused."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    for ln in lines:
        if "WeightsUnpickler error" in ln or "unsupported" in ln.lower():
            return ln
    return lines[-1] if lines else type(exc).__name__


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__

