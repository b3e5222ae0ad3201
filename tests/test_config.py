import dataclasses
import importlib
import pkgutil
import typing
from dataclasses import dataclass, field
from typing import Literal

import pytest
import yaml

from genfeat.config import Config, apply_overrides, dotted, from_dict, load_yaml, parse_overrides, to_dict
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


@dataclass
class Schedule:
    log_every: int = 1


@dataclass
class Nested:
    sub: Inner = field(default_factory=Inner)


@dataclass
class TwoSections:
    optim: Inner = field(default_factory=Inner)
    train: Schedule = field(default_factory=Schedule)
    late: Schedule = field(default_factory=Schedule)
    deep: Nested = field(default_factory=Nested)
    spare: Schedule | None = None


def test_a_field_in_the_wrong_section_names_the_section_that_has_it():
    """``train.lr`` (DESIGN.md's own example of a flag) is optim.lr in every genfeat recipe: the error says so."""
    with pytest.raises(ConfigError, match=r"unknown config field 'train.lr'. fix: 'lr' is a field of another section: "
                                          r"did you mean 'optim.lr'\?$"):
        from_dict(TwoSections, {"train": {"lr": 1}})
    with pytest.raises(ConfigError, match=r"'optim.log_every'.*did you mean 'train.log_every' or 'late.log_every' or "
                                          r"'spare.log_every'\?$"):
        from_dict(TwoSections, {"optim": {"log_every": 1}})
    # a near spelling in the section itself wins; a name no section has lists the section's fields
    with pytest.raises(ConfigError, match=r"'train.log_evry'. fix: did you mean 'train.log_every'\?$"):
        from_dict(TwoSections, {"train": {"log_evry": 1}})
    with pytest.raises(ConfigError, match=r"'train.zzz'. fix: known fields of Schedule: log_every$"):
        from_dict(TwoSections, {"train": {"zzz": 1}})
    # two sections deep, the top level's sections are not its siblings: no suggestion from them
    with pytest.raises(ConfigError, match=r"'deep.sub.log_every'. fix: known fields of Inner: betas, cutoffs, lr, mode$"):
        from_dict(TwoSections, {"deep": {"sub": {"log_every": 1}}})


def test_an_optional_section_is_checked_as_a_section():
    """A ``Section | None`` field (finetune's ``pretrain``) names the field inside it that is wrong, as a plain
    section does, not only that the whole value is not a Section or null."""
    assert from_dict(TwoSections, {"spare": {"log_every": 3}}).spare == Schedule(3)
    assert from_dict(TwoSections, {"spare": None}).spare is None
    with pytest.raises(ConfigError, match=r"unknown config field 'spare.log_evry'. fix: did you mean 'spare.log_every'\?$"):
        from_dict(TwoSections, {"spare": {"log_evry": 1}})
    with pytest.raises(ConfigError, match=r"'spare.log_every' has value 'x', expected an integer"):
        from_dict(TwoSections, {"spare": {"log_every": "x"}})
    with pytest.raises(ConfigError, match=r"unknown config field 'spare.lr'. fix: 'lr' is a field of another section: "
                                          r"did you mean 'optim.lr'\?$"):
        from_dict(TwoSections, {"spare": {"lr": 1}})
    with pytest.raises(ConfigError, match=r"'spare' has value 3, expected Schedule \| null"):
        from_dict(TwoSections, {"spare": 3})


def test_overrides_parse_yaml_scalars_and_nest():
    ov = parse_overrides(["--inner.lr", "3e-4", "--steps=7", "--inner.cutoffs", "[1, 2]", "--name", "null"])
    assert ov == {"inner.lr": 3e-4, "steps": 7, "inner.cutoffs": [1, 2], "name": None}
    # an empty value is the empty string (a field's "none"), not YAML's null
    assert parse_overrides(["--name", "", "--other=", "--third", "~"]) == {"name": "", "other": "", "third": None}
    data = apply_overrides({"inner": {"lr": 1.0}}, ov)
    cfg = from_dict(Outer, data)
    assert cfg.inner.lr == 3e-4 and cfg.inner.cutoffs == [1, 2] and cfg.steps == 7
    with pytest.raises(ConfigError, match="no value"):
        parse_overrides(["--steps"])
    with pytest.raises(ConfigError, match="unexpected argument"):
        parse_overrides(["steps"])


@dataclass
class Method:
    inner: Inner = field(default_factory=lambda: Inner(lr=0.5, mode="b"))
    steps: int = 10


def test_an_override_of_an_unwritten_section_keeps_the_methods_defaults_for_it():
    # the recipe writes no 'inner': --inner.lr changes one field of the method's default section
    cfg = from_dict(Method, apply_overrides({"steps": 3}, {"inner.lr": 0.1}))
    assert cfg.inner == Inner(lr=0.1, mode="b") and cfg.steps == 3
    # a section the recipe writes keeps the method's defaults too, for the fields it leaves out
    cfg = from_dict(Method, apply_overrides({"inner": {"cutoffs": [4]}}, {"inner.lr": 0.1}))
    assert cfg.inner == Inner(lr=0.1, cutoffs=[4], mode="b")


@dataclass
class Deep:
    method: Method = field(default_factory=lambda: Method(inner=Inner(lr=0.25, mode="b", cutoffs=[7]), steps=4))
    spare: Method | None = None


def test_a_written_section_keeps_its_default_for_the_fields_it_leaves_out():
    """``train: {eval_every: 500}`` in a recipe changes one field of the method's own ``train`` (device, threads
    and the rest stay the method's), as ``--train.eval_every 500`` does; the section class's bare defaults are
    only for a section whose parent gives it none."""
    assert from_dict(Method, {"inner": {"lr": 0.1}}).inner == Inner(lr=0.1, mode="b")
    assert from_dict(Method, {"inner": {"mode": "a"}}).inner == Inner(lr=0.5, mode="a")
    # two sections deep: the inner section's default is the one its parent's default holds
    cfg = from_dict(Deep, {"method": {"inner": {"lr": 0.1}}})
    assert cfg.method == Method(inner=Inner(lr=0.1, mode="b", cutoffs=[7]), steps=4)
    assert from_dict(Deep, {"method": {"steps": 9}}).method == Method(inner=Inner(lr=0.25, mode="b", cutoffs=[7]),
                                                                      steps=9)
    # an optional section defaulting to None has no default to keep: the class's own defaults
    assert from_dict(Deep, {"spare": {"steps": 2}}).spare == Method(steps=2)
    # a list or mapping value is replaced whole, not merged
    assert from_dict(Deep, {"method": {"inner": {"cutoffs": [1]}}}).method.inner.cutoffs == [1]
    # the defaults are fresh instances each time: a built config never shares a mutable default with another
    a, b = from_dict(Deep, {"method": {"steps": 1}}), from_dict(Deep, {"method": {"steps": 2}})
    a.method.inner.cutoffs.append(3)
    assert b.method.inner.cutoffs == [7]


def test_nested_overrides_are_merged_into_the_sections_they_name():
    ov = dotted({"steps": 3, "inner": {"lr": 0.1}, "inner.mode": "b", "empty": {}})
    assert ov == {"steps": 3, "inner.lr": 0.1, "inner.mode": "b"}
    cfg = from_dict(Method, apply_overrides({"inner": {"cutoffs": [4]}}, ov))
    assert cfg.inner == Inner(lr=0.1, cutoffs=[4], mode="b") and cfg.steps == 3


def test_a_mapping_override_is_merged_into_the_section_not_set_whole():
    recipe = {"inner": {"lr": 0.5, "cutoffs": [4]}, "steps": 3}
    ov = parse_overrides(["--inner", "{mode: b, betas: [0.8, 0.9]}"])
    cfg = from_dict(Method, apply_overrides(recipe, ov))
    assert cfg.inner == Inner(lr=0.5, cutoffs=[4], mode="b", betas=(0.8, 0.9)) and cfg.steps == 3
    # the same as the dotted overrides, and a section the recipe does not write starts from the method's default
    assert apply_overrides(recipe, ov) == apply_overrides(recipe, {"inner.mode": "b",
                                                                           "inner.betas": [0.8, 0.9]})
    assert from_dict(Method, apply_overrides({}, {"inner": {"lr": 0.1}})).inner == Inner(lr=0.1, mode="b")
    # a value that is not a mapping, for a section, is still refused
    with pytest.raises(ConfigError, match="config section 'inner' has value 8, expected a mapping"):
        from_dict(Method, apply_overrides(recipe, parse_overrides(["--inner", "8"])))


def test_a_recipe_that_is_not_utf8_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_bytes(b"\xff\xfem\x00e\x00t\x00")
    with pytest.raises(ConfigError, match=r"'.*r\.yaml' is not UTF-8 text \(byte 0xff at offset 0\)"):
        load_yaml(path)


def test_a_key_written_twice_is_refused_naming_the_key_and_file(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("method: transformer_xl\nsteps: 2\nmodel: {d_model: 8}\nsteps: 3\n")
    with pytest.raises(ConfigError, match=r"'.*r\.yaml' writes key 'steps' twice in one mapping \(lines 2 and 4\)"):
        load_yaml(path)
    path.write_text("model: {d_model: 8, n_layer: 2, d_model: 16}\n")
    with pytest.raises(ConfigError, match="writes key 'd_model' twice in one mapping \\(line 1\\)"):
        load_yaml(path)
    with pytest.raises(ConfigError, match="writes key 'lr' twice"):
        parse_overrides(["--train", "{lr: 1, lr: 2}"])
    # YAML merge keys may still be overridden
    path.write_text("base: &b {lr: 1, steps: 2}\ntrain:\n  <<: *b\n  lr: 3\n")
    assert load_yaml(path)["train"] == {"lr": 3, "steps": 2}
    # also a merging mapping that another one merges in turn (PyYAML flattens it in place before its own turn)
    path.write_text("base: &b {lr: 1, wd: 2}\na: {x: &x {<<: *b, lr: 3}}\ny: {<<: *x}\n")
    assert load_yaml(path) == yaml.safe_load(path.read_text()) == {
        "base": {"lr": 1, "wd": 2}, "a": {"x": {"lr": 3, "wd": 2}}, "y": {"lr": 3, "wd": 2}}


def test_summarise_mean_sample_std_and_median():
    s = summarise([{"acc": 0.5}, {"acc": 0.7}, {"acc": 0.9}, {"acc": 0.55}])
    assert s["acc_mean"] == pytest.approx(0.6625)
    assert s["acc_std"] == pytest.approx(0.1796988, rel=1e-5)
    assert s["acc_median"] == pytest.approx(0.625)
    assert summarise([{"f1": 0.1}, {"f1": 0.9}, {"f1": 0.2}])["f1_median"] == pytest.approx(0.2)
    # a figure some seeds lack is not summarised over the others; the order is the first run's
    both = summarise([{"loss": 1.0, "acc": 0.5, "extra": 3.0}, {"acc": 0.7, "loss": 3.0}])
    assert list(both) == ["loss_mean", "loss_std", "loss_median", "acc_mean", "acc_std", "acc_median"]


def config_classes() -> list[type]:
    """Every dataclass of the package that is a config: named *Config or *Recipe, or with a Literal
    field (found by importing every module, so a new config cannot escape the tests below)."""
    import genfeat

    found = {}
    for info in pkgutil.walk_packages(genfeat.__path__, "genfeat."):
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if not (dataclasses.is_dataclass(obj) and isinstance(obj, type) and obj.__module__.startswith("genfeat.")):
                continue
            hints = typing.get_type_hints(obj)
            literal = any(typing.get_origin(hints[f.name]) is Literal for f in dataclasses.fields(obj))
            if obj.__name__.endswith(("Config", "Recipe")) or literal or issubclass(obj, Config):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return [found[k] for k in sorted(found)]


CONFIGS = config_classes()


def typed_fields(literal: bool) -> list[tuple[type, str, typing.Any]]:
    out = []
    for cls in CONFIGS:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.init and hints[f.name] is not typing.Any and (typing.get_origin(hints[f.name]) is Literal) == literal:
                out.append(pytest.param(cls, f.name, hints[f.name], id=f"{cls.__name__}.{f.name}"))
    return out


def test_the_config_classes_are_found_and_derive_from_config():
    names = {cls.__name__ for cls in CONFIGS}
    assert {"TrainConfig", "OptimConfig", "TransformerXLConfig", "VocabConfig", "TransformerXLRecipe",
            "PlanetoidRecipe", "GraphBaselineRecipe", "LMDataConfig", "LMEvalConfig"} <= names
    assert [cls.__name__ for cls in CONFIGS if not issubclass(cls, Config)] == [], \
        "derive every config dataclass from genfeat.config.Config, so its fields are checked"


@pytest.mark.parametrize("cls, name, tp", typed_fields(literal=True))
def test_a_misspelt_literal_is_refused_in_python_naming_the_field(cls, name, tp):
    values = typing.get_args(tp)
    misspelt = next(str(v)[:-1] for v in values if str(v)[:-1] not in values)  # 'relativ', not 'adam'
    with pytest.raises(ConfigError, match=rf"'{cls.__name__}\.{name}' has value '{misspelt}', expected one of"):
        cls(**{name: misspelt})


@pytest.mark.parametrize("cls, name, tp", typed_fields(literal=False))
def test_a_value_of_another_type_is_refused_in_python_naming_the_field(cls, name, tp):
    with pytest.raises(ConfigError, match=rf"'{cls.__name__}\.{name}' has value <object"):
        cls(**{name: object()})


def test_fields_are_checked_before_the_class_checks_and_converted_like_yaml():
    from genfeat.framework import OptimConfig, TrainConfig
    from genfeat.models.transformer_xl import TransformerXLConfig

    # without the field check first, TrainConfig's own check fails with a TypeError ('<' on a str)
    with pytest.raises(ConfigError, match=r"'TrainConfig\.grad_accum' has value '2', expected an integer"):
        TrainConfig(grad_accum="2")
    with pytest.raises(ConfigError, match=r"'TrainConfig\.keep_best' has value 1, expected true or false"):
        TrainConfig(keep_best=1, early_stop_metric="acc")
    cfg = TransformerXLConfig(n_token=20, cutoffs=(5, 10), d_model=8, dropout=0)
    assert cfg.cutoffs == [5, 10] and isinstance(cfg.dropout, float)
    assert OptimConfig(betas=[0.8, 0.9]).betas == (0.8, 0.9)
    with pytest.raises(ConfigError, match=r"'TransformerXLConfig\.cutoffs\[1\]' has value 'x'"):
        TransformerXLConfig(cutoffs=[5, "x"])
