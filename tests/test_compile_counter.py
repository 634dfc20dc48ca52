"""The compile counter's attribution (tests/compile_counter.py): files, programs, table cases."""

from .compile_counter import _CACHE_HIT, _EVENT, TABLE_WIDE, WHOLE_TABLE, CompileCounter


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


def test_a_load_from_the_compilation_cache_counts_as_a_compilation_and_as_cached():
    counter = CompileCounter(listen=False)
    counter.current_file = "tests/test_step.py"
    counter._on_event(_EVENT, 2.0, fun_name="jit(apply_step)")
    counter._on_plain_event(_CACHE_HIT)
    counter._on_event(_EVENT, 0.1, fun_name="jit(apply_step)")
    counter._on_plain_event("/jax/compilation_cache/cache_misses")
    counter._on_event(_EVENT, 0.05, fun_name="jit(add)")
    assert counter.files == {"tests/test_step.py": 3}
    assert counter.cached == {"tests/test_step.py": 1}  # only the compile the hit preceded
    merged = CompileCounter(listen=False)
    merged.merge(counter.as_dict())
    merged.merge(counter.as_dict())
    assert merged.cached == {"tests/test_step.py": 2}
