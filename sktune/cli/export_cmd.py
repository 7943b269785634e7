"""``sktune export --study NAME --format json|python|patch``: the best plan, ready to use."""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import Annotated

import typer

from sktune.cli._errors import err_console, user_errors
from sktune.cli._paths import check_output
from sktune.tuning.settings import DEFAULT_STORAGE


class ExportFormat(str, enum.Enum):
    json = "json"
    python = "python"
    patch = "patch"


def export_command(
    study: Annotated[str, typer.Option(help="Name of the study to export from.")],
    fmt: Annotated[ExportFormat, typer.Option("--format", help="json: plan + provenance; python: a snippet to "
                                                 "paste; patch: scope markers as a diff of the model file.")],
    storage: Annotated[str, typer.Option(help="Optuna storage URL the study lives in.")] = DEFAULT_STORAGE,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write here instead of stdout.")] = None,
    model: Annotated[Path | None, typer.Option(help="--format patch: the model file to patch, where it is not "
                                                   "where the study recorded it (it must be the same file).")] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
) -> None:
    """Export the best bitwise-exact plan of a study (read-only: runs no model code)."""
    with user_errors(debug):
        import optuna

        from sktune.errors import SktuneError
        from sktune.report.export import export_json, export_patch, export_python, patch_folder
        from sktune.tuning.attrs import StudyAttr
        from sktune.tuning.storage import load_existing_study

        optuna.logging.set_verbosity(optuna.logging.ERROR)
        if output is not None:
            check_output(output, "-o")
        if model is not None and fmt is not ExportFormat.patch:
            raise SktuneError("--model is for --format patch (json and python name no file)")
        loaded = load_existing_study(study, storage)
        if fmt is ExportFormat.json:
            text = json.dumps(export_json(loaded, storage), indent=2) + "\n"
        elif fmt is ExportFormat.python:
            text = export_python(loaded, storage)
        else:
            text = export_patch(loaded, model)
            if (folder := patch_folder(model or loaded.user_attrs.get(StudyAttr.MODEL) or "")) is not None:
                err_console.print(f"note: the model file is not under this folder: apply the patch from its own, "
                                  f"patch -p1 -d {folder} < {output or 'the patch'}", highlight=False, markup=False)
            tuned_with = loaded.user_attrs.get(StudyAttr.BACKEND)
            honoured = marker_compiles(tuned_with)
            if honoured:
                err_console.print(f"note: study {study!r} was tuned with the {tuned_with} backend; these markers "
                                  f"take effect only under {' or '.join(honoured)}, and the patched file calls "
                                  "torch.npu: it runs only where torch-npu is installed (elsewhere use "
                                  f"sktune.apply(model, PLAN, backend=\"{tuned_with}\"): --format python)",
                                  highlight=False, markup=False)
        if output is None:
            typer.echo(text, nl=False)
            return
        try:
            output.write_text(text)
        except OSError as exc:
            raise SktuneError(f"cannot write {output}: {exc}") from exc
    err_console.print(f"{fmt.value} export of study {study!r} written to {output}", highlight=False, markup=False)


def marker_compiles(tuned_with: str | None) -> list[str]:
    """The compile calls that honour scope markers in the source, where the study's own
    backend does not (none: the markers are that backend's own)."""
    from sktune.backends import REGISTRY, backend_class

    if tuned_with in REGISTRY and backend_class(tuned_with).scope_markers_under:
        return []
    return [c for c in (backend_class(n).scope_markers_under for n in REGISTRY) if c]
