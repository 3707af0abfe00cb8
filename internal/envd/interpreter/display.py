"""Airlock's display hooks for the Python kernel (loaded by the kernel
launcher in internal/envd/interpreter/jupyter.go before the kernel serves).

They add what E2B's code interpreter returns on top of IPython's formats:

- ``e2b/data``: a pandas DataFrame as JSON, ``{column: [values...]}``;
- ``e2b/chart``: a matplotlib Figure as structured chart data, in the shape of
  the ``Chart`` types of ``@e2b/code-interpreter`` (LineChart, ScatterChart,
  BarChart, PieChart, BoxAndWhiskerChart, SuperChart; ``unknown`` otherwise);
- ``PIL.Image.Image.save(path)`` also displays the image (a ``png`` result).

Nothing here may break a cell: every hook falls back to "no extra format".
"""

import datetime
import decimal
import math
import re
import sys

from IPython.core.formatters import BaseFormatter
from traitlets import ObjectName, Unicode


def install(shell):
    """Registers the formatters on shell and hooks PIL's save."""
    fmt = shell.display_formatter
    fmt.formatters["e2b/data"] = DataFormatter(parent=fmt)
    fmt.formatters["e2b/chart"] = ChartFormatter(parent=fmt)
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


# ---------------------------------------------------------------- charts


class ChartFormatter(BaseFormatter):
    """``e2b/chart``: a matplotlib Figure as chart data (E2B's ``chart``)."""

    format_type = Unicode("e2b/chart")
    print_method = ObjectName("_repr_e2b_chart_")
    _return_type = (dict,)

    def __call__(self, obj):
        if sys.modules.get("matplotlib") is None:
            return super().__call__(obj)
        from matplotlib.figure import Figure

        if not isinstance(obj, Figure):
            return super().__call__(obj)
        try:
            return figure_chart(obj)
        except Exception:  # noqa: BLE001 - unreadable: an unknown chart
            try:
                return _base("unknown", _title_of_figure(obj))
            except Exception:  # noqa: BLE001
                return None


def figure_chart(fig):
    """The chart dict of a figure; None for a figure without data."""
    axes = [ax for ax in fig.get_axes() if ax.has_data()]
    if not axes:
        return None
    if fig.canvas is not None and _needs_draw(axes):
        fig.draw_without_rendering()  # tick labels are set at draw time
    if len(fig.get_axes()) > 1:
        chart = _base("superchart", _title_of_figure(fig))
        chart["elements"] = [axes_chart(ax) for ax in fig.get_axes()]
        return chart
    return axes_chart(axes[0])


def _needs_draw(axes):
    for ax in axes:
        for labels in (ax.get_xticklabels(), ax.get_yticklabels()):
            if labels and not any(t.get_text() for t in labels):
                return True
    return False


def _title_of_figure(fig):
    st = getattr(fig, "_suptitle", None)
    return (st.get_text() or None) if st is not None else None


def _base(kind, title):
    return {"type": kind, "title": title or None, "elements": []}


def axes_chart(ax):
    """The chart of one axes; ``unknown`` (with its title) for other plots."""
    kind = _kind(ax)
    try:
        if kind == "line":
            return _point_chart(ax, "line", _line_elements)
        if kind == "scatter":
            return _point_chart(ax, "scatter", _scatter_elements)
        if kind == "bar":
            return _bar_chart(ax)
        if kind == "pie":
            return _pie_chart(ax)
        if kind == "box_and_whisker":
            return _box_chart(ax)
    except Exception:  # noqa: BLE001
        pass
    return _base("unknown", ax.get_title())


def _children(ax):
    from matplotlib.text import Text

    kids = getattr(ax, "_children", None)
    if kids is None:
        kids = list(ax.lines) + list(ax.collections) + list(ax.patches) + list(ax.images)
    return [k for k in kids if not isinstance(k, Text)]


def _is_grid_line(line):
    x, y = line.get_xdata(), line.get_ydata()
    if len(x) != 2 or len(y) != 2:
        return False
    return x[0] == x[1] or y[0] == y[1]


def _kind(ax):
    from matplotlib.collections import PathCollection
    from matplotlib.lines import Line2D
    from matplotlib.patches import PathPatch, Rectangle, Wedge

    kids = _children(ax)
    if _box_shapes(ax) and all(isinstance(k, (Line2D, PathPatch)) for k in kids):
        return "box_and_whisker"
    if all(isinstance(k, Line2D) for k in kids):
        return "line"
    kids = [k for k in kids if not (isinstance(k, Line2D) and _is_grid_line(k))]
    if not kids:
        return "unknown"
    if all(isinstance(k, PathCollection) for k in kids):
        return "scatter"
    if all(isinstance(k, Wedge) for k in kids):
        return "pie"
    if all(isinstance(k, Rectangle) for k in kids):
        return "bar"
    return "unknown"


# -- 2D charts: labels, units, ticks, scales

_UNIT = re.compile(r"\s\((.*?)\)|\[(.*?)\]")


def _unit(label):
    if not label:
        return None
    m = _UNIT.search(label)
    return (m.group(1) or m.group(2)) if m else None


def _chart2d(ax, kind):
    chart = _base(kind, ax.get_title())
    xl, yl = ax.get_xlabel() or None, ax.get_ylabel() or None
    chart.update(x_label=xl, y_label=yl, x_unit=_unit(xl), y_unit=_unit(yl))
    return chart


def _swap_axes(chart):
    for a, b in (("x_label", "y_label"), ("x_unit", "y_unit")):
        chart[a], chart[b] = chart[b], chart[a]


def _converter(axis):
    get = getattr(axis, "get_converter", None)
    return get() if get is not None else getattr(axis, "converter", None)


def _is_date_axis(axis):
    import matplotlib.dates as mdates

    kinds = tuple(
        getattr(mdates, n)
        for n in ("DateConverter", "ConciseDateConverter", "_SwitchableDateConverter")
        if hasattr(mdates, n)
    )
    return isinstance(_converter(axis), kinds)


def _scale(axis, scale_name):
    """E2B's ScaleType of an axis: datetime, categorical or matplotlib's scale."""
    from matplotlib.category import StrCategoryConverter

    if _is_date_axis(axis):
        return "datetime"
    if scale_name != "linear":
        return scale_name  # log, symlog, logit, function, functionlog, asinh
    if isinstance(_converter(axis), StrCategoryConverter):
        return "categorical"
    return "linear"


def _ticks(axis, values):
    if _is_date_axis(axis):
        import matplotlib.dates as mdates

        return [mdates.num2date(v).isoformat() for v in values]
    return [_jsonable(float(v)) for v in values]


def _point_chart(ax, kind, elements):
    chart = _chart2d(ax, kind)
    for name, axis, labels, ticks, scale in (
        ("x", ax.xaxis, ax.get_xticklabels(), ax.get_xticks(), ax.get_xscale()),
        ("y", ax.yaxis, ax.get_yticklabels(), ax.get_yticks(), ax.get_yscale()),
    ):
        chart[name + "_ticks"] = _ticks(axis, ticks)
        chart[name + "_tick_labels"] = [t.get_text() for t in labels]
        chart[name + "_scale"] = _scale(axis, scale)
    chart["elements"] = elements(ax)
    return chart


def _series_label(label, prefix, word):
    if label.startswith(prefix) and label[len(prefix):].isdigit():
        return "%s %d" % (word, int(label[len(prefix):]))
    return label


def _point(v):
    """A point coordinate as E2B's PointData has it: a date as ISO text, a
    number as a float (an int 3 is 3.0, as pydantic's float makes it)."""
    if isinstance(v, (bool, str)) or v is None:
        return _jsonable(v)
    if isinstance(v, int):
        return float(v)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(v, (np.integer, np.floating)):
        return _jsonable(float(v))
    return _jsonable(v)


def _line_elements(ax):
    out = []
    for line in ax.get_lines():
        if _is_grid_line(line):
            continue
        xs, ys = line.get_xdata(), line.get_ydata()
        out.append({
            "label": _series_label(str(line.get_label()), "_child", "Line"),
            "points": [[_point(x), _point(y)] for x, y in zip(xs, ys)],
        })
    return out


def _scatter_elements(ax):
    xdate, ydate = _is_date_axis(ax.xaxis), _is_date_axis(ax.yaxis)

    def coord(v, is_date):
        if is_date:
            import matplotlib.dates as mdates

            return mdates.num2date(float(v)).isoformat()
        return _jsonable(float(v))

    out = []
    for coll in ax.collections:
        offsets = coll.get_offsets()
        out.append({
            "label": str(coll.get_label()),
            "points": [[coord(p[0], xdate), coord(p[1], ydate)] for p in offsets],
        })
    return out


# -- bars


def _tick_label_at(ticks, labels, pos):
    for t, lab in zip(ticks, labels):
        if abs(float(t) - pos) < 1e-9:
            return lab.get_text()
    return "%g" % pos


def _bar_chart(ax):
    chart = _chart2d(ax, "bar")
    horizontal = None
    for i, cont in enumerate(ax.containers):
        rects = [r for r in cont if hasattr(r, "get_height")]
        if not rects:
            continue
        orient = getattr(cont, "orientation", None)
        if orient is None:  # older matplotlib: bars of one width are barh
            orient = "horizontal" if len({r.get_height() for r in rects}) == 1 and len(rects) > 1 else "vertical"
        horizontal = orient == "horizontal"
        group = _series_label(str(cont.get_label()), "_container", "Group")
        values = getattr(cont, "datavalues", None)
        if horizontal:
            ticks, labels = ax.get_yticks(), ax.get_yticklabels()
            pos = [r.get_y() + r.get_height() / 2 for r in rects]
            size = [r.get_width() for r in rects]
        else:
            ticks, labels = ax.get_xticks(), ax.get_xticklabels()
            pos = [r.get_x() + r.get_width() / 2 for r in rects]
            size = [r.get_height() for r in rects]
        if values is None or len(values) != len(rects):
            values = size
        for p, v in zip(pos, values):
            chart["elements"].append({"label": _tick_label_at(ticks, labels, p), "group": group, "value": _jsonable(float(v))})
    if horizontal:
        _swap_axes(chart)  # x_label names the categories, as in E2B
    return chart


# -- pie


def _round(v):
    """E2B's extractor rounding (e2b_charts.utils.rounding.dynamic_round):
    max(1, 8 - exponent) significant digits (323.9999914 -> 324.0,
    0.000123456789 kept); a float."""
    d = decimal.Decimal(str(v))
    with decimal.localcontext() as ctx:
        ctx.prec = max(1, 8 - d.adjusted())
        return float(+d)


def _pie_chart(ax):
    chart = _base("pie", ax.get_title())
    for w in ax.patches:
        # As E2B: the exact difference of the two angles, then rounded
        # (a wedge of 323.9999914 degrees is 324.0); the radius as is.
        span = decimal.Decimal(float(w.theta2)) - decimal.Decimal(float(w.theta1))
        chart["elements"].append({
            "label": str(w.get_label()),
            "angle": abs(_round(span)),
            "radius": float(w.r),
        })
    return chart


# -- box and whisker


def _rect_of(xs, ys):
    """(x0, x1, y0, y1) when the points outline an axis-aligned rectangle."""
    if len(xs) < 4 or len(set(map(float, xs))) != 2 or len(set(map(float, ys))) != 2:
        return None
    return min(xs), max(xs), min(ys), max(ys)


def _box_shapes(ax):
    """The boxes of a boxplot: PathPatch boxes (patch_artist=True) or closed
    5-point Line2D outlines (the default); [] when there are none."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import PathPatch

    boxes = []
    for k in _children(ax):
        if isinstance(k, PathPatch):
            v = k.get_path().vertices
            r = _rect_of(list(v[:, 0]), list(v[:, 1]))
        elif isinstance(k, Line2D) and len(k.get_xdata()) == 5:
            xs, ys = list(k.get_xdata()), list(k.get_ydata())
            r = _rect_of(xs, ys) if (xs[0], ys[0]) == (xs[-1], ys[-1]) else None
        else:
            continue
        if r is None:
            return []
        boxes.append((k, r))
    return boxes


def _box_chart(ax):
    chart = _chart2d(ax, "box_and_whisker")
    boxes = _box_shapes(ax)
    box_artists = {id(k) for k, _ in boxes}
    # Vertical boxes (the default) have vertical whiskers and horizontal
    # caps and medians; horizontal ones the other way round.
    upright = flat = 0
    for line in ax.get_lines():
        xs, ys = line.get_xdata(), line.get_ydata()
        if id(line) in box_artists or len(xs) != 2 or line.get_linestyle() in ("None", "none", "", " "):
            continue
        upright += xs[0] == xs[1]
        flat += ys[0] == ys[1]
    vertical = upright <= flat
    if vertical:
        ticks, labels = ax.get_xticks(), ax.get_xticklabels()
    else:
        ticks, labels = ax.get_yticks(), ax.get_yticklabels()
        _swap_axes(chart)
    segments = []
    for line in ax.get_lines():
        if id(line) in box_artists:
            continue
        xs, ys = [float(v) for v in line.get_xdata()], [float(v) for v in line.get_ydata()]
        if not vertical:
            xs, ys = ys, xs
        segments.append((line, xs, ys))
    for _, (x0, x1, y0, y1) in boxes:
        if not vertical:
            x0, x1, y0, y1 = y0, y1, x0, x1
        el = {
            "label": _tick_label_at(ticks, labels, (x0 + x1) / 2),
            "min": _round(y0), "first_quartile": _round(y0), "median": _round((y0 + y1) / 2),
            "third_quartile": _round(y1), "max": _round(y1), "outliers": [],
        }
        for line, xs, ys in segments:
            if not xs or not all(x0 - 1e-9 <= x <= x1 + 1e-9 for x in xs):
                continue
            if line.get_linestyle() in ("None", "none", "", " "):
                el["outliers"].extend(_round(y) for y in ys)  # fliers
            elif len(xs) == 2 and ys[0] == ys[1] and y0 <= ys[0] <= y1:
                el["median"] = _round(ys[0])
            elif len(xs) == 2 and xs[0] == xs[1]:  # a whisker
                lo, hi = min(ys), max(ys)
                if abs(hi - y0) < 1e-9:
                    el["min"] = _round(lo)
                elif abs(lo - y1) < 1e-9:
                    el["max"] = _round(hi)
        chart["elements"].append(el)
    return chart
