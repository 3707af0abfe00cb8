"""Issue 26 item 4 (helper branch `interp`): chart values keep their type. A
float tick that is whole stays a float (-1.0, not -1), and pie angles are
rounded as E2B's extractor rounds them (324, not 323.9999914)."""

from e2b_code_interpreter.charts import ChartType

LINE = """
import matplotlib.pyplot as plt
plt.figure()
plt.plot([-1.0, -0.5, 0.0, 0.5, 1.0], [1.0, 2.0, 3.0, 2.0, 1.0], label='a')
plt.xticks([-1.0, -0.5, 0.0, 0.5, 1.0])
plt.title('ticks')
plt.show()
"""

PIE = """
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(8, 8))
ax.pie([90, 10], labels=["No", "No, in blue"], autopct='%1.1f%%', startangle=90)
ax.axis('equal')
plt.title('Will I wake up early tomorrow?')
plt.show()
"""


def test_line_chart_float_ticks_stay_floats(interpreter):
    ex = interpreter.run_code(LINE)
    assert ex.error is None, ex.error
    chart = ex.results[0].chart
    assert chart is not None and chart.type == ChartType.LINE
    assert chart.x_ticks, chart.x_ticks
    assert all(isinstance(x, float) for x in chart.x_ticks), chart.x_ticks
    assert all(isinstance(y, float) for y in chart.y_ticks), chart.y_ticks
    assert -1.0 in chart.x_ticks
    for el in chart.elements:
        assert all(isinstance(x, float) and isinstance(y, float) for x, y in el.points), el.points


def test_pie_angles_rounded_like_e2b(interpreter):
    ex = interpreter.run_code(PIE)
    assert ex.error is None, ex.error
    chart = ex.results[0].chart
    assert chart is not None and chart.type == ChartType.PIE
    assert [e.label for e in chart.elements] == ["No", "No, in blue"]
    assert chart.elements[0].angle == 324
    assert chart.elements[1].angle == 36
    assert chart.elements[0].radius == 1
