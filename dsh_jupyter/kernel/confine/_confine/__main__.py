"""``python -I -S <this directory> --probe``: confine a throwaway child once; prints ``ok``
or why it failed (the host's ``sandbox.confinement_problem`` runs it)."""

import importlib
import json
import os
import sys

if __name__ == "__main__":
    # Run as a directory, Python puts the directory itself first on the path: from its
    # parent the directory imports as the package it is.
    sys.path[0] = os.path.dirname(os.path.abspath(sys.path[0]))
    package = importlib.import_module(os.path.basename(os.path.dirname(__file__)))
    if sys.argv[1:] == ["--probe"]:
        problem = package.probe()
        print(problem or "ok")
        sys.exit(0 if problem is None else 1)
    print(json.dumps({"usage": "python -I -S _confine --probe"}))
    sys.exit(2)
