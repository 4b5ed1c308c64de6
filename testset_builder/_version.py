__version__ = "0.1.0"  # pyproject.toml's version: tests/test_packaging.py holds them equal
