import re
from pathlib import Path

import pytest
import torch

from sktune.errors import ModelFileError, SktuneError
from sktune.load import build, draw_inputs, load_model_file


def test_loads_contract(test_models: Path) -> None:
    source = load_model_file(test_models / "tiny_norm.py")
    assert isinstance(build(source), torch.nn.Module)
    a, b = draw_inputs(source, 0), draw_inputs(source, 1)
    assert not torch.equal(a[0], b[0])


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("missing.py", "not found"),
        ("syntax_error.py", "syntax error"),
        ("no_build.py", "does not define build_model"),
        ("no_inputs_fn.py", "does not define example_inputs"),
    ],
)
def test_bad_files_are_named(test_models: Path, name: str, expected: str) -> None:
    with pytest.raises(ModelFileError, match=expected):
        load_model_file(test_models / name)


def test_a_syntax_error_is_found_without_running_the_file_and_names_the_file_at_fault(tmp_path: Path) -> None:
    from sktune.load import check_syntax

    model = tmp_path / "model.py"
    model.write_text("import neighbour\nraise SystemExit('ran')\n")
    check_syntax(model)  # compiled, not run
    (tmp_path / "neighbour.py").write_text("x = (\n")
    with pytest.raises(ModelFileError, match=r"neighbour\.py:1: syntax error"):
        load_model_file(model)
    model.write_text("def build_model(:\n    pass\n")
    with pytest.raises(ModelFileError, match=r"model\.py:1: syntax error"):
        check_syntax(model)
    model.write_bytes(b"x = 1\0\n")
    with pytest.raises(ModelFileError, match=r"model\.py: syntax error: .*null bytes"):
        check_syntax(model)


def test_build_raising_is_reported(test_models: Path) -> None:
    source = load_model_file(test_models / "build_raises.py")
    with pytest.raises(ModelFileError, match="build_model\\(\\).*raised RuntimeError: weights not found"):
        build(source)


def test_non_module_and_non_tensor_inputs(tmp_path: Path) -> None:
    path = tmp_path / "bad.py"
    path.write_text("def build_model():\n    return 3\n\ndef example_inputs(seed=0):\n    return [1, 2]\n")
    source = load_model_file(path)
    with pytest.raises(ModelFileError, match="not a torch.nn.Module"):
        build(source)
    with pytest.raises(ModelFileError, match="tuple of tensors"):
        draw_inputs(source, 0)


def shapes_file(tmp_path: Path, shapes: str, inputs_args: str = "seed=0, shape=None") -> Path:
    path = tmp_path / "shaped.py"
    path.write_text("import torch\n\ndef build_model():\n    return torch.nn.Identity()\n\n"
                    f"def input_shapes():\n    return {shapes}\n\n"
                    f"def example_inputs({inputs_args}):\n"
                    "    return (torch.zeros({'a': 1, 'b': 4}.get(shape or 'a', 2), 3),)\n")
    return path


def test_input_shapes_weights_subset_and_named_draws(tmp_path: Path) -> None:
    from sktune.load import shape_weights

    source = load_model_file(shapes_file(tmp_path, "{'a': 0.25, 'b': 3}"))
    assert shape_weights(source) == {"a": 0.25, "b": 3.0}
    assert shape_weights(source, ("b",)) == {"b": 3.0}
    assert draw_inputs(source, 0, "b")[0].shape == (4, 3)
    assert draw_inputs(source, 0)[0].shape == (1, 3)  # shape=None: the first one
    with pytest.raises(ModelFileError, match="--shapes: c not among the shapes .* \\(a, b\\)"):
        shape_weights(source, ("c",))


def test_a_model_without_input_shapes_has_one_unnamed_shape(test_models: Path) -> None:
    from sktune.load import shape_weights

    source = load_model_file(test_models / "tiny_norm.py")
    assert shape_weights(source) == {}
    with pytest.raises(ModelFileError, match="defines no input_shapes"):
        shape_weights(source, ("bs1",))


@pytest.mark.parametrize(("shapes", "inputs_args", "message"), [
    ("{}", "seed=0, shape=None", "non-empty dict"),
    ("[('a', 1)]", "seed=0, shape=None", "non-empty dict"),
    ("{'a': 0}", "seed=0, shape=None", "weight of 'a' must be a positive number"),
    ("{'a': float('nan')}", "seed=0, shape=None", "positive number"),
    ("{'a,b': 1}", "seed=0, shape=None", "without commas"),
    ("{'a': 1}", "seed=0", "takes no 'shape' argument"),
])
def test_bad_input_shapes_are_named(tmp_path: Path, shapes: str, inputs_args: str, message: str) -> None:
    from sktune.load import shape_weights

    with pytest.raises(ModelFileError, match=message):
        shape_weights(load_model_file(shapes_file(tmp_path, shapes, inputs_args)))


def test_runner_reports_the_model_files_mistakes_before_importing_a_backend(test_models: Path) -> None:
    # A backend's imports take seconds (Inductor's 1.1-1.8 s): a user's mistake must not wait for
    # them. build_model() raising is the last mistake that needs no backend.
    name, expected = "build_raises.py", "weights not found"
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from sktune.errors import ModelFileError\n"
        "from sktune.worker.runner import RunnerConfig, TrialRunner\n"
        "try:\n"
        f"    TrialRunner(RunnerConfig(model_path={str(test_models / name)!r}))\n"
        "except ModelFileError as exc:\n"
        "    print(exc)\n"
        "print('backend imported' if 'sktune.backends.inductor' in sys.modules else 'no backend imported')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    assert expected in out
    assert out.strip().endswith("no backend imported")


def model_file(tmp_path: Path, forward: str, *, inputs: str = "(torch.randn(4, 8, generator=g),)",
               init: str = "", top: str = "", extra: str = "") -> Path:
    """A model file whose module has ``forward`` (one line, of x) and ``init`` (one line)."""
    path = tmp_path / "model.py"
    path.write_text(
        f"import sys\nimport torch\n{top}\n\nclass M(torch.nn.Module):\n"
        f"    def __init__(self):\n        super().__init__()\n        {init or 'pass'}\n\n"
        f"    def forward(self, x):\n        {forward}\n\n\n"
        "def build_model():\n    return M()\n\n\n"
        f"def example_inputs(seed=0):\n    g = torch.Generator().manual_seed(seed)\n    return {inputs}\n{extra}")
    return path


def forward_checked(path: Path) -> None:
    from sktune.worker.startup import checked_inputs, verify_shape_names

    source = load_model_file(path)
    model = build(source)
    with torch.no_grad():
        checked_inputs(source, model, [None], verify_shape_names(source), 3)


@pytest.mark.parametrize(("init", "forward", "message"), [
    # A buffer written in forward: a fused plan changed its bits while every output stayed
    # bitwise equal, and the study said "bitwise yes" (outputs are all sktune compares).
    ("self.register_buffer('running', torch.zeros(8))", "self.running.copy_(x.mean(0)); return x * 2 + 1",
     "writes the model's buffer 'running'; sktune verifies a plan by its outputs only"),
    ("self.w = torch.nn.Parameter(torch.ones(8))", "self.w.mul_(0.5); return x * self.w",
     "writes the model's parameter 'w'"),
    ("self.register_buffer('b', torch.zeros(8))", "self.b = x.sum(0); return x + self.b",
     "writes the model's buffer 'b'"),  # rebound, not written in place
    # Python state: Dynamo bakes the counter into the graph, so only eager calls show it.
    ("self.calls = 0", "self.calls += 1; return x * self.calls + 1",
     "nondeterministic: two eager calls on the same inputs differ"),
    ("", "sys.exit(3)", "the forward of .* called sys.exit\\(3\\)"),
])
def test_a_forward_that_keeps_state_or_exits_is_refused_before_any_capture(tmp_path: Path, init: str, forward: str,
                                                                         message: str) -> None:
    with pytest.raises(SktuneError, match=message):  # ModelFileError, or NondeterministicModelError
        forward_checked(model_file(tmp_path, forward, init=init))


def test_a_forward_that_reads_its_state_only_passes(tmp_path: Path) -> None:
    forward_checked(model_file(tmp_path, "return x * self.scale + self.w",
                               init="self.register_buffer('scale', torch.ones(8)); self.w = torch.nn.Parameter("
                                    "torch.zeros(8))"))
    # A cache the first call builds (a rotary table, say) is set once, not kept from call to call.
    forward_checked(model_file(tmp_path, "self.table = self.table if self.table is not None else x.mean(0); "
                                         "return x + self.table", init="self.register_buffer('table', None)"))


def test_a_forward_that_fails_on_the_inputs_dtype_names_the_file_and_both_dtypes(tmp_path: Path) -> None:
    path = model_file(tmp_path, "return self.lin(x)", init="self.lin = torch.nn.Linear(8, 8)",
                      inputs="(torch.randn(4, 8, generator=g, dtype=torch.float64),)")
    with pytest.raises(ModelFileError, match=f"the forward of {re.escape(str(path))} raised RuntimeError: .*dtype.*"
                                             r"\(example_inputs gives float64; the model's parameters are float32"):
        forward_checked(path)


def test_a_dtype_error_with_the_parameters_dtype_gets_no_dtype_hint(tmp_path: Path) -> None:
    """Float ids into an Embedding: the inputs are the parameters' dtype; the fix is int64, not theirs."""
    path = model_file(tmp_path, "return self.emb(x)", init="self.emb = torch.nn.Embedding(8, 4)")
    with pytest.raises(ModelFileError, match="the forward of .* raised RuntimeError") as raised:
        forward_checked(path)
    assert "example_inputs gives" not in str(raised.value)


def test_inputs_that_repeat_for_some_seeds_pass(tmp_path: Path) -> None:
    """A fixed input beside a random one; a small integer input equal for one seed by chance."""
    forward_checked(model_file(tmp_path, "return x * 2", inputs="(torch.randn(4, 8, generator=g) + torch.arange(8),)"))
    forward_checked(model_file(tmp_path, "return x * 2", inputs="(torch.full((4, 8), float(min(seed, 1))),)"))


def test_a_forward_returning_a_dict_passes(tmp_path: Path) -> None:
    forward_checked(model_file(tmp_path, "return {'y': x * 2 + 1, 'pair': (x - 1, x.sum(0))}"))


@pytest.mark.parametrize(("inputs", "top", "extra", "message"), [
    ("(torch.randn(4, 8, generator=g), 3)", "", "", "must return a tuple of tensors; element 1 is int"),
    ("()", "", "", "returned no tensors"),
    ("(torch.randn(0, 8, generator=g),)", "", "", "returns no elements on example_inputs\\(0\\)"),  # vacuous
    # The seed ignored: "verified on 3 input sets" would have been one set, three times.
    ("(torch.ones(4, 8),)", "", "", "example_inputs\\(1\\) to \\(2\\) in .* return the same values as "
     "example_inputs\\(0\\).*run with --input-sets 1"),
    ("(torch.randn(4, 8, generator=g),)", "sys.exit(0)", "", "importing .* called sys.exit\\(0\\)"),
    # A typo in verify_shapes() stops the run now, not after the whole search as "not bitwise".
    ("(torch.randn({'a': 1, 'b': 2}[shape or 'a'], 8, generator=g),)", "",
     "\ndef input_shapes():\n    return {'a': 1}\n\ndef verify_shapes():\n    return ['b', 'c']\n",
     "example_inputs\\(0, shape='c'\\) in .* raised KeyError: 'c'"),
])
def test_inputs_and_imports_that_break_the_contract_are_named(tmp_path: Path, inputs: str, top: str, extra: str,
                                                               message: str) -> None:
    path = model_file(tmp_path, "return x * 2", inputs=inputs, top=top, extra=extra)
    if "shape" in inputs:
        path.write_text(path.read_text().replace("(seed=0)", "(seed=0, shape=None)"))
    with pytest.raises(ModelFileError, match=message):
        forward_checked(path)


@pytest.mark.parametrize(("signature", "message"), [
    ("def example_inputs():", "example_inputs in .* must take the seed \\(an int\\) as its only required arguments"),
    ("def example_inputs(seed, batch):", "missing a required argument: 'batch'"),
])
def test_contract_functions_that_cannot_be_called_as_sktune_calls_them_are_named(tmp_path: Path, signature: str,
                                                                                  message: str) -> None:
    path = model_file(tmp_path, "return x")
    path.write_text(path.read_text().replace("def example_inputs(seed=0):\n    g = torch.Generator().manual_seed(seed)",
                                             f"{signature}\n    g = torch.Generator()"))
    with pytest.raises(ModelFileError, match=message):
        load_model_file(path)


def test_a_shaped_example_inputs_may_require_its_shape(tmp_path: Path) -> None:
    # Beside input_shapes(), sktune calls example_inputs(seed, shape=NAME): a shape without a default is fine.
    path = shapes_file(tmp_path, "{'a': 1}", "seed, shape")
    assert load_model_file(path).input_shapes is not None


def test_a_keyword_only_forward_is_told_that_inputs_are_passed_by_position(tmp_path: Path) -> None:
    path = model_file(tmp_path, "return x")
    path.write_text(path.read_text().replace("def forward(self, x):", "def forward(self, *, x):"))
    with pytest.raises(ModelFileError, match="inputs are passed by position"):
        forward_checked(path)


def test_a_forward_without_ops_has_nothing_to_fuse(tmp_path: Path) -> None:
    from sktune.errors import CaptureError
    from sktune.graph.capture import capture

    source = load_model_file(model_file(tmp_path, "return x"))
    with pytest.raises(CaptureError, match="runs no tensor operations .* nothing to fuse"):
        capture(build(source), draw_inputs(source, 0))


@pytest.mark.parametrize(("shapes", "verify", "message"), [
    # A tuned shape after the first and a verify-only shape are checked at start-up too: a crash
    # there named no shape (capture's raw traceback), or ended the search as "not bitwise".
    ({"ok": 0.5, "bad": 0.5}, None, "at shape 'bad' (example_inputs(0, shape='bad')): the forward of "),
    ({"ok": 1.0}, ["bad"], "at shape 'bad' (example_inputs(0, shape='bad')): the forward of "),
    ({"ok": 0.5, "empty": 0.5}, None, "returns no elements at shape 'empty'"),
])
def test_every_shape_runs_its_forward_at_start_up(tmp_path: Path, shapes: dict, verify: list | None,
                                                  message: str) -> None:
    path = tmp_path / "model.py"
    sizes = {"ok": (4, 8), "bad": (4, 5), "empty": (0, 8)}
    path.write_text(
        "import torch\n\nclass M(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.lin = torch.nn.Linear(8, 8)\n\n"
        "    def forward(self, x):\n        return self.lin(x)\n\n\n"
        "def build_model():\n    return M()\n\n\n"
        f"def input_shapes():\n    return {shapes!r}\n\n\n"
        + (f"def verify_shapes():\n    return {verify!r}\n\n\n" if verify else "")
        + f"def example_inputs(seed=0, shape='ok'):\n    g = torch.Generator().manual_seed(seed)\n"
        f"    return (torch.randn(*{sizes!r}[shape], generator=g),)\n")
    from sktune.load import shape_weights
    from sktune.worker.startup import checked_inputs, verify_shape_names

    source = load_model_file(path)
    with torch.no_grad(), pytest.raises(ModelFileError, match=re.escape(message)):
        checked_inputs(source, build(source), list(shape_weights(source)), verify_shape_names(source), 2)


def test_a_contract_name_that_is_not_a_function_says_so(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("import torch\n\ndef build_model():\n    return torch.nn.Identity()\n\nexample_inputs = 3\n")
    with pytest.raises(ModelFileError, match="example_inputs in .* must be a function, got int"):
        load_model_file(path)
