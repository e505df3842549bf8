"""Reading and writing other libraries' adapter formats (AdapterHub `adapters`: interop/adapterhub.py)."""

from adapterfusion.interop.adapterhub import export_adapterhub, is_adapterhub_dir, load_adapterhub

__all__ = ["export_adapterhub", "is_adapterhub_dir", "load_adapterhub"]
