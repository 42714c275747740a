"""conformance/console/ as a package: `from console.check import Browser` finds check.py
from any directory (bench/console.py is a module of the same name)."""
