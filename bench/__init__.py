"""The benchmarks: ``python -m bench`` runs them all (see ``bench/__main__.py``); each file also runs alone."""
