"""The library version, in a module of its own so that modules the package's __init__ imports can read it."""

__version__ = "0.1.0"
