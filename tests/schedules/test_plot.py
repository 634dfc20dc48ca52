"""`gradtx.schedules.plot`: files, one line per schedule with the right values, missing extra."""

from __future__ import annotations

import sys

import numpy as np
import optax
import pytest

from gradtx import schedules as S

from .common import curve

pytestmark = pytest.mark.across_versions  # the version lanes of `make test` run this file


def test_plot_writes_png_with_one_line_per_schedule(tmp_path):
    schedules = {
        "cosine": S.warmup_cosine_decay(0.0, 1.0, 10, 100),
        "step": S.multistep(1.0, 0.5, [30, 60]),
        "optax linear": optax.linear_schedule(1.0, 0.0, 80),
    }
    path = tmp_path / "curves.png"
    fig = S.plot(schedules, 120, path, title="lr")
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000
    (ax,) = fig.axes
    lines = ax.get_lines()
    assert [line.get_label() for line in lines] == list(schedules)
    steps = np.arange(120)
    for line, schedule in zip(lines, schedules.values(), strict=True):
        np.testing.assert_array_equal(line.get_xdata(), steps)
        np.testing.assert_allclose(line.get_ydata(), curve(schedule, steps), rtol=1e-6)
    assert ax.get_title() == "lr"


def test_plot_svg_list_and_explicit_steps(tmp_path):
    steps = np.array([0, 5, 10, 2**40])  # saturates to the int32 range
    path = tmp_path / "curves.svg"
    fig = S.plot([S.linear(1.0, 0.0, 10), S.constant(0.5)], steps, str(path), log_scale=True)
    assert b"<svg" in path.read_bytes()
    lines = fig.axes[0].get_lines()
    assert [line.get_label() for line in lines] == ["linear", "constant"]
    np.testing.assert_allclose(lines[0].get_ydata(), [1.0, 0.5, 0.0, 0.0])
    assert fig.axes[0].get_yscale() == "log"


def test_plot_single_schedule_without_path():
    fig = S.plot(S.cyclic(0.1, 1.0, 4), 20)
    (line,) = fig.axes[0].get_lines()
    assert line.get_label() == "cyclic" and len(line.get_ydata()) == 20


def test_plot_names_the_extra_when_matplotlib_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r"pip install 'gradtx\[plot\]'"):
        S.plot(S.constant(1.0), 10)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(schedules={}, steps=10), "empty"),
        (dict(schedules=3.0, steps=10), "schedules must be"),
        (dict(schedules={"a": 1.0}, steps=10), "not callable"),
        (dict(schedules=S.constant(1.0), steps=0), "steps must be >= 1"),
        (dict(schedules=S.constant(1.0), steps=[[1, 2]]), "1-D"),
        (dict(schedules=S.constant(1.0), steps=10, path="out.jpeg"), r"\.png"),
    ],
)
def test_plot_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        S.plot(**kwargs)
