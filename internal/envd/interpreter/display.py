"""Airlock's display hooks for the Python kernel (loaded by the kernel
launcher in internal/envd/interpreter/jupyter.go before the kernel serves).

They add what E2B's code interpreter returns on top of IPython's formats:

- ``e2b/data``: a pandas DataFrame as JSON, ``{column: [values...]}``;
- ``PIL.Image.Image.save(path)`` also displays the image (a ``png`` result).

Nothing here may break a cell: every hook falls back to "no extra format".
"""

import datetime
import math
import sys

from IPython.core.formatters import BaseFormatter
from traitlets import ObjectName, Unicode


def install(shell):
    """Registers the formatters on shell and hooks PIL's save."""
    fmt = shell.display_formatter
    fmt.formatters["e2b/data"] = DataFormatter(parent=fmt)
    _hook_pil_save()


# ---------------------------------------------------------------- JSON values


def _jsonable(v):
    """A JSON-encodable form of one cell or point value."""
    if v is None or isinstance(v, (bool, str, int)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    pd = sys.modules.get("pandas")
    if pd is not None and v is pd.NaT:  # NaT is a datetime too
        return None
    if isinstance(v, (datetime.datetime, datetime.date, datetime.time)):
        return v.isoformat()
    np = sys.modules.get("numpy")
    if np is not None:
        if isinstance(v, np.datetime64):
            return None if np.isnat(v) else str(v.astype("datetime64[s]"))
        if isinstance(v, np.bool_):
            return bool(v)
        if isinstance(v, np.integer):
            return int(v)
        if isinstance(v, np.floating):
            return _jsonable(float(v))
    if pd is not None:
        try:
            if pd.isna(v):
                return None
        except (TypeError, ValueError):
            pass
    return str(v)


# ---------------------------------------------------------------- DataFrames


class DataFormatter(BaseFormatter):
    """``e2b/data``: a DataFrame as ``{column: [values]}`` (E2B's ``data``)."""

    format_type = Unicode("e2b/data")
    print_method = ObjectName("_repr_e2b_data_")
    _return_type = (dict,)

    def __call__(self, obj):
        pd = sys.modules.get("pandas")  # no DataFrame without pandas imported
        if pd is None or not isinstance(obj, pd.DataFrame):
            return super().__call__(obj)
        try:
            cols = obj.to_dict(orient="list")
            return {str(k): [_jsonable(v) for v in vals] for k, vals in cols.items()}
        except Exception:  # noqa: BLE001 - a format must never fail a cell
            return None


# ---------------------------------------------------------------- PIL


def _hook_pil_save():
    try:
        from PIL import Image
    except ImportError:
        return
    original = Image.Image.save
    if getattr(original, "_airlock_hook", False):
        return

    def save(self, fp, format=None, **params):  # noqa: A002 - PIL's name
        original(self, fp, format, **params)
        if isinstance(fp, (str, bytes)) or hasattr(fp, "__fspath__"):
            try:
                from IPython.display import display

                display(self)
            except Exception:  # noqa: BLE001
                pass

    save._airlock_hook = True
    save.__doc__ = original.__doc__
    Image.Image.save = save
