"""Learning rates at steps beyond int32: `learning_rate_at` saturates the step, and `describe`
shows the saturated value."""

from __future__ import annotations

import numpy as np

from gradtx import config as gc

from .shared import LINEAR


def test_learning_rate_at_saturates_steps_at_int32_max():
    tx = gc.from_config(
        {"optimizer": {"name": "sgd", "learning_rate": {**LINEAR, "transition_steps": 10}}}
    )
    assert float(tx.learning_rate_at(2**31)) == 0.0  # not the initial value (a wrapped step)
    assert float(tx.learning_rate_at(10**30)) == 0.0
    assert float(tx.learning_rate_at(np.uint64(2**63))) == 0.0
    np.testing.assert_array_equal(tx.learning_rate_at([0, 5, 2**40]), [1.0, 0.5, 0.0])
    np.testing.assert_allclose(tx.learning_rate_at(np.arange(3)), [1.0, 0.9, 0.8], rtol=1e-6)
    assert tx.learning_rate_at(np.zeros((2, 3), np.int64)).shape == (2, 3)


def test_describe_shows_the_saturated_value_for_huge_steps(tmp_path, capsys):
    from gradtx.__main__ import main

    path = tmp_path / "lin.yaml"
    path.write_text(
        "optimizer:\n  name: sgd\n  learning_rate: {name: linear_schedule, init_value: 1.0, "
        "end_value: 0.0, transition_steps: 10}\n"
    )
    assert main(["describe", str(path), "--at", f"0,{2**31},{10**30}"]) == 0
    out = capsys.readouterr().out
    rows = dict(line.split()[:2] for line in out.split("learning rate:")[1].splitlines()[3:6])
    assert rows == {"0": "1", str(2**31): "0", str(10**30): "0"}
    assert "2**31 - 1" in out
