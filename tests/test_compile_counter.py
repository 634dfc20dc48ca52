"""The compile counter's attribution (tests/compile_counter.py): files, programs, table cases."""

from .compile_counter import _EVENT, TABLE_WIDE, WHOLE_TABLE, CompileCounter


def test_programs_count_for_their_case_and_table_wide_ones_for_the_whole_table():
    counter = CompileCounter(listen=False)
    counter.current_file, counter.current_case = "tests/test_generic.py", "adamw"
    for fun_name in ("jit(apply_step)", f"jit({TABLE_WIDE}quadratic)", "jit(add)", "jit(_where)"):
        counter._on_event(_EVENT, 0.5, fun_name=fun_name)
    counter._on_event("/jax/some/other/event", 1.0, fun_name="jit(apply_step)")
    assert counter.files == {"tests/test_generic.py": 4}  # eager operations are compilations
    assert counter.programs == {"tests/test_generic.py": 2}
    assert counter.cases == {"adamw": 1, WHOLE_TABLE: 1}
    assert counter.seconds["tests/test_generic.py"] == 2.0
