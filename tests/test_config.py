from dataclasses import dataclass, field
from typing import Literal

import pytest

from genfeat.config import apply_overrides, from_dict, parse_overrides, to_dict
from genfeat.errors import ConfigError
from genfeat.runner import summarise


@dataclass
class Inner:
    lr: float = 1e-3
    cutoffs: list[int] = field(default_factory=list)
    mode: Literal["a", "b"] = "a"
    betas: tuple[float, float] = (0.9, 0.999)


@dataclass
class Outer:
    inner: Inner = field(default_factory=Inner)
    steps: int = 10
    name: str | None = None

    def __post_init__(self):
        if self.steps < 0:
            raise ValueError("steps must be >= 0")


def test_round_trip_and_coercion():
    cfg = from_dict(Outer, {"inner": {"lr": 1, "cutoffs": [2, 5], "betas": [0.8, 1]}, "steps": 3.0})
    assert cfg.inner.lr == 1.0 and isinstance(cfg.inner.lr, float)
    assert cfg.inner.betas == (0.8, 1.0)
    assert cfg.steps == 3 and isinstance(cfg.steps, int)
    assert from_dict(Outer, to_dict(cfg)) == cfg


@pytest.mark.parametrize("data, match", [
    ({"inner": {"lrr": 1}}, r"unknown config field 'inner.lrr'.*did you mean 'inner.lr'"),
    ({"steps": "many"}, r"'steps'.*expected an integer"),
    ({"steps": 2.5}, r"'steps'.*expected an integer"),
    ({"inner": {"cutoffs": [1, "x"]}}, r"'inner.cutoffs\[1\]'"),
    ({"inner": {"mode": "c"}}, r"'inner.mode'.*one of \['a', 'b'\]"),
    ({"inner": 3}, r"section 'inner'"),
    ({"steps": -1}, r"steps must be >= 0"),
    ({"steps": True}, r"'steps'"),
    ({"inner": {"betas": [0.9]}}, r"'inner.betas' needs 2 items"),
])
def test_bad_fields_name_the_path(data, match):
    with pytest.raises(ConfigError, match=match):
        from_dict(Outer, data)


def test_overrides_parse_yaml_scalars_and_nest():
    ov = parse_overrides(["--inner.lr", "3e-4", "--steps=7", "--inner.cutoffs", "[1, 2]", "--name", "null"])
    assert ov == {"inner.lr": 3e-4, "steps": 7, "inner.cutoffs": [1, 2], "name": None}
    data = apply_overrides({"inner": {"lr": 1.0}}, ov)
    cfg = from_dict(Outer, data)
    assert cfg.inner.lr == 3e-4 and cfg.inner.cutoffs == [1, 2] and cfg.steps == 7
    with pytest.raises(ConfigError, match="no value"):
        parse_overrides(["--steps"])
    with pytest.raises(ConfigError, match="unexpected argument"):
        parse_overrides(["steps"])


def test_summarise_mean_and_sample_std():
    s = summarise([{"acc": 0.5}, {"acc": 0.7}])
    assert s["acc_mean"] == pytest.approx(0.6)
    assert s["acc_std"] == pytest.approx(0.1414213, rel=1e-5)
