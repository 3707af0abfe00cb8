"""Issue 26 item 7 (helper branch `kernels`): R and Java contexts, as E2B's
code-interpreter template has them (they answered 400 "unsupported
language")."""


def test_r(interpreter):
    ex = interpreter.run_code("x <- c(1, 2, 3)\nsum(x)", language="r")
    assert ex.error is None, ex.error
    assert ex.results[0].text.strip() == "[1] 6"
    ex = interpreter.run_code("Sys.getenv('FOO')", language="r", envs={"FOO": "bar"})
    assert ex.results[0].text.strip() == '[1] "bar"'


def test_java(interpreter):
    ex = interpreter.run_code("int a = 40;\na + 2", language="java")
    assert ex.error is None, ex.error
    assert ex.results[0].text.strip() == "42"
