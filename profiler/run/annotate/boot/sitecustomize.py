"""smlens's start-up hook for a profiled program (`smlens profile -- CMD`).

Python imports `sitecustomize` at start-up from the first folder on sys.path that has one; smlens
puts this folder first on the program's PYTHONPATH. It runs the sitecustomize that would have run
without smlens (found further along sys.path), then loads the annotation runtime (../runtime.py)
and views/vocabulary.py by file path, under private names, so the program's own `profiler` or
`views` packages stay its own, and leaves sys.path as it was. Child processes inherit PYTHONPATH
and are annotated too.
"""
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(_HERE))))  # holds profiler/, views/


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _chain():
    """The sitecustomize this one stands in front of, run under its own name."""
    paths = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", paths)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
try:
    _chain()
finally:
    try:
        _vocabulary = _load("_smlens_vocabulary", os.path.join(_ROOT, "views", "vocabulary.py"))
        _runtime = _load("_smlens_annotate", os.path.join(_ROOT, "profiler", "run", "annotate", "runtime.py"))
        if os.environ.get("SMLENS_TIME_COLLECTIVES"):  # the run that times collectives (collectives.py)
            _load("_smlens_collectives", os.path.join(_ROOT, "profiler", "run", "annotate",
                                                      "collectives.py")).boot(_runtime, _vocabulary)
        else:
            _runtime.boot(_vocabulary)
    except Exception as _err:  # noqa: BLE001 - never stop the program: it runs unannotated
        sys.stderr.write(f"smlens: note: the annotation could not start ({type(_err).__name__}: {_err})\n")
