"""``sktune export``: the best bitwise-exact plan of a study as JSON, a Python snippet, or a patch.

All three read only the study (and, for the patch, the model file it names): nothing
here runs user code or compiles anything.
"""

from __future__ import annotations

import hashlib
import pprint
from pathlib import Path
from typing import Any

import optuna

from sktune.errors import ExportError
from sktune.graph.grouping import regions
from sktune.plan import Plan
from sktune.tuning.settings import DEFAULT_STORAGE
from sktune.tuning.attrs import StudyAttr, is_prepared
from sktune.tuning.storage import mask_url
from sktune.tuning.through_compile import through_compile_line, through_compile_warns

EXPORT_VERSION = 1


def failed_most_often(data: dict[str, Any]) -> str:
    """``; most often: <reason> (n×)`` from a summary, or nothing when no trial failed."""
    reasons = data.get("failure_reasons") or []
    return f"; most often: {reasons[0][0]} ({reasons[0][1]}×)" if reasons else ""


def interrupted_count(data: dict[str, Any]) -> str:
    """``, N interrupted (…)`` from a summary, or nothing: trials whose run stopped are no
    failure of their plan (the CLI's and the report's counts, and the errors, say it alike)."""
    return (f", {data['n_interrupted']} interrupted (their run stopped; their plans run again)"
            if data.get("n_interrupted") else "")


def no_result(data: dict[str, Any]) -> str:
    """Why a study names no plan, from its summary: its failures, and what to change (the
    CLI's error and the report's verdict)."""
    text = (f"no bitwise-exact plan, not even the unfused one: {data['n_complete']} of {data['n_trials']} trials "
            f"completed, {data['n_failed']} failed{interrupted_count(data)}{failed_most_often(data)}")
    reasons = data.get("failure_reasons") or []
    if reasons and reasons[0][0].startswith("hang"):
        text += "; a hang is a trial past --trial-timeout: raise it for a model that is slow to compile"
    return text


def _best(study: optuna.Study) -> tuple[dict[str, Any], Plan]:
    """The study's summary and its best feasible plan, or one clear error."""
    from sktune.tuning.summary import summary

    data = summary(study)
    if data["best_plan"] is None and data.get("keep_unfused_reason"):
        raise ExportError(f"study {study.study_name!r}: keep the model as it is, unfused "
                          f"({data['keep_unfused_reason']}); its unfused trial did not complete: no plan to export")
    if data["best_plan"] is None and not data["n_trials"] and not is_prepared(study.user_attrs):
        creator = study.user_attrs.get(StudyAttr.CREATOR) or {}
        by = f" (pid {creator['pid']} on {creator['host']})" if creator.get("pid") else ""
        raise ExportError(f"study {study.study_name!r} is still being prepared by the run that created it{by}: "
                          "it has no trial yet; export it once that run has tuned it")
    if data["best_plan"] is None:
        running = len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)))
        now = f", {running} running now (a worker is tuning it, or was stopped: its next run fails those)" \
            if running else ""
        raise ExportError(
            f"study {study.study_name!r} has no bitwise-exact completed trial "
            f"({data['n_complete']} complete, {data['n_infeasible']} not bitwise, {data['n_failed']} failed"
            f"{interrupted_count(data)}{now}{failed_most_often(data)}); run more trials (same --study and --storage "
            "resumes it)"
        )
    return data, Plan.from_json(data["best_plan"])


def export_json(study: optuna.Study, storage: str | None = None) -> dict[str, Any]:
    """The best plan, versioned, with provenance. ``sktune.apply`` accepts this document."""
    from sktune import __version__

    data, plan = _best(study)
    attrs = study.user_attrs
    url = storage  # as the user named it (the study does not know its own URL)
    return {
        "sktune_export_version": EXPORT_VERSION,
        "plan": plan.to_json(),
        "provenance": {
            "study": study.study_name,
            "trial": data["best_trial"],
            "backend": attrs.get(StudyAttr.BACKEND),
            # The times come from the emulated Ascend's model, not from an NPU (README "The emulated Ascend").
            "emulated": data["emulated"],
            "speedup": data["speedup"],
            "speedup_ci": data["speedup_ci"],
            "significant": data["significant"],
            # Why the figures are a search trial's, not re-measured (a run stopped early...); else None.
            "provisional": data.get("provisional"),
            # The plan fuses nothing: keep the model unfused, and why (tuning/finalists.py).
            "keep_unfused": data["best_fuses_nothing"],
            "keep_unfused_reason": data.get("keep_unfused_reason"),
            "baseline_s": data["baseline_s"],
            "best_s": data["best_s"],
            "timing_source": data.get("timing_source"),
            "verified_bitwise": data["verified_bitwise"],
            "input_sets": attrs.get(StudyAttr.INPUT_SETS),
            "threads": attrs.get(StudyAttr.THREADS),
            "environment": attrs.get(StudyAttr.ENVIRONMENT),
            "sktune_version": __version__,
            "model": attrs.get(StudyAttr.MODEL),
            "model_sha256": attrs.get(StudyAttr.MODEL_SHA256),
            # Resumes across a changed model or machine (--allow-changed): trials on either side of one.
            "resumed_across": attrs.get(StudyAttr.RESUMED_ACROSS) or [],
            "input_shapes": attrs.get(StudyAttr.INPUT_SHAPES),
            # Every shape the plan was verified bitwise on (sktune.apply warns at any other).
            "verified_shapes": _verified_shapes(attrs, data),
            # Those of verified_shapes that were only verified, never timed or tuned at (verify_shapes()).
            "verify_only_shapes": (data.get("verify_shapes") or {}).get("shapes"),
            # npu: more shapes than npugraph_ex captures by default (the python snippet raises capture_limit).
            "capture_limit_warning": data.get("capture_limit_warning"),
            # The best through sktune.apply (torch.compile), as this export runs it; None: not timed.
            "through_compile": data.get("through_compile"),
            "shapes": data.get("shapes"),
            "n_ops": len(attrs.get(StudyAttr.OPS, [])),
            "op_types": [op["target"] for op in attrs.get(StudyAttr.OPS, [])],
            "groups": data["groups"],
            "storage": mask_url(url) if url else None,
        },
    }


def _verified_shapes(attrs: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    """Shape name -> the user inputs' [shape, dtype] there ("default" for a one-shape model): the
    tuned shapes the plan is bitwise at, then the verify-only shapes it was verified bitwise at."""
    shapes = attrs.get(StudyAttr.SHAPES)
    if not shapes:
        verified = {"default": attrs.get(StudyAttr.INPUT_SHAPES)}
    else:
        verified = {name: s["input_shapes"] for name, s in shapes.items()
                    if (data.get("shapes") or {}).get(name, {}).get("verified_bitwise")}
    at_verify_only = (data.get("verify_shapes") or {}).get("best") or {}
    verified.update({name: o["input_shapes"] for name, o in at_verify_only.items()
                     if o["bitwise"] and o.get("input_shapes")})
    return verified


def _measured(data: dict[str, Any], plan: Plan, input_sets: Any, input_shapes: Any = None) -> list[str]:
    """The snippet's comment lines on what was measured; a reason of several lines (a
    compiler's message) stays inside the comment."""
    return [line.replace("\n", "\n# ") for line in _measured_lines(data, plan, input_sets, input_shapes)]


def _measured_lines(data: dict[str, Any], plan: Plan, input_sets: Any, input_shapes: Any = None) -> list[str]:
    # An emulated device's times come from its model, never from an NPU: say so on the figure itself.
    measured = ("Emulated (the emulated Ascend's model of a device, not an NPU measurement)"
                if data.get("emulated") else "Measured")
    if data.get("best_fuses_nothing"):
        reason = data.get("keep_unfused_reason") or "no fused plan beat the unfused model"
        return [f"# {measured}: no bitwise-exact plan that fuses anything was measurably faster than the unfused",
                f"# model: keep it unfused ({reason}).",
                "# (This plan fuses nothing: every op runs as in eager mode.)"]
    lo, hi = data["speedup_ci"]
    verdict = "significant" if data["significant"] else "not significant: the interval includes 1"
    if data.get("provisional"):  # a search trial's figure, the least of many noisy ones: biased low
        verdict = f"PROVISIONAL: {data['provisional']}"
    verified = (f"outputs verified bitwise equal to the unfused model on {input_sets} input sets"
                + (" before the change the study was resumed across" if data.get("verified_before_change") else "")
                if data["verified_bitwise"] else "outputs NOT verified bitwise (the re-measurement disagreed)")
    spans = regions(data["n_ops"], plan.scopes)
    fused = (f"Fused regions (op ranges): {', '.join(f'{a}..{b}' for a, b in spans)}" if spans
             else "This plan fuses nothing: every op runs as in eager mode")
    shapes = [f"{name} {s['speedup']:.2f}x" + ("" if s["verified_bitwise"] else " (NOT bitwise)")
              for name, s in (data.get("shapes") or {}).items()]
    verify = data.get("verify_shapes") or {}
    checked = [name for name, o in (verify.get("best") or {}).items() if o["bitwise"]]
    # Not verified: a run stopped before its round; a shape --shapes left out whose graph runs other ops.
    unchecked = [name for name in [*(verify.get("shapes") or ()), *(verify.get("left_out") or ())]
                 if name not in checked]
    unchecked = list(dict.fromkeys(unchecked))
    served = (f"the shapes --shapes tuned (it left out {', '.join(verify['left_out'])})" if verify.get("left_out")
              else "every served shape")
    through = through_compile_line(data.get("through_compile"))
    return [
        f"# {measured}: speedup {data['speedup']:.3f}x over unfused (95 % interval {lo:.3f}-{hi:.3f}x, {verdict}),",
        f"# baseline timed in the same run; {verified}.",
        *([_through_comment(through, data["through_compile"])] if through else []),
        *([f"# One plan for {served} (the speedup above is their weighted mean): {', '.join(shapes)};",
           "# at any other input shape the plan is unverified."] if shapes else []),
        # One shape: the plan is verified there only (sktune.apply warns elsewhere; a pasted call cannot).
        *([f"# Verified at input shapes {_shapes_text(input_shapes)} only; at any other the plan is unverified."]
          if input_shapes and not shapes and not data.get("shapes") else []),
        *([f"# Also verified bitwise, not timed, at the verify-only shapes {', '.join(checked)}."] if checked else []),
        *([f"# NOT verified at the served shapes {_listed(unchecked)} (verify-only, or left out by --shapes): "
           "the model declares them."] if unchecked else []),
        f"# {fused}.",
    ]


def _shapes_text(input_shapes: list[list[Any]]) -> str:
    """``[13, 37] float32`` for the recorded ``[[shape, dtype], ...]`` of a model's inputs."""
    return ", ".join(f"{list(shape)} {str(dtype).removeprefix('torch.')}" for shape, dtype in input_shapes)


def _listed(names: list[str], most: int = 8) -> str:
    return ", ".join(names[:most]) + (f", … ({len(names)} in all)" if len(names) > most else "")


def _through_comment(line: str, entry: dict[str, Any]) -> str:
    """The timing through sktune.apply as a comment: measured, or a WARNING where the call this
    export makes failed, was not bitwise or was slower than eager (the table's verdict is the
    captured graph's)."""
    line = line.replace("×", "x")  # the export's figures are ASCII
    return f"# WARNING: {line}." if through_compile_warns(entry) else f"# Measured {line}."


def _literal(name: str, value: Any) -> str:
    """``NAME = <Python literal>``, continuation lines aligned under the opening brace."""
    text = pprint.pformat(value, sort_dicts=False, width=100 - len(name) - 3)
    return f"{name} = " + text.replace("\n", "\n" + " " * (len(name) + 3))


def _plan_literal(plan: Plan, n_ops: int) -> str:
    """The plan as a Python dict literal; ``n_ops`` lets sktune.apply refuse another graph."""
    return _literal("PLAN", {**plan.to_json(), "n_ops": n_ops})


def export_python(study: optuna.Study, storage: str | None = None) -> str:
    """A paste-ready snippet for the study's backend (expects ``model`` to be bound); the
    backend says what it holds (``Backend.export_snippet``).

    ``storage`` (the study's URL) goes into the command a source-editing snippet suggests."""
    from sktune.backends import backend_class

    data, plan = _best(study)
    attrs = study.user_attrs
    env = attrs.get(StudyAttr.ENVIRONMENT) or {}
    backend = attrs.get(StudyAttr.BACKEND)
    from sktune.tuning.verified import declared_shapes

    snippet = backend_class(backend).export_snippet(plan, env, attrs.get(StudyAttr.THREADS, 1),
                                                    sum(declared_shapes(attrs)))
    head = [
        f"# sktune export: study {study.study_name!r}, trial {data['best_trial']} "
        f"({backend} backend, torch {env.get('torch', '?')}{snippet.versions})",
        *_measured(data, plan, attrs.get(StudyAttr.INPUT_SETS), attrs.get(StudyAttr.INPUT_SHAPES)),
        *[f"# Resumed across a change of {', '.join(k.split(':', 1)[0] for k in c['changed'])} with --allow-changed: "
          "trials before it were measured and verified on the model or machine as it was."
          for c in attrs.get(StudyAttr.RESUMED_ACROSS) or []],
        "# Use it as it was tuned: model.eval(), calls under torch.no_grad()" + snippet.usage,
    ]
    if data.get("best_fuses_nothing"):  # applying it would only add torch.compile's own cost per call
        return "\n".join([*head[:-1], "# Nothing to apply: use the model as it is."]) + "\n"
    lines = [*head, *snippet.before_plan, *_recompile_limit_lines(sum(declared_shapes(attrs))),
             _plan_literal(plan, len(attrs.get(StudyAttr.OPS, [])))]
    apply_line = f'model = sktune.apply(model, PLAN, backend="{backend}")'
    compile_line = snippet.compile_after_source_edit
    if compile_line is None:
        return "\n".join([*lines, apply_line]) + "\n"
    return "\n".join([*lines, *_source_edit_lines(study, plan, compile_line, apply_line, storage)]) + "\n"


def _recompile_limit_lines(shapes: int) -> list[str]:
    """Past Dynamo's recompile limit a ``dynamic=False, fullgraph=True`` compile fails at the next
    shape (each shape is a graph of its own): the snippet raises it to the declared shapes."""
    from sktune._apply import DYNAMO_RECOMPILE_LIMIT, recompile_limit_for

    limit = recompile_limit_for(shapes)
    if limit is None:
        return []
    return [f"# {shapes} shapes declared: Dynamo captures a graph per input shape (dynamic=False) and, with",
            f"# fullgraph=True, fails past its recompile limit ({DYNAMO_RECOMPILE_LIMIT} by default): raise it.",
            "import torch._dynamo",
            f"torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, {limit})", ""]


def _source_edit_lines(study: optuna.Study, plan: Plan, compile_line: str, apply_line: str,
                       storage: str | None) -> list[str]:
    """The scope markers into the user's source (a patch), then ``compile_line``; where the
    source cannot take them, ``sktune.apply`` instead."""
    if not plan.scopes:  # no markers at all: the compiler picks what to fuse; nothing to edit
        return ["# The plan has no scopes: no source edit, only the tuned options.", compile_line]
    try:
        export_patch(study)
        folder = patch_folder(study.user_attrs.get(StudyAttr.MODEL) or "")
    except ExportError as exc:
        return [
            f"# The scopes cannot be written into your source: {exc}".replace("\n", " "),
            "# sktune.apply inserts the scope markers into the captured graph and compiles it with exactly",
            f"#   {compile_line.removeprefix('model = ')}",
            "import sktune",
            "",
            apply_line,
        ]
    return [
        "# 1. Put the scope markers into your source:",
        f"#      sktune export --study {study.study_name}{_storage_option(storage)} --format patch -o sktune.patch "
        f"&& patch -p1{'' if folder is None else f' -d {folder}'} < sktune.patch",
        f"#    (or skip the edit: {apply_line} inserts them into the graph)",
        "# 2. Compile with the tuned options:",
        compile_line,
    ]


def _storage_option(url: str | None) -> str:
    return "" if url is None or url == DEFAULT_STORAGE else f" --storage {mask_url(url)}"


def export_patch(study: optuna.Study, model_file: str | Path | None = None, root: str | Path | None = None) -> str:
    """A unified diff of the model file inserting the best plan's scope markers.

    Paths in the diff are relative to ``root`` (default: the working directory) when the
    file lies under it, then apply it with ``patch -p1`` from there; else just its name, and
    the diff's first line says to apply it with ``patch -p1 -d`` the model's folder.
    """
    from sktune.report.scope_patch import scope_patch

    data, plan = _best(study)
    if data.get("best_fuses_nothing"):
        raise ExportError(f"study {study.study_name!r}: keep the model unfused "
                          f"({data.get('keep_unfused_reason') or 'no fused plan beat it'}); no scope markers to add")
    attrs = study.user_attrs
    path = Path(model_file or attrs.get(StudyAttr.MODEL) or "")
    if not path.is_file():
        raise ExportError(f"the model file {str(path) or '(none recorded)'} of study {study.study_name!r} is not here; "
                          "pass it with --model PATH, or use sktune.apply(model, PLAN, backend=...) instead")
    raw = path.read_bytes()
    recorded = attrs.get(StudyAttr.MODEL_SHA256)
    now = hashlib.sha256(raw).hexdigest()
    if recorded and now != recorded:
        # Resumed across this very change: the study keeps the ops (and source lines) it was created with.
        if any(c.get("model_sha256") == now for c in attrs.get(StudyAttr.RESUMED_ACROSS) or []):
            raise ExportError(f"{path} changed since study {study.study_name!r} was created; it was resumed across "
                              "the change (--allow-changed) but keeps the ops and source lines of the file it was "
                              "created for, so no patch matches this one: tune it in a new --study, restore that "
                              "file, or use sktune.apply(...) instead")
        tuned_name = Path(attrs.get(StudyAttr.MODEL) or "").name
        if tuned_name and path.name != tuned_name:  # --model named another file, not a changed one
            raise ExportError(f"{path} is not the model file study {study.study_name!r} was tuned on ({tuned_name}, "
                              "another sha256): --model names that file where it moved")
        raise ExportError(f"{path} changed since study {study.study_name!r} was tuned (sha256 differs), so the "
                          "ops' source lines no longer match it; re-run the study or use sktune.apply(...) instead")
    base = Path(root or Path.cwd()).resolve()
    resolved = path.resolve()
    display = resolved.relative_to(base).as_posix() if resolved.is_relative_to(base) else resolved.name
    tuned_path = Path(attrs.get(StudyAttr.MODEL) or path)  # the ops' source lines name the file as it was tuned
    diff = scope_patch(raw.decode("utf-8"), tuned_path, attrs.get(StudyAttr.OPS, []), plan.scopes, display)
    if (folder := patch_folder(path, root)) is not None:  # patch skips text before the diff
        diff = f"Apply from the model's folder: patch -p1 -d {folder} < THIS_FILE\n" + diff
    return diff


def patch_folder(model_file: str | Path, root: str | Path | None = None) -> Path | None:
    """The folder to apply the patch from (``patch -p1 -d``), where the model file is not under
    ``root`` (default: the working directory): its diff names the bare file. None: from ``root``."""
    resolved = Path(model_file).resolve()
    return None if resolved.is_relative_to(Path(root or Path.cwd()).resolve()) else resolved.parent
