"""Settings: built-in defaults, a YAML file, then command-line overrides, validated once.

The defaults here and the repository's ``config.yaml`` are the same (a test checks it);
``config.yaml`` documents every key. Validation is pydantic's (strict types, unknown keys
rejected); errors become :class:`~watchdog.errors.ConfigError` naming the key.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, Literal, Mapping, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import ConfigError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


_NO_NUL = r"^[^\x00]*$"


class PySpyConfig(_Strict):
    """How stacks are taken (``py-spy dump``)."""

    path: Optional[str] = Field(None, min_length=1, pattern=_NO_NUL)
    native: bool = True
    locals: bool = False
    timeout_s: float = Field(5.0, gt=0, le=120)


class Config(_Strict):
    """Every setting of the watchdog; see ``config.yaml`` for each one's meaning."""

    interval_s: float = Field(1.0, ge=0.1, le=60)
    stall_timeout_s: float = Field(60.0, gt=0)
    busy_stall_timeout_s: float = Field(300.0, gt=0)
    stall_min_s: float = Field(10.0, gt=0)
    stall_p99_factor: float = Field(10.0, ge=1)
    on_hang: Literal["report", "terminate"] = "report"
    terminate_outside_loader: bool = False
    terminate_grace_s: float = Field(10.0, ge=0, le=600)
    report_dir: str = Field("dlwatch-reports", min_length=1, pattern=_NO_NUL)
    full_info_interval_s: float = Field(10.0, gt=0)
    timeline_samples: int = Field(600, ge=10, le=100_000)
    cpu_progress_s: float = Field(0.05, gt=0)
    warning_interval_s: float = Field(5.0, gt=0)
    stderr_tail_bytes: int = Field(65536, ge=0, le=16 * 2**20)
    hook: bool = True
    data_checks: bool = True
    on_hang_exec: Optional[str] = Field(None, min_length=1, pattern=_NO_NUL)
    on_crash_exec: Optional[str] = Field(None, min_length=1, pattern=_NO_NUL)
    on_warning_exec: Optional[str] = Field(None, min_length=1, pattern=_NO_NUL)
    exec_timeout_s: float = Field(30.0, gt=0, le=3600)
    metrics_port: Optional[int] = Field(None, ge=1, le=65535)
    metrics_addr: str = Field("0.0.0.0", min_length=1, pattern=_NO_NUL)
    py_spy: PySpyConfig = PySpyConfig()


def _key(loc: tuple) -> str:
    return ".".join(str(p) for p in loc).encode("unicode_escape").decode("ascii") or "(top level)"


class _Loader(yaml.SafeLoader):
    """YAML 1.1 safe loading, plus: ``1e3`` is a float (YAML 1.2 reads it so; PyYAML's 1.1
    resolver wants a dot), and a duplicate key is an error, not a silent override."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise ConfigError(str(key), "duplicate key", getattr(self, "source_name", "config"))
            seen.add(key)
        return super().construct_mapping(node, deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def validate(data: Mapping[str, Any], source: str) -> Config:
    """Build a :class:`Config` from a mapping.

    Raises:
        ConfigError: for an unknown key, a wrong type or an out-of-range value, naming the
            first offending key and ``source`` (a file path or ``command line``).
    """
    try:
        return Config.model_validate(dict(data))
    except ValidationError as e:
        err = e.errors()[0]
        key = _key(err["loc"])
        msg = "unknown setting" if err["type"] == "extra_forbidden" else err["msg"]
        raise ConfigError(key, f"{msg} (got {err.get('input')!r})", source) from None


def load(path: Optional[str], overrides: Mapping[str, Any]) -> Config:
    """Defaults, updated by the YAML file at ``path`` (if any), then by ``overrides``.

    ``overrides`` maps dotted keys (``"py_spy.native"``) to values already of the right type.

    Raises:
        ConfigError: the file cannot be read or parsed, or a value is invalid.
    """
    data: Dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        source = path
        try:
            with open(path, encoding="utf-8") as f:
                loader = _Loader(f)
                loader.source_name = path
                try:
                    loaded = loader.get_single_data()
                finally:
                    loader.dispose()
        except OSError as e:
            raise ConfigError("--config", e.strerror or str(e), path) from None
        except UnicodeDecodeError:
            raise ConfigError("--config", "not a UTF-8 text file", path) from None
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            where = f"line {mark.line + 1}" if mark else "file"
            raise ConfigError(where, f"not valid YAML: {getattr(e, 'problem', e)}", path) from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError("(top level)", "expected a mapping of settings", path)
        data = loaded
        cfg = validate(data, path)
        _check_pyspy_path(cfg, path)
    for dotted, value in overrides.items():
        if value is None:
            continue
        node = data
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    cfg = validate(data, source if not overrides else f"{source} + command line")
    _check_pyspy_path(cfg, source)
    return cfg


def _check_pyspy_path(cfg: "Config", source: str) -> None:
    path = cfg.py_spy.path
    if path is not None and not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise ConfigError("py_spy.path", f"not an executable file: {path!r}", source)


def defaults_as_dict() -> Dict[str, Any]:
    """The built-in defaults as a plain nested dict (for ``config.yaml`` and its test)."""
    return Config().model_dump()
