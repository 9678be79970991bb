"""Every parameter has one home (dpsynth.params): the library, the commands, the worker's
settings and docs/settings.md are checked against its declaration, so none can drift."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import click
import pytest

from dpsynth.cli import main
from dpsynth.cli.options import DeclaredType
from dpsynth.errors import ConfigError
from dpsynth.online.mechanism import AUTO, MECHANISMS
from dpsynth.online.synthesizer import OnlineSynthesizer
from dpsynth.params import PARAMS, PREFIX, REQUIRED, MechanismName, Param, settings_table
from dpsynth.settings import WorkerSettings
from dpsynth.stream.settings import WorkerConfig
from dpsynth.tabular.domain import Domain
from dpsynth.tabular.synthesizer import TabularSynthesizer

ROOT = Path(__file__).resolve().parents[2]
KEY = bytes(range(32))
#: DPSYNTH_* variables that are not parameters: the worker's configuration file, the test
#: kit's broker launcher (DPSYNTH_KAFKA_*, DPSYNTH_PYTHON), the compose file's host path of
#: the key (DPSYNTH_NOISE_KEY_PATH), the benchmarks' data folder, which shares its name
#: with the worker's state folder, and the image test's switch (DPSYNTH_IMAGE_REQUIRED).
NOT_PARAMETERS = re.compile(
    r"DPSYNTH_(CONFIG_FILE|KAFKA_\w*|PYTHON|TABULAR_|NOISE_KEY_PATH|IMAGE_REQUIRED)$"
)
COMMANDS = {"run": ("run",), "tabular": ("tabular", "run"), "offline": ("offline",)}


def _library(param: Param) -> list[tuple[type, str]]:
    """The library classes that take ``param`` and the engine whose default they use."""
    if "library" not in param.scopes:
        return []
    tabular = param.group == "tabular" or "tabular" in param.scopes
    online = param.group == "synthesis"
    return ([(OnlineSynthesizer, "points")] if online else []) + (
        [(TabularSynthesizer, "tabular")] if tabular else [])


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_the_library_takes_the_declared_default(name: str) -> None:
    param = PARAMS[name]
    for cls, engine in _library(param):
        signature = inspect.signature(cls).parameters
        assert param.library_name in signature, f"{cls.__name__} lacks {param.library_name}"
        default = signature[param.library_name].default
        if default is inspect.Parameter.empty:
            continue  # the library may require what the commands and the worker default
        assert default == param.default_for(engine), (cls.__name__, name)


def _bad_values(param: Param) -> list[object]:
    if param.kind == "choice":
        return ["no-such-" + param.name]
    if param.kind == "int":
        return [v for v in (None if param.low is None else int(param.low) - 1,
                             None if param.high is None else int(param.high) + 1, 1.5)
                if v is not None]
    if param.kind == "float":
        return [v for v in (param.low, float("nan"), float("inf")) if v is not None and (
            param.strict or v != param.low)] + ([] if param.high is None else [param.high + 1])
    return []


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_the_library_refuses_what_the_declaration_refuses(name: str) -> None:
    param = PARAMS[name]
    domain = Domain.from_dict({"a": 2, "b": 3})
    for cls, engine in _library(param):
        base = ({"d": 2, "epsilon": 1.0, "key": KEY, "release_every": 10} if engine == "points"
                else {"domain": domain, "epsilon": 1.0, "key": KEY, "release_every": 10})
        for value in _bad_values(param):
            with pytest.raises(ConfigError, match=re.escape(param.describe())):
                cls(**{**base, param.library_name: value})


def _command(path: tuple[str, ...]) -> click.Command:
    command: click.Command = main
    for part in path:
        assert isinstance(command, click.Group)
        command = command.get_command(click.Context(command), part)
    return command


@pytest.mark.parametrize("scope", sorted(COMMANDS))
def test_every_command_option_is_derived_from_its_declaration(scope: str) -> None:
    command = _command(COMMANDS[scope])
    options = {o.name: o for o in command.params if isinstance(o, click.Option)}
    engine = "tabular" if scope == "tabular" else "points"
    for param in PARAMS.values():
        if scope not in param.scopes:
            assert param.name not in options or not isinstance(
                options[param.name].type, DeclaredType), (scope, param.name)
            continue
        option = options.get(param.name)
        assert option is not None, f"dpsynth {' '.join(COMMANDS[scope])} lacks {param.name}"
        assert isinstance(option.type, DeclaredType) and option.type.param is param
        assert option.opts == [param.option_name]
        default = param.default_for(engine, cli=True)
        assert option.default == (None if default is REQUIRED else default), param.name


def test_the_worker_settings_are_the_declared_ones() -> None:
    declared = {p.name: p for p in PARAMS.values() if "worker" in p.scopes}
    assert set(WorkerConfig.model_fields) == set(declared)
    assert set(WorkerSettings.model_fields) == set(declared)
    for name, field in WorkerConfig.model_fields.items():
        param = declared[name]
        assert field.alias == param.env, name
        expected = None if param.engines else param.default
        assert field.is_required() == (expected is REQUIRED), name
        if expected is not REQUIRED:
            assert field.default == expected or str(field.default) == str(expected), name


def test_the_settings_page_is_generated_from_the_declarations() -> None:
    page = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    assert page == settings_table(), "regenerate: python -m dpsynth.params > docs/settings.md"


def test_the_mechanism_choices_are_the_factorys() -> None:
    assert tuple(MechanismName) == (AUTO, *MECHANISMS)


def test_every_variable_named_anywhere_is_a_declared_setting() -> None:
    """A DPSYNTH_* name in the package, the docs, the compose file or the manifests is a
    setting (or one of the few named exceptions): a misspelt or retired name fails here."""
    known = {p.env for p in PARAMS.values()} | {"DPSYNTH_DATA_DIR"}
    files = [*sorted((ROOT / "operators" / "dpsynth").rglob("*.py")),
             *sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md",
             ROOT / "docker-compose.yml", *sorted((ROOT / "deploy").rglob("*.yaml"))]
    unknown = {}
    for path in files:
        for name in re.findall(r"DPSYNTH_[A-Z0-9_]+", path.read_text(encoding="utf-8")):
            if name not in known and not NOT_PARAMETERS.match(name):
                unknown.setdefault(name, str(path.relative_to(ROOT)))
    retired = {"DPSYNTH_SCHEDULE", "DPSYNTH_TABULAR_METHOD"}  # named only to refuse them
    assert {k: v for k, v in unknown.items() if k not in retired} == {}


def test_a_parameter_reads_text_and_refuses_with_its_rule() -> None:
    assert PARAMS["epsilon"].parse(" 2.5 ") == 2.5
    assert PARAMS["release_every"].parse("7") == 7
    assert PARAMS["state_sync"].parse("off") is False
    assert PARAMS["neighbours"].parse("add_remove") == "add_remove"
    assert type(PARAMS["neighbours"].parse("add_remove")) is str  # plain: same bytes
    assert PARAMS["max_contributions"].parse("") is None
    for name, value in (("epsilon", "0"), ("max_depth", "64"), ("release_every", "1.5"),
                        ("input_topic", "a b"), ("crash_at", "nowhere:1")):
        with pytest.raises(ValueError):
            PARAMS[name].parse(value)
    assert PARAMS["web_port"].describe() == "must be an integer in [1, 65535]"
    assert PARAMS["noise_key_hex"].env == PREFIX + "NOISE_KEY"


def test_the_settings_fields_are_generated_from_the_declarations() -> None:
    """The typed fields of dpsynth/settings.py are the generator's (python -m dpsynth.params
    --write): mypy sees each setting, and none is declared twice."""
    from dpsynth.params.fields import BLOCKS, generated_blocks, settings_fields

    text = (ROOT / "operators" / "dpsynth" / "settings.py").read_text(encoding="utf-8")
    blocks = generated_blocks(text)
    assert sorted(blocks) == sorted(BLOCKS)
    for name in BLOCKS:
        assert blocks[name] == settings_fields(name), "regenerate: python -m dpsynth.params --write"


def test_the_online_config_has_a_field_per_library_parameter() -> None:
    """OnlineConfig holds every parameter the online synthesizer takes (plus d, schedule and
    the derived per-record ε), so a new library parameter fails here until it is resolved."""
    from dataclasses import fields

    from dpsynth.online.config import OnlineConfig

    declared = {p.library_name for p in PARAMS.values()
                if "library" in p.scopes and p.group == "synthesis"}
    assert {f.name for f in fields(OnlineConfig)} == declared | {"d", "schedule",
                                                                  "record_epsilon"}
    signature = set(inspect.signature(OnlineConfig.resolve).parameters)
    assert signature == set(inspect.signature(OnlineSynthesizer).parameters) - {"key"}


#: The tabular synthesizer's options that are the library's alone (no declaration), and
#: TabularConfig's derived fields: a new option fails the next test until it is listed here
#: (or declared in dpsynth.params) and resolved in TabularConfig.resolve.
TABULAR_LIBRARY_ONLY = {"domain", "partition", "bias", "block_size", "support_size",
                        "full_domain_limit", "fit_passes", "fit_rule", "rejuvenate_every",
                        "damping", "score", "pooled_marginals", "size_share"}
TABULAR_DERIVED = {"k", "eps_size", "eps_select", "eps_measure", "worst_case_loss"}


def test_the_tabular_config_has_a_field_per_library_parameter() -> None:
    """TabularConfig holds every parameter the tabular synthesizer takes (the declared ones,
    the library's own options) and the derived budgets; resolve takes the synthesizer's
    arguments with the synthesizer's defaults."""
    from dataclasses import fields

    from dpsynth.tabular.config import TabularConfig

    declared = {p.library_name for p in PARAMS.values()
                if "library" in p.scopes and (p.group == "tabular" or "tabular" in p.scopes)}
    taken = dict(inspect.signature(TabularSynthesizer).parameters)
    del taken["key"]
    assert set(taken) == declared | TABULAR_LIBRARY_ONLY
    assert {f.name for f in fields(TabularConfig)} == set(taken) | TABULAR_DERIVED
    resolve = inspect.signature(TabularConfig.resolve).parameters
    assert {n: p.default for n, p in resolve.items()} == {
        n: p.default for n, p in taken.items()}


class _Spy:
    """Counts the checks of ε: its declaration's rule, and the accounting's own check."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import dpsynth.accounting._checks as checks
        import dpsynth.accounting.composition as composition
        import dpsynth.accounting.units as units

        self.rule = self.accounting = 0
        check, account = Param.check, checks._check_epsilon

        def rule(param: Param, value: object, label: str | None = None) -> object:
            self.rule += param.name == "epsilon"
            return check(param, value, label)

        def accounting(value: object) -> float:
            self.accounting += 1
            return account(value)

        monkeypatch.setattr(Param, "check", rule)
        for module in (checks, composition, units):
            monkeypatch.setattr(module, "_check_epsilon", accounting)


@pytest.mark.parametrize("unit", [{}, {"privacy_unit": "user", "max_contributions": 4}])
def test_epsilon_is_checked_once_by_the_library(monkeypatch: pytest.MonkeyPatch,
                                                unit: dict[str, object]) -> None:
    spy = _Spy(monkeypatch)
    synth = OnlineSynthesizer(d=2, epsilon=1.0, key=KEY, release_every=10, **unit)
    assert (spy.rule, spy.accounting) == (1, 0)
    assert synth.config.epsilon == 1.0 and synth.epsilon == 1.0


def test_epsilon_is_checked_once_by_the_run_command(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    """dpsynth run: the option reads the text (Param.parse), the configuration checks it once
    (Param.check); nothing downstream checks it again."""
    from click.testing import CliRunner

    monkeypatch.setenv("DPSYNTH_STATE_DIR", str(tmp_path / "state"))
    spy = _Spy(monkeypatch)
    result = CliRunner().invoke(main, ["run", "--points", "300", "--release-every", "10",
                                       "--epsilon", "2", "--privacy-unit", "user",
                                       "--max-contributions", "2", "--no-report",
                                       "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert (spy.rule, spy.accounting) == (1, 0)


def test_epsilon_is_checked_once_by_the_worker_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from dpsynth.settings import SynthesisSettings

    settings = SynthesisSettings.of(epsilon="1.5")  # the parser reads the text (Param.parse)
    spy = _Spy(monkeypatch)
    settings.synthesizer(2, KEY)
    assert (spy.rule, spy.accounting) == (1, 0)


@pytest.mark.parametrize("options", [{}, {"neighbours": "replace"},
                                     {"selection": "em", "workloads_per_step": 3},
                                     {"mechanism": "baseline", "neighbours": "replace"}])
def test_epsilon_is_checked_once_by_the_tabular_library(monkeypatch: pytest.MonkeyPatch,
                                                        options: dict[str, object]) -> None:
    """The keyword constructor, from_config and restore: TabularConfig.resolve checks ε once;
    the split, the budget check and the step ledger read the checked value."""
    from dpsynth.tabular.config import TabularConfig

    domain = Domain.from_dict({"a": 2, "b": 3, "c": 2})
    spy = _Spy(monkeypatch)
    synth = TabularSynthesizer(domain, 1.0, KEY, release_every=10, **options)
    assert (spy.rule, spy.accounting) == (1, 0)
    assert synth.config.epsilon == 1.0 and synth.epsilon == 1.0
    blob = synth.snapshot()
    restored = TabularSynthesizer.restore(blob, KEY)
    assert (spy.rule, spy.accounting) == (2, 0)
    assert restored.config == synth.config and restored.snapshot() == blob
    config = TabularConfig.resolve(domain, 1.0, 10, **options)
    TabularSynthesizer.from_config(config, KEY)
    assert (spy.rule, spy.accounting) == (3, 0)


def test_epsilon_is_checked_once_by_the_tabular_run_command(monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    """dpsynth tabular run: the options read the text (Param.parse), TabularConfig.resolve
    checks ε once; nothing downstream checks it again."""
    from click.testing import CliRunner

    monkeypatch.setenv("DPSYNTH_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("DPSYNTH_NOISE_KEY", raising=False)
    monkeypatch.delenv("DPSYNTH_NOISE_KEY_FILE", raising=False)
    (tmp_path / "domain.json").write_text(
        '{"version": 1, "attributes": [{"name": "a", "size": 2}, {"name": "b", "size": 3}]}')
    (tmp_path / "rows.csv").write_text(
        "a,b\n" + "".join(f"{i % 2},{i % 3}\n" for i in range(40)))
    spy = _Spy(monkeypatch)
    result = CliRunner().invoke(main, [
        "tabular", "run", "--data", str(tmp_path / "rows.csv"), "--domain",
        str(tmp_path / "domain.json"), "--epsilon", "2", "--neighbours", "replace",
        "--release-every", "10", "--no-report", "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert (spy.rule, spy.accounting) == (1, 0)


def test_epsilon_is_checked_once_by_the_tabular_worker(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    """DPSYNTH_ENGINE=tabular: the settings parse the text; each synthesizer the worker builds
    (fresh, restored) and the bound configuration resolve ε once."""
    from dpsynth.stream.engines import open_engine, public_config
    from dpsynth.stream.settings import load_config
    from dpsynth.testing.kafka import TEST_KEY_HEX
    from tests.support.tabular import write_domain

    config = load_config({
        "DPSYNTH_BROKER": "127.0.0.1:9", "DPSYNTH_ENGINE": "tabular",
        "DPSYNTH_DOMAIN_FILE": str(write_domain(tmp_path / "domain.json")),
        "DPSYNTH_EPSILON": "1.5", "DPSYNTH_NOISE_KEY": TEST_KEY_HEX,
        "DPSYNTH_DATA_DIR": str(tmp_path / "data")})
    spy = _Spy(monkeypatch)
    synth = config.tabular_synthesizer(0)
    assert (spy.rule, spy.accounting) == (1, 0)
    assert synth.config == config.tabular_config(0) and synth.epsilon == 1.5
    assert (spy.rule, spy.accounting) == (2, 0)
    engine = open_engine(config, 0, None)
    assert (spy.rule, spy.accounting) == (3, 0)
    open_engine(config, 0, engine.snapshot())
    assert (spy.rule, spy.accounting) == (4, 0)
    assert public_config(config)["epsilon"] == 1.5
    assert (spy.rule, spy.accounting) == (5, 0)
