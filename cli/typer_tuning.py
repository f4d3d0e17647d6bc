"""Two adjustments to typer, applied once when `mem` starts.

Typer checks every option's value with a pydantic TypeAdapter, and importing pydantic costs more than
the rest of a `mem status`. Our options are plain str, int, bool and Path values (no ranges, choices or
parsers), and lists of them: those are converted here directly, and anything else still goes through typer's own path.
Typer's rich help also shows `<bool>` after every flag, though a flag takes no value."""

import re
from dataclasses import dataclass
from pathlib import Path
from typing import get_args, get_origin

SCALARS = (str, int, bool, Path)
WHOLE = re.compile(r"[+-]?[0-9]+")
BOOLS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


def tune_typer() -> None:
    from typer._click.exceptions import BadParameter
    from typer._coercion import RuntimeParam
    from typer.core import TyperOption, _TyperParameter

    def convert(kind, value, param, ctx):
        if isinstance(value, kind):
            return value
        try:
            if kind is int and isinstance(value, str) and not WHOLE.fullmatch(value.strip()):  # int() reads '١',
                raise ValueError(value)  # '１' (nc32a) and '1_0' as 10 (nc33a)
            converted = BOOLS[str(value).lower()] if kind is bool else kind(value)
        except (KeyError, TypeError, ValueError):
            name = {int: "integer", bool: "boolean", Path: "path"}.get(kind, kind.__name__)
            raise BadParameter(f"{value!r} is not a valid {name}.", ctx=ctx, param=param) from None
        if kind is int and not -2**63 <= converted < 2**63:  # what SQLite and PostgreSQL hold
            raise BadParameter(f"{value} is out of range: whole numbers go from -2**63 to 2**63 - 1.", ctx=ctx,
                               param=param)
        return converted

    @dataclass(frozen=True)
    class ScalarParam(RuntimeParam):
        def _coerce_value(self, value, param, ctx):
            return convert(self.annotation, value, param, ctx)

    @dataclass(frozen=True)
    class ScalarListParam(RuntimeParam):
        def _coerce_value(self, value, param, ctx):
            kind = get_args(self.annotation)[0]
            return [convert(kind, item, param, ctx) for item in value]

    def scalar_list(annotation) -> bool:
        return get_origin(annotation) is list and len(get_args(annotation)) == 1 and get_args(annotation)[0] in SCALARS

    def plain(descriptor) -> bool:
        info = descriptor.parameter_info
        return (info.parser is None and info.min is None and info.max is None
                and not descriptor.is_choice and not descriptor.is_file
                and not (info.exists or info.resolve_path or info.writable)
                and info.file_okay is not False and info.dir_okay is not False)

    typer_runtime_param = _TyperParameter.get_runtime_param

    def get_runtime_param(self):
        descriptor = self.type_descriptor
        if self._runtime_param is None and plain(descriptor):
            kind = ScalarParam if descriptor.annotation in SCALARS else (
                ScalarListParam if scalar_list(descriptor.annotation) else None)
            if kind is not None:
                self._runtime_param = kind(parameter_info=descriptor.parameter_info, annotation=descriptor.annotation)
        return typer_runtime_param(self)

    _TyperParameter.get_runtime_param = get_runtime_param

    shown = TyperOption.display_type_rich
    TyperOption.display_type_rich = lambda self, ctx: None if self.is_flag else shown(self, ctx)
