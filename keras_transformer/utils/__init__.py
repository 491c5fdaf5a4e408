"""Utilities that need no Keras: files, optional imports, console, settings.

The package version, atomic writes, optional imports, the console, the user
cache, setting fields and lazy package faces.
"""
