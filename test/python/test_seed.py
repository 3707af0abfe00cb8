"""The seed scenario: upload a CSV, run pandas in the code interpreter, read
the result back (sync and async)."""

import e2b_code_interpreter

CSV = "city,sales\nOslo,10\nBergen,5\nOslo,7\nTromso,3\nBergen,1\n"
CODE = """
import pandas as pd
df = pd.read_csv('/home/user/sales.csv')
out = df.groupby('city')['sales'].sum().sort_index()
out.to_csv('/home/user/totals.csv')
out.to_dict()
"""


def test_csv_groupby(interpreter):
    interpreter.files.write("/home/user/sales.csv", CSV)
    ex = interpreter.run_code(CODE)
    assert ex.error is None, ex.error
    assert ex.results[0].text == "{'Bergen': 6, 'Oslo': 17, 'Tromso': 3}"
    assert interpreter.files.read("/home/user/totals.csv") == "city,sales\nBergen,6\nOslo,17\nTromso,3\n"
    # State is kept between cells.
    assert interpreter.run_code("len(df)").text == "5"


async def test_csv_groupby_async():
    sbx = await e2b_code_interpreter.AsyncSandbox.create(timeout=600)
    try:
        await sbx.files.write("/home/user/sales.csv", CSV)
        ex = await sbx.run_code(CODE)
        assert ex.error is None, ex.error
        assert ex.results[0].text == "{'Bergen': 6, 'Oslo': 17, 'Tromso': 3}"
    finally:
        await sbx.kill()
